"""Rates over the last minutes, for the charts: from the pipeline's rollups when the
pipeline runs and its windows cover the range (console.mesh.rollups), else computed
from consecutive snapshots in the stream. Bounded: at most ``MAX_ENTRIES`` snapshots
are read, the newest (and at most ``rollups.MAX_WINDOWS`` windows)."""

from __future__ import annotations

import bisect
import time

import msgspec
from django.conf import settings

from console.mesh import rollups
from console.mesh.sources import redis_client, stream
from model.mesh import Snapshot
from model.names import DEFAULT_VHOST

MAX_ENTRIES = 3000
RATES = ("enqueue", "ack", "forward", "redistribute")
_COUNTERS = dict(zip(RATES, ("enqueued", "acked", "forwarded_out", "redistributed_out"), strict=True))
_decode = msgspec.json.Decoder(Snapshot).decode


def rates(seconds: float = 300.0, queue: str | None = None, step: float = 1.0,
          vhost: str = DEFAULT_VHOST) -> list[dict]:
    """``[{t, enqueue, ack, forward, redistribute}]`` every ``step`` seconds, oldest first:
    each node's rate over the snapshot interval holding ``t``, summed over nodes (over
    one queue's partial queues when ``queue`` is given, of ``vhost``)."""
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
            if queue is None or (partial.name == queue and partial.vhost == vhost):
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


def chart(seconds: float = 300.0, queue: str | None = None, resolution: str | None = None,
          vhost: str = DEFAULT_VHOST) -> dict:
    """``{source, resolution, points}`` over the last ``seconds`` (the mesh, or one
    queue): ``source`` "pipeline" with the rollups' points at ``resolution`` (chosen
    from ``seconds`` when None) when the pipeline runs and its windows cover the range,
    else "snapshots" with :func:`rates` and no resolution."""
    now = time.time()
    since = now - seconds
    resolution = resolution or rollups.resolution_for(seconds)
    found = rollups.read(redis_client(), settings.MESHGATE["STREAM_PREFIX"], resolution, since, now, queue=queue,
                         vhost=vhost, snapshots_stream=stream("snapshots"))
    if rollups.is_running(found.status, now) and found.covers(since, now):
        return {"source": "pipeline", "resolution": found.resolution, "points": rollups.points(found, now)}
    return {"source": "snapshots", "resolution": None, "points": rates(seconds, queue=queue, vhost=vhost)}
