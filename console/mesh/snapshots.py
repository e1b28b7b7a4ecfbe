"""Nodes' latest snapshots, read from the stream when a page needs a node's own
figures (its partial queues, links, subscriptions) rather than the shared rows."""

from __future__ import annotations

import msgspec

from model.mesh import Snapshot

_decode = msgspec.json.Decoder(Snapshot).decode
_PAGE = 500


def latest(client, stream: str, node_ids: set[str], look_back: int = 20_000) -> dict[str, Snapshot]:
    """The newest snapshot of each of ``node_ids`` among the last ``look_back`` entries."""
    wanted = {node_id.encode() for node_id in node_ids}
    found: dict[str, Snapshot] = {}
    start = "+"
    read = 0
    while wanted and read < look_back:
        page = client.xrevrange(stream, start, "-", count=_PAGE)
        if not page:
            break
        for _, fields in page:
            node = fields.get(b"node", b"")
            if node in wanted:
                try:
                    found[node.decode()] = _decode(fields[b"data"])
                except (KeyError, msgspec.DecodeError, msgspec.ValidationError):
                    continue
                wanted.discard(node)
        read += len(page)
        start = "(" + page[-1][0].decode()
    return found
