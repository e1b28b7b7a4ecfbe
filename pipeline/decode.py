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
and each partial queue costs one comparison (its depth) per snapshot. A snapshot
entry a node of this version wrote says whose it is, when it was taken and which
set of queues it has in fields of its own (``boot``, ``seq``, ``at``, ``queues``),
and each partial queue carries the deepest depth of the window so far: such a
window's snapshots are not decoded at all, only its first and last (``_Lazy``),
unless its set of queues changed in the window. Their JSON is then checked only
where it is used: an entry with good fields and bad JSON in the middle of a window
is not counted as malformed. A window's first snapshot matters only where it can
be a baseline (``Reduction.queue_rows``): elsewhere it is not even decoded.

Decoding uses the model's own field names, types and defaults (a projection of
``model.mesh.Snapshot`` to what the rollups use); an entry that does not decode
to it is malformed. A partial queue is known by its ``model.rollups.queue_key``
from its decoding on: its name in the default vhost, its vhost and name in another."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from itertools import chain
from operator import attrgetter
from typing import Any

import msgspec
from msgspec import inspect

from model.mesh import WINDOW_S, PartialQueue
from model.names import DEFAULT_VHOST
from model.rollups import COUNTERS, queue_key
from pipeline.source import id_key

WINDOW_SECONDS = WINDOW_S  # the finest resolution; coarser windows are sums of these
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


_QUEUE_FIELDS = ("name", "vhost", *GAUGES, *COUNTERS, "latency", "latency_sum_ms", "window_depth_max")
_Queue = _projection("_Queue", PartialQueue, _QUEUE_FIELDS, {"name"})
_vhost = attrgetter("vhost")
_DEFAULT_ONLY = {DEFAULT_VHOST}


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


_decode_snapshot = msgspec.json.Decoder(_Snapshot).decode
_event = msgspec.json.Decoder(_Event).decode


def _snapshot(data: Any) -> _Snapshot:
    """A snapshot decoded, each partial queue named by its ``queue_key``: the name in
    the default vhost (a snapshot from before vhosts has no other), so that two vhosts'
    queues of one name are two partial queues everywhere after."""
    snapshot = _decode_snapshot(data)
    queues: list[Any] = snapshot.queues
    if queues and set(map(_vhost, queues)) != _DEFAULT_ONLY:
        for partial in queues:
            partial.name = queue_key(partial.name, partial.vhost)
    return snapshot


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


def _deepest(partial: Any) -> int:
    return partial.depth if partial.depth > partial.window_depth_max else partial.window_depth_max


def reduce_entries(entries: Iterable[tuple], snapshots: str, events: str) -> Reduction:
    """The partial rows of some entries (``stream``, ``id``, ``node``, ``kind``,
    ``data``, ``head`` tuples: str, or None where the entry lacks the field;
    ``data`` str or bytes; ``head`` a snapshot's ``boot``, ``seq``, ``at`` and
    ``queues`` fields as bytes, or None). Whether a window is late is for the
    driver to say: it alone knows the watermark, and every row carries its window."""
    reduction = Reduction(snapshots)
    summary, boots, counted, groups = reduction.summary, reduction.boots, reduction.counted, reduction.groups
    for stream, entry_id, node, kind, data, head in entries:
        position = id_key(entry_id)
        if head is not None and stream == snapshots and node is not None and data is not None:
            try:
                boot, seq, time, version = float(head[0]), int(head[1]), float(head[2]), int(head[3])
            except (TypeError, ValueError):
                pass  # decoded in full below, and malformed if that fails too
            else:
                window = math.floor(time / WINDOW_SECONDS) * WINDOW_SECONDS
                _count(summary, stream, window, position, min(time, position[0] / 1000.0))
                boot_key = (node, boot)
                if boots.get(boot_key, seq + 1) > seq:
                    boots[boot_key] = seq
                key = (node, boot, window)
                group = groups.get(key)
                if group is None:
                    groups[key] = _Lazy(seq, data, version, time)
                elif not group.add_raw(seq, data, version, time):
                    if isinstance(group, _Lazy):  # its queues changed: each snapshot decoded from here on
                        group = groups[key] = group.decoded()
                        if group.add_raw(seq, data, version, time):
                            continue
                    summary[(stream, window)]["malformed"] += 1  # its JSON did not decode
                continue
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
        elif isinstance(group, _Lazy):
            groups[key] = group.decoded()
            groups[key].add(seq, snapshot, time)
        else:
            group.add(seq, snapshot, time)
    return reduction


def _decoded(data: Any) -> Any:
    try:
        return _snapshot(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class _Lazy:
    """The snapshots of one node start in one window whose set of queues stayed the
    same (one ``queues`` version): only the first's and the last's JSON is kept,
    decoded when the rows are made. Each partial queue's deepest depth is the last
    snapshot's ``window_depth_max`` (it only grows within a window)."""

    __slots__ = ("first_seq", "first", "first_time", "last_seq", "last", "time", "version", "malformed")

    def __init__(self, seq: int, data: Any, version: int, time: float) -> None:
        self.first_seq = self.last_seq = seq
        self.first = self.last = data
        self.first_time = self.time = time
        self.version = version
        self.malformed = 0

    def add_raw(self, seq: int, data: Any, version: int, time: float) -> bool:
        """Take a snapshot in; False if its set of queues differs (``decoded`` then)."""
        if version != self.version:
            return False
        if seq < self.first_seq:
            self.first_seq, self.first, self.first_time = seq, data, time
        if seq > self.last_seq:
            self.last_seq, self.last, self.time = seq, data, time
        return True

    def decoded(self, first: bool = True) -> _Group:
        """The same snapshots as a ``_Group`` that decodes each one it is given. With
        ``first`` False the first snapshot's counters are not wanted (``queue_rows``):
        only the last is decoded, unless its JSON is bad and the first stands in."""
        if not first and self.first is not self.last:
            last = _decoded(self.last)
            if last is not None:
                group = _Group(self.last_seq, last, self.time)
                group.first_seq = self.first_seq
                return group
            self.malformed += 1
            self.last, self.last_seq, self.time = self.first, self.first_seq, self.first_time
        group: _Group | None = None
        for seq, data, time in ((self.first_seq, self.first, self.first_time), (self.last_seq, self.last, self.time)):
            snapshot = _decoded(data)
            if snapshot is None:
                self.malformed += 1
            elif group is None:
                group = _Group(seq, snapshot, time)
            else:
                group.add(seq, snapshot, time)
            if self.first is self.last:
                break
        if group is None:
            return _Group.empty(self.malformed)
        group.malformed = self.malformed
        return group


class _Group:
    """The snapshots of one node start in one window, reduced: the first and the
    last (by ``seq``) and the deepest depth of each partial queue. While every
    snapshot has the same partial queues (nearly always) only the two snapshots are
    kept; once one differs, each partial queue keeps its own first and last."""

    __slots__ = ("first_seq", "first", "last_seq", "last", "time", "depths", "queues", "malformed")

    def __init__(self, seq: int, snapshot: Any, time: float, malformed: int = 0) -> None:
        self.first_seq = self.last_seq = seq
        self.first = self.last = snapshot
        self.time = time
        self.malformed = malformed  # snapshots of a ``_Lazy`` whose JSON did not decode
        self.depths = {partial.name: _deepest(partial) for partial in snapshot.queues}
        self.queues: dict[str, list] | None = None  # name -> [first seq, first, last seq, last, time]
        if len(self.depths) != len(snapshot.queues):  # a name twice: each partial queue on its own
            self.queues = {}
            self._add_each(seq, snapshot, time)

    @classmethod
    def empty(cls, malformed: int) -> _Group:
        return cls(0, _Snapshot(seq=0, taken_at=0.0, node=_NodeRef(id="", started_at=0.0)), 0.0, malformed)

    def add_raw(self, seq: int, data: Any, version: int, time: float) -> bool:
        """Decode a snapshot and take it in; False if it does not decode."""
        snapshot = _decoded(data)
        if snapshot is None:
            return False
        self.add(seq, snapshot, time)
        return True

    def add(self, seq: int, snapshot: Any, time: float) -> None:
        depths = self.depths
        known = len(depths)
        for partial in snapshot.queues:
            deepest = _deepest(partial)
            if deepest > depths.get(partial.name, -1):
                depths[partial.name] = deepest
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
                yield first_seq, partial, last_seq, partial, time, _deepest(partial)
            return
        lasts = {partial.name: partial for partial in self.last.queues}
        for partial in self.first.queues:
            yield first_seq, partial, last_seq, lasts[partial.name], time, depths[partial.name]


class Reduction:
    """What ``reduce_entries`` found, by kind: per stream and window, per node
    start, per event window, node and kind, and per node start and window."""

    def __init__(self, snapshots: str) -> None:
        self.snapshots = snapshots
        self.summary: dict[tuple, dict] = {}
        self.boots: dict[tuple, int] = {}
        self.counted: dict[tuple, int] = {}
        self.groups: dict[tuple, _Group | _Lazy] = {}

    def _small_rows(self) -> list[dict]:
        """The summary, boot and event rows (few: built as dicts)."""
        rows = list(self.summary.values())
        rows.extend({"part": "boot", "node": node, "boot": boot, "first_seq": seq}
                    for (node, boot), seq in self.boots.items())
        rows.extend({"part": "event", "window": window, "node": node, "kind": kind, "count": count}
                    for (window, node, kind), count in self.counted.items())
        return rows

    def queue_rows(self) -> list[tuple]:
        """(node, boot, queue, window, first seq, first, last seq, last, time, deepest
        depth). ``first`` is None except where ``first seq`` is the node start's
        earliest here: only there can the driver take a baseline from it (the first
        snapshot the pipeline saw of a start it joined late); elsewhere a window
        counts from the last one before it, or from zero."""
        rows = []
        boots = self.boots
        for (node, boot, window), group in self.groups.items():
            earliest = boots[(node, boot)]
            if isinstance(group, _Lazy):
                group = self.groups[(node, boot, window)] = group.decoded(first=group.first_seq == earliest)
            if group.malformed:  # counted once: a group decodes once
                self.summary[(self.snapshots, window)]["malformed"] += group.malformed
                group.malformed = 0
            rows.extend((node, boot, last.name, window, first_seq, first if first_seq == earliest else None, last_seq,
                         last, time, depth_max)
                        for first_seq, first, last_seq, last, time, depth_max in group.partials())
        return rows

    def rows(self) -> list[dict]:
        """Every partial row as a dict, with ``part`` one of summary / boot / event / queue."""
        queues = self.queue_rows()  # first: it counts what did not decode in the summary
        rows = self._small_rows()
        rows.extend({"part": "queue", "node": node, "boot": boot, "queue": name, "window": window,
                     "first_seq": first_seq, "first": None if first is None else _counters(first), "last_seq": last_seq,
                     "last": _counters(last), "depth_max": depth_max,
                     "now": {"depth": last.depth, "consumers": last.consumers, "in_flight": last.in_flight,
                             "at": time}}
                    for node, boot, name, window, first_seq, first, last_seq, last, time, depth_max
                    in queues)
        return rows

    def record_batches(self, rows_per_batch: int = 10_000) -> Iterator[Any]:
        """The partial rows as Arrow record batches of ``partials_schema``, built a
        column at a time (a dict per row costs more than the decoding)."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(partials_schema())
        queues = self.queue_rows()  # first: it counts what did not decode in the summary
        small = self._small_rows()
        if small:
            yield pa.RecordBatch.from_pylist(small, schema=schema)
        for at in range(0, len(queues), rows_per_batch):
            yield _queue_batch(queues[at:at + rows_per_batch], schema)


_counted = attrgetter(*COUNTERS)
_latency_sum = attrgetter("latency_sum_ms")
_gauges = attrgetter("depth", "consumers", "in_flight")


def _queue_batch(rows: list[tuple], schema: Any) -> Any:
    """The rows as Arrow, a column at a time: each partial's fields taken at once
    (``attrgetter``) and turned into columns by ``zip`` and numpy, in C."""
    import numpy as np
    import pyarrow as pa

    (node, boot, queue, window, first_seq, firsts, last_seq, lasts, at, depth_max) = zip(*rows, strict=True)

    def column(name: str, values: tuple) -> Any:
        return pa.array(values, type=schema.field(name).type)

    def counters(name: str, partials: tuple) -> Any:
        """A struct column of the partials' counters; null where a partial is None."""
        kind = schema.field(name).type
        given = [at for at, partial in enumerate(partials) if partial is not None]
        present = partials if len(given) == len(partials) else [partials[at] for at in given]
        width = len(COUNTERS)
        matrix = np.zeros((len(partials), width), np.int64)
        matrix[given] = np.fromiter(chain.from_iterable(map(_counted, present)), np.int64,
                                    count=len(present) * width).reshape(-1, width)
        children = [pa.array(matrix[:, at]) for at in range(width)]
        lengths = np.zeros(len(partials), np.int32)
        histograms = [partial.latency for partial in present]
        lengths[given] = list(map(len, histograms))
        offsets = np.zeros(len(partials) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        buckets = np.fromiter(chain.from_iterable(histograms), np.int64, count=int(offsets[-1]))
        children.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(buckets), type=kind.field("latency").type))
        sums = np.zeros(len(partials), np.float64)
        sums[given] = np.fromiter(map(_latency_sum, present), np.float64, count=len(present))
        children.append(pa.array(sums))
        absent = None if len(given) == len(partials) else pa.array(np.array([partial is None for partial in partials]))
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=absent)

    size = len(rows)
    depth, consumers, in_flight = zip(*map(_gauges, lasts), strict=True)
    now = pa.StructArray.from_arrays([
        pa.array(depth, type=pa.int64()), pa.array(consumers, type=pa.int64()), pa.array(in_flight, type=pa.int64()),
        pa.array(at, pa.float64()),
    ], fields=list(schema.field("now").type))
    given = {
        "part": pa.array(["queue"] * size, type=pa.string()),
        "node": column("node", node), "boot": column("boot", boot), "queue": column("queue", queue),
        "window": column("window", window), "first_seq": column("first_seq", first_seq),
        "first": counters("first", firsts), "last_seq": column("last_seq", last_seq), "last": counters("last", lasts),
        "depth_max": column("depth_max", depth_max), "now": now,
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
