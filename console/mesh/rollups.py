"""The metrics pipeline's rollups (docs/pipeline.md, "Rollup keys in Redis"), read
for the charts: the pipeline's status, and the windows of a time range at one
resolution, decoded with the model's own shapes (model/rollups.py).

A read is bounded: one round trip for the status, the index range (at most
``MAX_WINDOWS`` windows, the newest) and the oldest snapshot, then one pipelined
``HGET`` per window. The pipeline *runs* when its status was written within
``stale_after(status)`` seconds."""

from __future__ import annotations

import time
from dataclasses import dataclass

import msgspec

from model.names import DEFAULT_VHOST
from model.rollups import (
    CLUSTER_FIELD,
    RESOLUTIONS,
    ClusterWindow,
    PipelineStatus,
    QueueWindow,
    index_key,
    queue_field,
    status_key,
    window_key,
)

STALE_MIN_S = 30.0  # the pipeline is not running once its last batch is older than this …
STALE_BATCHES = 3  # … or than this many of its last batch's durations, if longer
MAX_WINDOWS = 400  # windows read at most (an hour of 10-second windows is 360)
SHORT_RANGE_S = 15 * 60  # ranges up to this are charted from 10-second windows, longer ones from 1-minute windows

_status = msgspec.json.Decoder(PipelineStatus).decode
_cluster = msgspec.json.Decoder(ClusterWindow).decode
_queue = msgspec.json.Decoder(QueueWindow).decode


def stale_after(status: PipelineStatus | None) -> float:
    """Seconds after its last batch when the pipeline no longer counts as running: 30 s,
    or three times its last batch's duration when that is longer (a pipeline catching
    up on a backlog applies big batches slowly). The status does not carry the trigger
    interval; a batch's duration is what the next one waits for at least."""
    if status is None:
        return STALE_MIN_S
    return max(STALE_MIN_S, STALE_BATCHES * status.batch_seconds)


def age(status: PipelineStatus, now: float | None = None) -> float:
    """Seconds since the last batch was applied (0 when the pipeline's clock is ahead)."""
    return max(0.0, (time.time() if now is None else now) - status.applied_at)


def is_running(status: PipelineStatus | None, now: float | None = None) -> bool:
    """The pipeline's status exists and was written lately."""
    return status is not None and age(status, now) <= stale_after(status)


def read_status(client, prefix: str) -> PipelineStatus | None:
    raw = client.get(status_key(prefix))
    return _decode_or_none(_status, raw)


def resolution_for(seconds: float) -> str:
    """The resolution a range is charted at: 10-second windows up to 15 minutes, else 1-minute."""
    return "10s" if seconds <= SHORT_RANGE_S else "1m"


@dataclass
class Windows:
    """What one read found: the status, the windows of the range (oldest first; ``None``
    where a window has no field for what was asked) and the oldest snapshot's time."""

    status: PipelineStatus | None
    resolution: str
    seconds: int  # one window's length
    starts: list[float]
    windows: list[ClusterWindow | QueueWindow | None]
    oldest_snapshot: float | None  # epoch seconds, from the stream entry's id

    def covers(self, since: float, now: float) -> bool:
        """Whether the windows chart ``[since, now]`` at least as far back as the snapshots
        would: the oldest window begins by the later of ``since`` and the oldest snapshot
        still kept (give or take a window), and the newest reaches the present, give or
        take the freshness threshold and a window (the pipeline is not catching up on a
        backlog)."""
        if not self.starts:
            return False
        need = since if self.oldest_snapshot is None else max(since, self.oldest_snapshot)
        reaches_back = self.starts[0] <= need + self.seconds
        reaches_now = self.starts[-1] + 2 * self.seconds >= now - stale_after(self.status)
        return reaches_back and reaches_now


def read(client, prefix: str, resolution: str, since: float, until: float, queue: str | None = None,
         snapshots_stream: str | None = None, when_running: bool = True, vhost: str = DEFAULT_VHOST) -> Windows:
    """The status and the windows overlapping ``[since, until]`` at ``resolution``: the
    cluster (``queue`` None) or one queue (of ``vhost``); ``when_running``: the windows only if the
    pipeline runs (else ``windows`` is empty). Raises KeyError for an unknown resolution."""
    seconds = RESOLUTIONS[resolution]
    pipe = client.pipeline(transaction=False)
    pipe.get(status_key(prefix))
    # Windows are indexed by their start: those overlapping the range start after since - seconds.
    pipe.zrevrangebyscore(index_key(prefix, resolution), until, f"({since - seconds}", start=0, num=MAX_WINDOWS,
                          withscores=True)
    if snapshots_stream is not None:
        pipe.xrange(snapshots_stream, "-", "+", count=1)
    answers = pipe.execute()
    status = _decode_or_none(_status, answers[0])
    starts = sorted(score for _, score in answers[1])
    oldest = None
    if snapshots_stream is not None and answers[2]:
        oldest = int(answers[2][0][0].split(b"-")[0]) / 1000.0
    field = CLUSTER_FIELD if queue is None else queue_field(queue, vhost)
    decode = _cluster if queue is None else _queue
    windows: list = []
    if when_running and not is_running(status):
        starts = []
    elif starts:
        pipe = client.pipeline(transaction=False)
        for start in starts:
            pipe.hget(window_key(prefix, resolution, start), field)
        windows = [_decode_or_none(decode, raw) for raw in pipe.execute()]
    return Windows(status=status, resolution=resolution, seconds=seconds, starts=starts, windows=windows,
                   oldest_snapshot=oldest)


# What a point says, from a window's total (model.rollups.Counts): rates per second
# (the count over the window's length) and gauges as they are.
RATE_COUNTS = {"enqueue": "published", "ack": "acked", "forward": "forwarded_out",
               "redistribute": "redistributed_out", "dead_lettered": "dead_lettered", "expired": "expired"}
GAUGES = ("depth_last", "depth_max", "consumers")
PERCENTILES = ("p50_ms", "p95_ms", "p99_ms")


def points(found: Windows, now: float | None = None) -> list[dict]:
    """A chart point per window that holds what was asked, oldest first: ``t`` (the
    window's start), rates per second (enqueue counts what clients published, each
    message once, like the snapshots' rates), the depth and consumers at the window's
    last snapshot, its deepest depth, and its latency percentiles (None without acks).
    The window still open (``partial``) divides by the part of it its last snapshot
    covers, so the chart does not dip at the present."""
    now = time.time() if now is None else now
    result = []
    for start, window in zip(found.starts, found.windows, strict=True):
        if window is None:
            continue
        total = window.total
        length = float(window.seconds or found.seconds)
        partial = start + length > now
        if partial and total.at > start:
            length = min(length, max(1.0, total.at - start))
        point: dict = {"t": start}
        for name, counter in RATE_COUNTS.items():
            point[name] = getattr(total, counter) / length
        for name in GAUGES:
            point[name] = getattr(total, name)
        for name in PERCENTILES:
            point[name] = getattr(total, name) if total.latency else None
        point["partial"] = partial
        result.append(point)
    return result


def _decode_or_none(decode, raw):
    if not raw:
        return None
    try:
        return decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
