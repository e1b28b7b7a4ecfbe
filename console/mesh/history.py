"""Rates over the last minutes, computed from consecutive snapshots in the stream
(the pipeline's rollups replace this when the pipeline runs, and reach further
back). Bounded: at most ``MAX_ENTRIES`` snapshots are read, the newest."""

from __future__ import annotations

import bisect
import time

import msgspec

from console.mesh.sources import redis_client, stream
from model.mesh import Snapshot

MAX_ENTRIES = 3000
RATES = ("enqueue", "ack", "forward", "redistribute")
_COUNTERS = dict(zip(RATES, ("enqueued", "acked", "forwarded_out", "redistributed_out"), strict=True))
_decode = msgspec.json.Decoder(Snapshot).decode


def rates(seconds: float = 300.0, queue: str | None = None, step: float = 1.0) -> list[dict]:
    """``[{t, enqueue, ack, forward, redistribute}]`` every ``step`` seconds, oldest first:
    each node's rate over the snapshot interval holding ``t``, summed over nodes (over
    one queue's partial queues when ``queue`` is given)."""
    now = time.time()
    entries = redis_client().xrevrange(stream("snapshots"), "+", f"{int((now - seconds) * 1000)}-0",
                                       count=MAX_ENTRIES)
    last: dict[str, tuple[float, float, dict[str, int]]] = {}
    spans: dict[str, list[tuple[float, float, dict[str, float]]]] = {}  # node -> [(from, to, rates)]
    for _, fields in reversed(entries):
        try:
            snapshot = _decode(fields[b"data"])
        except (KeyError, msgspec.DecodeError, msgspec.ValidationError):
            continue
        totals = dict.fromkeys(RATES, 0)
        for partial in snapshot.queues:
            if queue is None or partial.name == queue:
                for rate, counter in _COUNTERS.items():
                    totals[rate] += getattr(partial, counter)
                totals["enqueue"] -= partial.forwarded_in + partial.redistributed_in  # sent once, counted once
        node = snapshot.node
        before = last.get(node.id)
        last[node.id] = (node.started_at, snapshot.taken_at, totals)
        if before is None or before[0] != node.started_at or snapshot.taken_at <= before[1]:
            continue  # the first look at a node, or it restarted: no rate yet
        interval = snapshot.taken_at - before[1]
        spans.setdefault(node.id, []).append((before[1], snapshot.taken_at, {
            rate: max(0, totals[rate] - before[2][rate]) / interval for rate in RATES}))
    if not spans:
        return []
    first = min(span[0][0] for span in spans.values())
    last_t = max(span[-1][1] for span in spans.values())
    points = []
    t = first + step
    while t <= last_t + 1e-9:
        point = dict.fromkeys(RATES, 0.0)
        for node_spans in spans.values():
            index = bisect.bisect_left([end for _, end, _ in node_spans], t)
            if index < len(node_spans) and node_spans[index][0] < t:
                for rate in RATES:
                    point[rate] += node_spans[index][2][rate]
        points.append({"t": round(t, 3), **point})
        t += step
    return points
