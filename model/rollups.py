"""What the pipeline writes back to Redis: per-window rollups of the mesh's
snapshots and events, and the pipeline's own status. The console reads them; the
pipeline (``pipeline/``) writes them. docs/pipeline.md lists the keys and fields.

Windows are aligned event-time intervals (``start`` epoch seconds, ``seconds``
long) at each resolution in ``RESOLUTIONS``. Counts are what happened inside the
window, from the difference of the nodes' cumulative counters; a rate is a count
divided by ``seconds``."""

from __future__ import annotations

from urllib.parse import quote, unquote

import msgspec

from model import latency
from model.names import DEFAULT_VHOST

SCHEMA_VERSION = 1
RESOLUTIONS: dict[str, int] = {"10s": 10, "1m": 60}  # name -> window length in seconds
COUNTERS: tuple[str, ...] = (
    "enqueued", "acked", "forwarded_out", "forwarded_in", "redistributed_out", "redistributed_in",
    "expired", "dead_lettered",
)


class Counts(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One window of a partial queue, a queue, a node or the whole mesh. Fields at
    their defaults are left out of the JSON."""

    published: int = 0  # sent by clients (enqueued minus what arrived over links): each message once
    enqueued: int = 0  # entered the partial queue(s), arrivals over links included
    acked: int = 0
    forwarded_out: int = 0
    forwarded_in: int = 0
    redistributed_out: int = 0
    redistributed_in: int = 0
    expired: int = 0
    dead_lettered: int = 0
    depth_last: int = 0  # messages waiting at the last snapshot in the window
    depth_max: int = 0  # the most waiting at any snapshot (summed over nodes: an upper bound)
    consumers: int = 0  # at the last snapshot
    in_flight: int = 0  # at the last snapshot
    latency: list[int] = []  # acks in the window by end-to-end latency, model.latency buckets (trimmed)
    latency_sum_ms: float = 0.0
    p50_ms: float | None = None  # from ``latency``, within a factor of two
    p95_ms: float | None = None
    p99_ms: float | None = None
    at: float = 0.0  # a partial queue's last snapshot time (the "last" in depth_last)


class QueueWindow(msgspec.Struct, kw_only=True):
    """One queue across the mesh in one window: the total and each node's partial queue."""

    schema_version: int = SCHEMA_VERSION
    queue: str
    vhost: str = DEFAULT_VHOST  # absent in windows written before vhosts: "/"
    start: float
    seconds: int
    total: Counts
    nodes: dict[str, Counts] = {}


class ClusterWindow(msgspec.Struct, kw_only=True):
    """The whole mesh in one window: the total over every queue, each node's total,
    and the events seen, by kind (and by node, then kind)."""

    schema_version: int = SCHEMA_VERSION
    start: float
    seconds: int
    total: Counts
    nodes: dict[str, Counts] = {}
    queues: int = 0  # queues with a partial queue reported in the window
    events: dict[str, int] = {}
    node_events: dict[str, dict[str, int]] = {}
    updated_at: float = 0.0


class PipelineStatus(msgspec.Struct, kw_only=True):
    """What the pipeline last did; written with every micro-batch it applies."""

    schema_version: int = SCHEMA_VERSION
    pipeline: str  # the checkpoint's id: batch ids count within it
    batch: int  # the last micro-batch applied
    applied_at: float
    started_at: float
    master: str  # where Spark runs: local[2], spark://…
    offsets: dict[str, str] = {}  # stream key -> the last entry id applied
    watermark: float = 0.0  # event time before which windows are closed (late data is dropped)
    entries: int = 0  # stream entries applied since the pipeline's state began
    malformed: int = 0  # entries skipped because they could not be read
    late: int = 0  # entries dropped for arriving after their window closed
    batch_entries: int = 0  # entries in the last micro-batch
    batch_seconds: float = 0.0  # how long the last micro-batch took to apply


def with_percentiles(counts: Counts) -> Counts:
    """``counts`` with p50/p95/p99 filled in from its histogram."""
    if counts.latency:
        counts.p50_ms, counts.p95_ms, counts.p99_ms = latency.percentiles_ms(counts.latency, (0.50, 0.95, 0.99))
    return counts


def window_key(prefix: str, resolution: str, start: float) -> str:
    """The hash holding one window: field ``cluster`` (a ClusterWindow) and one field
    per queue reported in it (a QueueWindow, ``queue_field``)."""
    return f"{prefix}:rollup:{resolution}:{int(start)}"


def index_key(prefix: str, resolution: str) -> str:
    """A sorted set of the windows written at a resolution, scored by start."""
    return f"{prefix}:rollup:{resolution}:index"


def status_key(prefix: str) -> str:
    return f"{prefix}:pipeline:status"


CLUSTER_FIELD = "cluster"


_VHOST_QUEUE = "vhost-queue:"
QUEUE_KEY_SEPARATOR = "\x1f"  # in no name (names have no control characters): a vhost's queue key is unambiguous


def queue_field(name: str, vhost: str = DEFAULT_VHOST) -> str:
    """A queue's field in a window's hash: ``queue:<name>`` in the default vhost (as
    before vhosts, so windows written then read the same), else
    ``vhost-queue:<vhost, percent-encoded>/<name>`` (``vhost-queue:team-a/orders``)."""
    if vhost == DEFAULT_VHOST:
        return f"queue:{name}"
    return f"{_VHOST_QUEUE}{quote(vhost, safe='')}/{name}"


def parse_queue_field(field: str) -> tuple[str, str] | None:
    """(vhost, name) of a ``queue_field``; None if ``field`` is not one."""
    if field.startswith("queue:"):
        return DEFAULT_VHOST, field[len("queue:"):]
    if field.startswith(_VHOST_QUEUE):
        vhost, slash, name = field[len(_VHOST_QUEUE):].partition("/")
        return (unquote(vhost), name) if slash else None
    return None


def queue_key(name: str, vhost: str = DEFAULT_VHOST) -> str:
    """One string for a queue of a vhost, as the pipeline keys its partial queues: the
    name in the default vhost (the keys from before vhosts), else vhost, a separator
    no name holds, and the name."""
    return name if vhost == DEFAULT_VHOST else f"{vhost}{QUEUE_KEY_SEPARATOR}{name}"


def split_queue_key(key: str) -> tuple[str, str]:
    """(vhost, name) of a ``queue_key``."""
    vhost, separator, name = key.partition(QUEUE_KEY_SEPARATOR)
    return (vhost, name) if separator else (DEFAULT_VHOST, key)
