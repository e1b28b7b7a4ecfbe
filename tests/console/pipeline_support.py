"""Writing what the metrics pipeline writes (docs/pipeline.md, "Rollup keys in Redis")
into a real Redis, with the model's own shapes and key functions, as the pipeline
would: for the console's tests, which do not run Spark."""

from __future__ import annotations

import time

import msgspec

from model.rollups import (
    CLUSTER_FIELD,
    RESOLUTIONS,
    ClusterWindow,
    Counts,
    PipelineStatus,
    QueueWindow,
    index_key,
    queue_field,
    status_key,
    window_key,
    with_percentiles,
)

PREFIX = "meshgate"
# Acks by latency bucket (model.latency): 90 under 2.048 ms, 8 under 4.096 ms, 2 under 8.192 ms,
# so p50 2.048 ms, p95 4.096 ms, p99 8.192 ms.
LATENCY = [0] * 11 + [90, 8, 2]


def write_status(client, applied_at: float | None = None, batch_seconds: float = 0.4, batch: int = 7,
                 prefix: str = PREFIX) -> PipelineStatus:
    now = time.time()
    applied_at = now if applied_at is None else applied_at
    status = PipelineStatus(pipeline="test-checkpoint", batch=batch, applied_at=applied_at,
                            started_at=now - 600, master="local[2]", offsets={f"{prefix}:snapshots": "1-0"},
                            watermark=now - 120, entries=1234, batch_entries=12, batch_seconds=batch_seconds)
    client.set(status_key(prefix), msgspec.json.encode(status))
    return status


def counts(window: int, latency: list[int] | None = None) -> Counts:
    """A window's counts that differ from window to window (``window`` 0, 1, …)."""
    total = Counts(published=100 + 10 * window, enqueued=130 + 10 * window, acked=90 + window, forwarded_out=30,
                   forwarded_in=30, redistributed_out=5 * (window % 3), expired=window % 2, dead_lettered=3,
                   depth_last=40 + window, depth_max=55 + window, consumers=2, in_flight=1,
                   latency=list(latency or []), latency_sum_ms=250.0 if latency else 0.0, at=0.0)
    return with_percentiles(total)


def write_window(client, resolution: str, start: float, cluster: Counts, queues: dict[str, Counts] | None = None,
                 prefix: str = PREFIX) -> None:
    seconds = RESOLUTIONS[resolution]
    cluster.at = cluster.at or start + seconds - 0.5
    fields = {CLUSTER_FIELD: msgspec.json.encode(ClusterWindow(
        start=start, seconds=seconds, total=cluster, nodes={"node-a": cluster}, queues=len(queues or {}),
        updated_at=time.time()))}
    for name, total in (queues or {}).items():
        total.at = total.at or start + seconds - 0.5
        fields[queue_field(name)] = msgspec.json.encode(QueueWindow(queue=name, start=start, seconds=seconds,
                                                                    total=total, nodes={"node-a": total}))
    pipe = client.pipeline(transaction=True)
    pipe.hset(window_key(prefix, resolution, start), mapping=fields)
    pipe.zadd(index_key(prefix, resolution), {str(int(start)): start})
    pipe.execute()


def write_windows(client, resolution: str, since: float, until: float, queue: str | None = None,
                  latency: list[int] | None = None, prefix: str = PREFIX) -> dict[float, Counts]:
    """Windows from the one holding ``since`` to the last closed one before ``until``,
    cluster and (``queue``) one queue with the same counts; returns them by start."""
    seconds = RESOLUTIONS[resolution]
    start = float(int(since // seconds) * seconds)
    written = {}
    index = 0
    while start + seconds <= until:
        total = counts(index, latency)
        write_window(client, resolution, start, total, {queue: counts(index, latency)} if queue else None, prefix)
        written[start] = total
        start += seconds
        index += 1
    return written


def clear(client, prefix: str = PREFIX) -> None:
    keys = [status_key(prefix)]
    for resolution in RESOLUTIONS:
        keys.append(index_key(prefix, resolution))
        keys.extend(client.keys(f"{prefix}:rollup:{resolution}:[0-9]*"))
    client.delete(*keys)
