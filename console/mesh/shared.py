"""The view of the mesh, computed once by the live worker and shared through Redis.

Decoding every node's snapshots and summing a hundred thousand partial queues is
work for one process, not for each web process on every refresh: the worker
(``meshwatch``) writes each frame it computes — the node, link and queue rows and
totals to ``<prefix>:console:frame``, and each queue's per-node breakdown to the
hashes ``<prefix>:console:queue-where`` (compact, for lists) and
``<prefix>:console:queue-parts`` (in full), only for the queues that changed — and web
processes read the frame when its version changes and a queue's parts when a page
shows it. It is a cache of what the streams say: rebuilt from them at any time."""

from __future__ import annotations

import msgspec

from console.mesh.frame import MeshFrame
from console.mesh.shapes import LinkRow, NodeRow, Overview, QueueDetail, QueuePart, QueueRow, QueueWhere

_encode = msgspec.msgpack.Encoder().encode
FRAME = "console:frame"
VERSION = "console:frame-version"
WHERE = "console:queue-where"
PARTS = "console:queue-parts"


class SharedFrameData(msgspec.Struct, kw_only=True):
    version: int
    taken_at: float
    overview: Overview
    nodes: list[NodeRow]
    links: list[LinkRow]
    queues: list[QueueRow]  # totals; the parts are in the hash


_decode_frame = msgspec.msgpack.Decoder(SharedFrameData).decode
_decode_parts = msgspec.msgpack.Decoder(list[QueuePart]).decode
_decode_where = msgspec.msgpack.Decoder(list[QueueWhere]).decode


class Publisher:
    """The worker's side: writes each frame, and the parts of the queues that changed."""

    def __init__(self, client, prefix: str) -> None:
        self.client = client
        self.frame_key = f"{prefix}:{FRAME}"
        self.version_key = f"{prefix}:{VERSION}"
        self.keys = {"where": f"{prefix}:{WHERE}", "parts": f"{prefix}:{PARTS}"}
        self.version = 0
        self._held: dict[str, dict[str, bytes]] = {"where": {}, "parts": {}}  # what the hashes hold, by queue

    def publish(self, frame: MeshFrame) -> None:
        if not self.version:  # versions go on across restarts of the worker
            self.version = int(self.client.get(self.version_key) or 0)
        self.version += 1
        now = {"where": {row.key: _encode(frame.where(row.key)) for row in frame.queues},
               "parts": {row.key: _encode(frame.detail(row).nodes) for row in frame.queues}}
        links = [msgspec.structs.replace(link, ends=[]) for link in frame.links]
        data = SharedFrameData(version=self.version, taken_at=frame.taken_at, overview=frame.overview,
                               nodes=frame.nodes, links=links, queues=frame.queues)
        pipe = self.client.pipeline(transaction=True)  # the parts and the frame that names them, together
        for kind, values in now.items():
            held = self._held[kind]
            changed = {name: value for name, value in values.items() if held.get(name) != value}
            gone = [name for name in held if name not in values]
            if changed:
                pipe.hset(self.keys[kind], mapping=changed)
            if gone:
                pipe.hdel(self.keys[kind], *gone)
        pipe.set(self.frame_key, _encode(data))
        pipe.set(self.version_key, self.version)
        pipe.execute()
        self._held = now


class SharedFrame:
    """A frame as web processes read it: the same rows as :class:`MeshFrame`, where
    each queue is and its partial queues fetched from Redis when asked for."""

    def __init__(self, data: SharedFrameData, client, prefix: str) -> None:
        self.version = data.version
        self.taken_at = data.taken_at
        self.overview = data.overview
        self.nodes = data.nodes
        self.links = data.links
        self.queues = data.queues
        self.queue_index = {row.key: row for row in self.queues}  # by queue_key
        self.names = {row.id: row.name for row in self.nodes}
        self.states = {row.id: row.state for row in self.nodes}
        self._client = client
        self._prefix = prefix

    def detail(self, row: QueueRow) -> QueueDetail:
        data = self._client.hget(f"{self._prefix}:{PARTS}", row.key)
        return QueueDetail(**msgspec.structs.asdict(row) | {"nodes": _decode_parts(data) if data else []})

    def with_where_of(self, rows: list[QueueRow]) -> list[QueueRow]:
        """The rows with where each queue is, in one round trip to Redis."""
        if not rows:
            return []
        found = self._client.hmget(f"{self._prefix}:{WHERE}", [row.key for row in rows])
        return [msgspec.structs.replace(row, nodes=_decode_where(data) if data else [])
                for row, data in zip(rows, found, strict=True)]


def read(client, prefix: str, known: SharedFrame | None) -> SharedFrame | None:
    """The frame the worker last shared (``known`` again if it has not changed), or None."""
    version = client.get(f"{prefix}:{VERSION}")
    if version is None:
        return None
    if known is not None and int(version) == known.version:
        return known
    data = client.get(f"{prefix}:{FRAME}")
    return SharedFrame(_decode_frame(data), client, prefix) if data is not None else None
