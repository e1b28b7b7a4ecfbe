"""The driver half of the rollups: turn each micro-batch's per-window rows into
counts (differences of the nodes' cumulative counters, on columns:
``pipeline.counting``), add them to the open windows (columns too:
``pipeline.window_counts``) and write everything to Redis in one transaction.

Exactly once: the transaction that writes a batch's windows also writes the last
entry id applied per stream, the counters seen last per partial queue, the
watermark and the batch id. A replayed batch finds its batch id recorded, and
its entries already applied are not read again (``meshgate_partials`` starts
after the recorded ids), so nothing counts twice, however the job died.
Everything this class keeps in memory is a cache of what is in Redis: a new
instance carries on where the last transaction left off.

Counters are cumulative per node start (``boot``, the node's ``started_at``): a
window's count is the last value in it minus the last value before it. A partial
queue counts from zero when it first shows up, except in the first snapshot the
pipeline saw of a start it joined late (``seq`` > 1: the pipeline began after
the node): that one is only a baseline. So a restart of a node or of the
pipeline never shows a negative or a spike."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from model import latency
from model.rollups import (
    CLUSTER_FIELD,
    COUNTERS,
    RESOLUTIONS,
    ClusterWindow,
    Counts,
    PipelineStatus,
    QueueWindow,
    index_key,
    parse_queue_field,
    queue_field,
    queue_key,
    split_queue_key,
    status_key,
    window_key,
)
from pipeline import counting
from pipeline.decode import WINDOW_SECONDS
from pipeline.transform import Collected, WindowColumns
from pipeline.window_counts import Block, WindowCounts

_ZEROS = (0,) * len(COUNTERS)
STATE_TTL_S = 7 * 24 * 3600  # a partial queue's last counters, kept for a node that comes back
DEFAULT_RETENTION_S = {"10s": 6 * 3600, "1m": 7 * 24 * 3600}
_FIRST_SEEN = "\x00first-seen"  # the state field holding the first seq seen of a node start


class PartialState(msgspec.Struct, array_like=True):
    """The last counters applied for one partial queue of one node start."""

    seq: int
    counters: list[int]
    latency: list[int]
    latency_sum_ms: float


@dataclass
class Window:
    resolution: str
    start: float
    seconds: int
    counts: WindowCounts = field(default_factory=WindowCounts)  # per partial queue
    events: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> kind -> count
    dirty: set[str] = field(default_factory=set)  # queues changed since written
    touched: bool = False

    @property
    def end(self) -> float:
        return self.start + self.seconds


@dataclass
class Settings:
    prefix: str = "meshgate"
    watermark_s: float = 120.0  # how late (event time) an entry may come and still count
    retention_s: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_RETENTION_S))
    master: str = ""

    @property
    def snapshots(self) -> str:
        return f"{self.prefix}:snapshots"

    @property
    def events(self) -> str:
        return f"{self.prefix}:events"


_encode = msgspec.json.Encoder().encode
_state_decode = msgspec.json.Decoder(PartialState).decode
_queue_decode = msgspec.json.Decoder(QueueWindow).decode
_cluster_decode = msgspec.json.Decoder(ClusterWindow).decode
_status_decode = msgspec.json.Decoder(PipelineStatus).decode


class Rollups:
    """Applies micro-batches; one instance per running query (``reset`` after a failure)."""

    def __init__(self, client: Any, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self.status: PipelineStatus | None = None
        self._states: dict[tuple[str, float, str], PartialState | None] = {}
        self._first_seen: dict[tuple[str, float], int | None] = {}
        self._windows: dict[tuple[str, float], Window] = {}
        self.started_at = time.time()

    def reset(self) -> None:
        """Forget the caches; the next batch reads what Redis holds."""
        self.status = None
        self._states.clear()
        self._first_seen.clear()
        self._windows.clear()

    def load(self) -> PipelineStatus | None:
        raw = self.client.get(status_key(self.settings.prefix))
        self.status = _status_decode(raw) if raw else None
        return self.status

    @property
    def watermark(self) -> float:
        return self.status.watermark if self.status else 0.0

    def applied(self, pipeline: str, batch: int) -> bool:
        return self.status is not None and self.status.pipeline == pipeline and batch <= self.status.batch

    # -- one micro-batch ------------------------------------------------------------------

    def apply(self, pipeline: str, batch: int, collected: Collected, began: float | None = None) -> PipelineStatus:
        """Apply one micro-batch (``transform.collect``'s rows)."""
        began = time.time() if began is None else began
        windows = collected.windows  # a partial queue's windows in order: each counts from the last
        starts = counting.partial_queue_starts(windows)
        keys = [(windows.node[at], float(windows.boot[at]), windows.queue[at]) for at in starts.tolist()]
        self._load_states(set(keys), set(collected.boots))
        new_boots = {}
        for key, first_seq in collected.boots.items():
            if self._first_seen.get(key) is None:
                self._first_seen[key] = new_boots[key] = first_seq
        watermark = self.watermark
        window_starts = set(windows.window.tolist()) | {window for window, *_ in collected.events}
        self._load_windows({(name, _align(start, seconds)) for start in window_starts
                            if start + WINDOW_SECONDS > watermark for name, seconds in RESOLUTIONS.items()})
        changed_states: dict[tuple[str, float, str], PartialState] = {}
        if len(windows):
            bases = [self._base(key, windows, at) for key, at in zip(keys, starts.tolist(), strict=True)]
            counted, lasts = counting.count(windows, starts, bases, watermark)
            for key, at in zip(keys, lasts.tolist(), strict=True):
                if at >= 0:
                    self._states[key] = changed_states[key] = PartialState(
                        int(windows.last_seq[at]), windows.last[at].tolist(),
                        latency.trimmed(windows.last_latency[at].tolist()), float(windows.last_sum_ms[at]))
            for name, seconds in RESOLUTIONS.items():
                self._add(name, counting.by_window(counted, seconds))
        for window_start, node, kind, count in collected.events:
            for name, seconds in RESOLUTIONS.items():
                window = self._windows[(name, _align(window_start, seconds))]
                by_kind = window.events.setdefault(node, {})
                by_kind[kind] = by_kind.get(kind, 0) + count
                window.touched = True
        status = self._next_status(pipeline, batch, collected.summary, began)
        self._write(changed_states, new_boots, status)
        self.status = status
        self._evict(status.watermark)
        return status

    def _base(self, key: tuple[str, float, str], windows: WindowColumns, first: int) -> counting.Base:
        """Where a partial queue counts from: the counters the rollups kept of it; else
        zero (it is new: it counts from zero), except in the first snapshot seen of a
        start the pipeline joined late, which is only a baseline."""
        state = self._states.get(key)
        if state is not None:
            return counting.Base(state.seq, state.counters, state.latency, state.latency_sum_ms, True)
        first_seq = int(windows.first_seq[first])
        if first_seq > (self._first_seen.get(key[:2]) or 1) or first_seq == 1:
            return counting.Base(0, _ZEROS, [], 0.0, False)
        return counting.Base(first_seq, windows.first[first].tolist(), windows.first_latency[first].tolist(),
                             float(windows.first_sum_ms[first]), False)

    def _add(self, name: str, counted: counting.Counted) -> None:
        """Counted windows of resolution ``name`` added to the windows they fall in."""
        if not len(counted):
            return
        counted = counted.take(np.argsort(counted.start, kind="stable"))  # each window's rows, in their order
        bounds = [0, *(np.flatnonzero(np.diff(counted.start)) + 1).tolist(), len(counted)]
        for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
            part = counted.take(slice(begin, end))
            window = self._windows[(name, float(part.start[0]))]
            window.counts.add(part)
            window.dirty.update(part.queue.tolist())
            window.touched = True

    def _next_status(self, pipeline: str, batch: int, summary: list[dict], began: float) -> PipelineStatus:
        before = self.status
        offsets = dict(before.offsets) if before else {}
        watermark = before.watermark if before else 0.0
        entries = malformed = late = 0
        for row in summary:
            entries += row["entries"]
            malformed += row["malformed"]
            late += row["late"]
            if row["last_id"] is not None:
                ms, seq = row["last_id"]
                offsets[row["stream"]] = f"{ms}-{seq}"
            if row["max_time"] is not None:
                watermark = max(watermark, row["max_time"] - self.settings.watermark_s)
        now = time.time()
        return PipelineStatus(
            pipeline=pipeline, batch=batch, applied_at=now, started_at=self.started_at, master=self.settings.master,
            offsets=offsets, watermark=watermark, entries=(before.entries if before else 0) + entries,
            malformed=(before.malformed if before else 0) + malformed, late=(before.late if before else 0) + late,
            batch_entries=entries, batch_seconds=round(now - began, 3),
        )

    # -- Redis ----------------------------------------------------------------------------

    def _state_key(self, node: str, boot: float) -> str:
        return f"{self.settings.prefix}:pipeline:state:{node}:{boot!r}"

    def _load_states(self, keys: set[tuple[str, float, str]], boots: set[tuple[str, float]]) -> None:
        missing = [key for key in keys if key not in self._states]
        missing_boots = [key for key in boots | {key[:2] for key in keys} if key not in self._first_seen]
        if not missing and not missing_boots:
            return
        pipe = self.client.pipeline(transaction=False)
        for node, boot, queue in missing:
            pipe.hget(self._state_key(node, boot), queue)
        for node, boot in missing_boots:
            pipe.hget(self._state_key(node, boot), _FIRST_SEEN)
        answers = pipe.execute()
        for key, raw in zip(missing, answers[:len(missing)], strict=True):
            self._states[key] = _state_decode(raw) if raw else None
        for key, raw in zip(missing_boots, answers[len(missing):], strict=True):
            self._first_seen[key] = int(raw) if raw else None

    def _load_windows(self, wanted: set[tuple[str, float]]) -> None:
        missing = [key for key in wanted if key not in self._windows]
        if not missing:
            return
        pipe = self.client.pipeline(transaction=False)
        for name, start in missing:
            pipe.hgetall(window_key(self.settings.prefix, name, start))
        for (name, start), stored in zip(missing, pipe.execute(), strict=True):
            window = Window(name, start, RESOLUTIONS[name])
            queues = {}
            for raw_field, raw in stored.items():
                name_field = raw_field.decode()
                if name_field == CLUSTER_FIELD:
                    window.events = _cluster_decode(raw).node_events
                elif (queue := parse_queue_field(name_field)) is not None:
                    vhost, queue_name = queue
                    queues[queue_key(queue_name, vhost)] = _queue_decode(raw).nodes
            window.counts = WindowCounts.stored(queues)
            self._windows[(name, start)] = window

    def _write(self, states: dict[tuple[str, float, str], PartialState], boots: dict[tuple[str, float], int],
               status: PipelineStatus) -> None:
        prefix = self.settings.prefix
        pipe = self.client.pipeline(transaction=True)
        by_start: dict[tuple[str, float], dict[str, bytes | int]] = {
            key: {_FIRST_SEEN: first} for key, first in boots.items()}
        for (node, boot, queue), state in states.items():
            by_start.setdefault((node, boot), {})[queue] = _encode(state)
        for (node, boot), fields in by_start.items():
            key = self._state_key(node, boot)
            pipe.hset(key, mapping=fields)
            pipe.expire(key, STATE_TTL_S)
        now = time.time()
        for window in self._windows.values():
            if not window.touched:
                continue
            key = window_key(prefix, window.resolution, window.start)
            pipe.hset(key, mapping=_documents(window, now))
            retention = self.settings.retention_s.get(window.resolution, DEFAULT_RETENTION_S[window.resolution])
            pipe.expireat(key, int(window.end + retention))
            pipe.zadd(index_key(prefix, window.resolution), {str(int(window.start)): window.start})
            pipe.zremrangebyscore(index_key(prefix, window.resolution), "-inf", now - retention)
        pipe.set(status_key(prefix), _encode(status))
        pipe.execute()
        for window in self._windows.values():
            window.dirty.clear()
            window.touched = False

    def _evict(self, watermark: float) -> None:
        for key in [key for key, window in self._windows.items() if window.end <= watermark]:
            del self._windows[key]


# -- documents ------------------------------------------------------------------------------


def _documents(window: Window, now: float) -> dict[str, bytes]:
    """The window's fields to write: a ``QueueWindow`` per queue changed since written,
    and the ``ClusterWindow``."""
    fields: dict[str, bytes] = {}
    if window.dirty:
        queues, bounds, nodes, partials, totals = window.counts.by_queue(window.dirty)
        made = _counts(partials)
        for key, begin, end, total in zip(queues, bounds[:-1], bounds[1:], _counts(totals), strict=True):
            vhost, queue = split_queue_key(key)
            fields[queue_field(queue, vhost)] = _encode(QueueWindow(
                queue=queue, vhost=vhost, start=window.start, seconds=window.seconds, total=total,
                nodes=dict(zip(nodes[begin:end], made[begin:end], strict=True))))
    names, node_totals, total = window.counts.by_node()
    events: dict[str, int] = {}
    for by_kind in window.events.values():
        for kind, count in by_kind.items():
            events[kind] = events.get(kind, 0) + count
    fields[CLUSTER_FIELD] = _encode(ClusterWindow(
        start=window.start, seconds=window.seconds, total=_counts(total)[0],
        nodes=dict(zip(names, _counts(node_totals), strict=True)), queues=len(window.counts.queues), events=events,
        node_events=window.events, updated_at=now))
    return fields


def _positional_counts() -> type:
    """``Counts`` with the same fields, defaults and JSON, made from positional
    arguments: ``map`` makes a document's 1,000 of them in one C call."""
    fields = []
    for info in msgspec.structs.fields(Counts):
        if info.default_factory is not msgspec.NODEFAULT:
            fields.append((info.name, info.type, msgspec.field(default_factory=info.default_factory)))
        else:
            fields.append((info.name, info.type, info.default))
    return msgspec.defstruct("Counts", fields, omit_defaults=True, gc=False)


_CountsRow = _positional_counts()
COUNTS_ORDER = ("published", *COUNTERS, "depth_last", "depth_max", "consumers", "in_flight", "latency",
                "latency_sum_ms", "p50_ms", "p95_ms", "p99_ms", "at")
assert _CountsRow.__struct_fields__ == COUNTS_ORDER, "Counts' fields moved: _counts gives them in this order"


def _counts(block: Block) -> list[Any]:
    """A ``Counts`` (encoded the same, as ``_CountsRow``) per row of ``block``, with the
    percentiles of its histogram."""
    p50, p95, p99 = counting.percentiles(block.latency)
    return list(map(_CountsRow, block.published.tolist(), *block.counters.T.tolist(), block.depth_last.tolist(),
                    block.depth_max.tolist(), block.consumers.tolist(), block.in_flight.tolist(),
                    counting.trimmed_rows(block.latency), block.sum_ms.tolist(), p50, p95, p99, block.at.tolist()))


def _align(t: float, seconds: int) -> float:
    return float(int(t // seconds) * seconds)

