"""The nodes' events, read from their Redis stream, newest first."""

from __future__ import annotations

import msgspec

from console.mesh.sources import redis_client, stream
from model.events import AnyEvent

SCAN_LIMIT = 10_000  # newest entries looked through per request
_decode = msgspec.json.Decoder(AnyEvent).decode


def recent(kinds: list[str] | None = None, node: str | None = None, since: float | None = None,
           text: str | None = None, limit: int = SCAN_LIMIT) -> list[dict]:
    """Events matching the filters among the newest ``limit`` entries, newest first."""
    wanted = set(kinds or ())
    found = []
    for _, fields in redis_client().xrevrange(stream("events"), "+", "-", count=limit):
        if wanted and fields.get(b"kind", b"").decode() not in wanted:
            continue
        if node and fields.get(b"node", b"").decode() != node:
            continue
        data = fields.get(b"data", b"")
        if text and text.lower().encode() not in data.lower():
            continue
        try:
            event = _decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if since is not None and event.time <= since:
            continue  # not break: a node that was behind on Redis adds older events after newer ones
        found.append(msgspec.to_builtins(event))
    return found
