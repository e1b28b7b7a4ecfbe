"""The executors' half of a micro-batch, in plain Python: decode the stream entries
with msgspec and reduce a partition's worth of them to partial rows — per stream and window
(entries, malformed, newest time and id), per node start (its first snapshot),
per event window, node and kind (a count), and per partial queue, node start and
10-second window (the first and last counters, the deepest depth, the latest
gauges). ``pipeline.partials`` runs this inside the data source's read, so the
entries never cross into the JVM; the rows go to Spark as Arrow, built a column
at a time, and the driver merges those of all partitions (``transform``).
A node start's snapshots in one window are reduced together: their partial
queues are nearly always the same, so only the first and last snapshot are kept
and each partial queue costs one comparison (its depth) per snapshot.

Decoding uses the model's own field names, types and defaults (a projection of
``model.mesh.Snapshot`` to what the rollups use); an entry that does not decode
to it is malformed."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
from msgspec import inspect

from model.mesh import PartialQueue
from model.rollups import COUNTERS
from pipeline.source import id_key

WINDOW_SECONDS = 10  # the finest resolution; coarser windows are sums of these
GAUGES = ("depth", "in_flight", "consumers")


def _projection(name: str, source: type[msgspec.Struct], names: Iterable[str], required: set[str]) -> type:
    """A Struct of ``source``'s fields ``names`` with their types and defaults;
    those in ``required`` without a default."""
    import typing

    hints = typing.get_type_hints(source)
    fields: list[tuple] = []
    for field in inspect.type_info(source).fields:
        if field.encode_name not in names:
            continue
        annotation = hints[field.name]
        if field.encode_name in required or (field.default is inspect.NODEFAULT
                                             and field.default_factory is inspect.NODEFAULT):
            fields.append((field.encode_name, annotation))
        elif field.default_factory is not inspect.NODEFAULT:
            fields.append((field.encode_name, annotation, msgspec.field(default_factory=field.default_factory)))
        else:
            fields.append((field.encode_name, annotation, field.default))
    return msgspec.defstruct(name, fields, kw_only=True, gc=False)


_QUEUE_FIELDS = ("name", *GAUGES, *COUNTERS, "latency", "latency_sum_ms")
_Queue = _projection("_Queue", PartialQueue, _QUEUE_FIELDS, {"name"})


class _NodeRef(msgspec.Struct, gc=False):
    id: str
    started_at: float


class _Snapshot(msgspec.Struct, gc=False):  # no cycles: the collector need not track them
    seq: int
    taken_at: float
    node: _NodeRef
    queues: list[_Queue] = []


class _Event(msgspec.Struct, gc=False):
    time: float


_snapshot = msgspec.json.Decoder(_Snapshot).decode
_event = msgspec.json.Decoder(_Event).decode


def partials_schema() -> Any:
    """The rows ``reduce_entries`` gives, as Spark sees them: a ``StructType``, which
    (unlike a DDL string) a Python worker can turn into Arrow without a JVM."""
    from pyspark.sql.types import ArrayType, DoubleType, LongType, StringType, StructField, StructType

    def struct(*fields: tuple[str, Any]) -> StructType:
        return StructType([StructField(name, kind) for name, kind in fields])

    counters = struct(*((name, LongType()) for name in COUNTERS), ("latency", ArrayType(LongType())),
                      ("latency_sum_ms", DoubleType()))
    now = struct(("depth", LongType()), ("consumers", LongType()), ("in_flight", LongType()), ("at", DoubleType()))
    return struct(
        ("part", StringType()), ("stream", StringType()), ("entries", LongType()), ("malformed", LongType()),
        ("max_time", DoubleType()), ("last_ms", LongType()), ("last_seq", LongType()), ("node", StringType()),
        ("boot", DoubleType()), ("queue", StringType()), ("window", LongType()), ("first_seq", LongType()),
        ("first", counters), ("last", counters), ("depth_max", LongType()),
        ("now", now), ("kind", StringType()), ("count", LongType()),
    )


def reduce_entries(entries: Iterable[tuple], snapshots: str, events: str) -> Reduction:
    """The partial rows of some entries (``stream``, ``id``, ``node``, ``kind``,
    ``data`` tuples: str, or None where the entry lacks the field; ``data`` str
    or bytes). Whether a window is late is for the driver to say: it alone knows
    the watermark, and every row carries its window."""
    reduction = Reduction()
    summary, boots, counted, groups = reduction.summary, reduction.boots, reduction.counted, reduction.groups
    for stream, entry_id, node, kind, data in entries:
        position = id_key(entry_id)
        snapshot = event = None
        try:
            if stream == snapshots and data is not None:
                snapshot = _snapshot(data)
            elif stream == events and data is not None and kind is not None and node is not None:
                event = _event(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        if snapshot is None and event is None:
            _count(summary, stream, None, position, None)["malformed"] += 1
            continue
        time = snapshot.taken_at if snapshot is not None else event.time
        window = math.floor(time / WINDOW_SECONDS) * WINDOW_SECONDS
        _count(summary, stream, window, position, min(time, position[0] / 1000.0))  # a fast clock is capped
        if event is not None:
            counted[(window, node, kind)] = counted.get((window, node, kind), 0) + 1
            continue
        ref = snapshot.node
        seq = snapshot.seq
        boot_key = (ref.id, ref.started_at)
        if boots.get(boot_key, seq + 1) > seq:
            boots[boot_key] = seq
        key = (ref.id, ref.started_at, window)
        group = groups.get(key)
        if group is None:
            groups[key] = _Group(seq, snapshot, time)
        else:
            group.add(seq, snapshot, time)
    return reduction


class _Group:
    """The snapshots of one node start in one window, reduced: the first and the
    last (by ``seq``) and the deepest depth of each partial queue. While every
    snapshot has the same partial queues (nearly always) only the two snapshots are
    kept; once one differs, each partial queue keeps its own first and last."""

    __slots__ = ("first_seq", "first", "last_seq", "last", "time", "depths", "queues")

    def __init__(self, seq: int, snapshot: Any, time: float) -> None:
        self.first_seq = self.last_seq = seq
        self.first = self.last = snapshot
        self.time = time
        self.depths = {partial.name: partial.depth for partial in snapshot.queues}
        self.queues: dict[str, list] | None = None  # name -> [first seq, first, last seq, last, time]
        if len(self.depths) != len(snapshot.queues):  # a name twice: each partial queue on its own
            self.queues = {}
            self._add_each(seq, snapshot, time)

    def add(self, seq: int, snapshot: Any, time: float) -> None:
        depths = self.depths
        known = len(depths)
        for partial in snapshot.queues:
            if partial.depth > depths.get(partial.name, -1):
                depths[partial.name] = partial.depth
        if self.queues is None:
            if known == len(depths) == len(snapshot.queues):  # the same partial queues as before
                if seq < self.first_seq:
                    self.first_seq, self.first = seq, snapshot
                if seq > self.last_seq:
                    self.last_seq, self.last, self.time = seq, snapshot, time
                return
            self.queues = {}  # from here on, each partial queue on its own, starting from the two kept
            lasts = {partial.name: partial for partial in self.last.queues}
            for partial in self.first.queues:
                self.queues[partial.name] = [self.first_seq, partial, self.last_seq, lasts[partial.name], self.time]
        self._add_each(seq, snapshot, time)

    def _add_each(self, seq: int, snapshot: Any, time: float) -> None:
        queues = self.queues
        for partial in snapshot.queues:
            kept = queues.get(partial.name)
            if kept is None:
                queues[partial.name] = [seq, partial, seq, partial, time]
                continue
            if seq < kept[0]:
                kept[0], kept[1] = seq, partial
            if seq > kept[2]:
                kept[2], kept[3], kept[4] = seq, partial, time

    def partials(self) -> Iterator[tuple[int, Any, int, Any, float, int]]:
        """(first seq, first, last seq, last, time, deepest depth) per partial queue."""
        depths = self.depths
        if self.queues is not None:
            for name, (first_seq, first, last_seq, last, time) in self.queues.items():
                yield first_seq, first, last_seq, last, time, depths[name]
            return
        first_seq, last_seq, time = self.first_seq, self.last_seq, self.time
        if self.first is self.last:
            for partial in self.first.queues:
                yield first_seq, partial, last_seq, partial, time, partial.depth
            return
        lasts = {partial.name: partial for partial in self.last.queues}
        for partial in self.first.queues:
            yield first_seq, partial, last_seq, lasts[partial.name], time, depths[partial.name]


class Reduction:
    """What ``reduce_entries`` found, by kind: per stream and window, per node
    start, per event window, node and kind, and per node start and window."""

    def __init__(self) -> None:
        self.summary: dict[tuple, dict] = {}
        self.boots: dict[tuple, int] = {}
        self.counted: dict[tuple, int] = {}
        self.groups: dict[tuple, _Group] = {}

    def _small_rows(self) -> list[dict]:
        """The summary, boot and event rows (few: built as dicts)."""
        rows = list(self.summary.values())
        rows.extend({"part": "boot", "node": node, "boot": boot, "first_seq": seq}
                    for (node, boot), seq in self.boots.items())
        rows.extend({"part": "event", "window": window, "node": node, "kind": kind, "count": count}
                    for (window, node, kind), count in self.counted.items())
        return rows

    def queue_rows(self) -> list[tuple]:
        """(node, boot, queue, window, first seq, first, last seq, last, time, deepest depth)."""
        return [(node, boot, first.name, window, first_seq, first, last_seq, last, time, depth_max)
                for (node, boot, window), group in self.groups.items()
                for first_seq, first, last_seq, last, time, depth_max in group.partials()]

    def rows(self) -> list[dict]:
        """Every partial row as a dict, with ``part`` one of summary / boot / event / queue."""
        rows = self._small_rows()
        rows.extend({"part": "queue", "node": node, "boot": boot, "queue": name, "window": window,
                     "first_seq": first_seq, "first": _counters(first), "last_seq": last_seq,
                     "last": _counters(last), "depth_max": depth_max,
                     "now": {"depth": last.depth, "consumers": last.consumers, "in_flight": last.in_flight,
                             "at": time}}
                    for node, boot, name, window, first_seq, first, last_seq, last, time, depth_max
                    in self.queue_rows())
        return rows

    def record_batches(self, rows_per_batch: int = 10_000) -> Iterator[Any]:
        """The partial rows as Arrow record batches of ``partials_schema``, built a
        column at a time (a dict per row costs more than the decoding)."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(partials_schema())
        small = self._small_rows()
        if small:
            yield pa.RecordBatch.from_pylist(small, schema=schema)
        queues = self.queue_rows()
        for at in range(0, len(queues), rows_per_batch):
            yield _queue_batch(queues[at:at + rows_per_batch], schema)


def _queue_batch(rows: list[tuple], schema: Any) -> Any:
    import pyarrow as pa

    def column(name: str, values: list) -> Any:
        return pa.array(values, type=schema.field(name).type)

    def counters(index: int, name: str) -> Any:
        kind = schema.field(name).type
        partials = [row[index] for row in rows]
        children = [pa.array([getattr(p, counter) for p in partials], type=pa.int64()) for counter in COUNTERS]
        children.append(pa.array([p.latency for p in partials], type=pa.list_(pa.int64())))
        children.append(pa.array([p.latency_sum_ms for p in partials], type=pa.float64()))
        return pa.StructArray.from_arrays(children, fields=list(kind))

    size = len(rows)
    lasts = [row[7] for row in rows]
    now_kind = schema.field("now").type
    now = pa.StructArray.from_arrays([
        pa.array([p.depth for p in lasts], type=pa.int64()), pa.array([p.consumers for p in lasts], type=pa.int64()),
        pa.array([p.in_flight for p in lasts], type=pa.int64()), pa.array([row[8] for row in rows], pa.float64()),
    ], fields=list(now_kind))
    given = {
        "part": pa.array(["queue"] * size, type=pa.string()),
        "node": column("node", [row[0] for row in rows]), "boot": column("boot", [row[1] for row in rows]),
        "queue": column("queue", [row[2] for row in rows]), "window": column("window", [row[3] for row in rows]),
        "first_seq": column("first_seq", [row[4] for row in rows]), "first": counters(5, "first"),
        "last_seq": column("last_seq", [row[6] for row in rows]), "last": counters(7, "last"),
        "depth_max": column("depth_max", [row[9] for row in rows]), "now": now,
    }
    return pa.RecordBatch.from_arrays([given[field.name] if field.name in given else pa.nulls(size, field.type)
                                       for field in schema], schema=schema)


def _count(summary: dict, stream: str, window: int | None, position: tuple[int, int], time: float | None) -> dict:
    """The entry counted in its stream's and window's summary row (window None: malformed)."""
    totals = summary.get((stream, window))
    if totals is None:
        totals = summary[(stream, window)] = {"part": "summary", "stream": stream, "window": window, "entries": 0,
                                              "malformed": 0, "max_time": None, "last_ms": 0, "last_seq": 0}
    totals["entries"] += 1
    if position > (totals["last_ms"], totals["last_seq"]):
        totals["last_ms"], totals["last_seq"] = position
    if time is not None and (totals["max_time"] is None or time > totals["max_time"]):
        totals["max_time"] = time
    return totals


def _counters(partial: Any) -> dict:
    values = {name: getattr(partial, name) for name in COUNTERS}
    values["latency"] = partial.latency
    values["latency_sum_ms"] = partial.latency_sum_ms
    return values
