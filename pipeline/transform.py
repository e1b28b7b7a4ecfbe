"""Merging the partial rows. The executors decode and reduce the stream entries
to partial rows as they read them (``pipeline.partials``), one per stream and
window (the batch's summary), node start, partial queue and 10-second window,
and event window, node and kind; a window a partition boundary cuts comes in two.

The streaming job collects them to the driver as they are and merges them there
(``collect``): after the reduction there are about as many as there will be
windows to write, and a shuffle on Spark cost more than the merge. The Parquet
export merges them on Spark instead (``merged`` and the selections after it),
where the rest of its work runs too."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from model.latency import BUCKETS as _BUCKETS
from model.rollups import COUNTERS
from pipeline.decode import WINDOW_SECONDS

__all__ = ["WINDOW_SECONDS", "merged", "unpacked", "collect", "queue_windows", "boot_starts", "event_windows"]


def _functions() -> Any:
    from pyspark.sql import functions as F

    return F


def merged(parts: Any) -> Any:
    """Every kind of partial row merged in one aggregation (one shuffle, one pass over
    the entries): grouped by ``part`` and the keys of its kind (the other keys are
    null), with each kind's merge. Partial queues that never did anything are left
    out. ``queue_windows`` and the rest select their kind from it; the job splits one
    collected result by ``part`` (``split``)."""
    F = _functions()
    grouped = parts.groupBy("part", "stream", "node", "boot", "queue", "window", "kind").agg(
        F.sum("entries").alias("entries"), F.sum("malformed").alias("malformed"), F.max("max_time").alias("max_time"),
        F.max(F.struct(F.col("last_ms").alias("id_ms"), F.col("last_seq").alias("id_seq"))).alias("last_id"),
        F.min("first_seq").alias("first_seq"), F.max("last_seq").alias("last_seq"),
        F.min_by("first", "first_seq").alias("first"), F.max_by("last", "last_seq").alias("last"),
        F.max("depth_max").alias("depth_max"), F.max_by("now", "last_seq").alias("now"),
        F.sum("count").alias("count"),
    )
    active = F.col("depth_max") > 0
    for name in ("consumers", "in_flight"):
        active = active | (F.col("now")[name] > 0)
    for name in COUNTERS:
        active = active | (F.col("last")[name] > 0)
    return grouped.where((F.col("part") != "queue") | active)


def unpacked(table: Any) -> Any:
    """The partial rows of a ``packed`` read (one Arrow IPC stream per task) as one table."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from pipeline.decode import partials_schema

    tables = [pa.ipc.open_stream(blob.as_buffer()).read_all()
              for blob in table.column("packed").combine_chunks() if blob.is_valid and len(blob.as_buffer())]
    return pa.concat_tables(tables) if tables else to_arrow_schema(partials_schema()).empty_table()


WINDOW_COLUMNS = ("node", "boot", "queue", "window", "first_seq", "last_seq", "first", "last", "depth_max", "now")
BOOT_COLUMNS = ("node", "boot", "first_seq")
EVENT_COLUMNS = ("window", "node", "kind", "count")
_ORDER = ("node", "boot", "queue", "window", "first_seq")


class WindowRow(NamedTuple):
    """One partial queue of one node start in one 10-second window: its first and
    last snapshot's counters (``COUNTERS`` order) and histograms, its deepest depth
    and its latest gauges (at ``at``)."""

    node: str
    boot: float
    queue: str
    window: int
    first_seq: int
    last_seq: int
    first: tuple[int, ...]
    first_latency: list[int]
    first_sum_ms: float
    last: tuple[int, ...]
    last_latency: list[int]
    last_sum_ms: float
    depth_max: int
    depth: int
    consumers: int
    in_flight: int
    at: float


class WindowColumns:
    """The active partial queues' windows of a batch as columns (numpy arrays, one row
    per window, in (node, boot, queue, window) order): the counters as (rows,
    ``COUNTERS``) matrices, the histograms as (rows, buckets) ones. The driver counts
    on them a column at a time (``rollup``); iterating gives ``WindowRow``s."""

    FIELDS = ("node", "boot", "queue", "window", "first_seq", "last_seq", "first", "first_latency", "first_sum_ms",
              "last", "last_latency", "last_sum_ms", "depth_max", "depth", "consumers", "in_flight", "at")

    def __init__(self, **columns: Any) -> None:
        for name in self.FIELDS:
            setattr(self, name, columns[name])

    @classmethod
    def empty(cls) -> WindowColumns:
        import numpy as np

        width = len(COUNTERS)
        ints, floats, objects = np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, object)
        return cls(node=objects, boot=floats, queue=objects, window=ints, first_seq=ints, last_seq=ints,
                   first=np.zeros((0, width), np.int64), first_latency=np.zeros((0, 0), np.int64),
                   first_sum_ms=floats, last=np.zeros((0, width), np.int64), last_latency=np.zeros((0, 0), np.int64),
                   last_sum_ms=floats, depth_max=ints, depth=ints, consumers=ints, in_flight=ints, at=floats)

    def __len__(self) -> int:
        return len(self.window)

    def take(self, rows: Any) -> WindowColumns:
        """The rows ``rows`` (indices or a mask) of every column."""
        return WindowColumns(**{name: getattr(self, name)[rows] for name in self.FIELDS})

    def __iter__(self) -> Iterator[WindowRow]:
        from model.latency import trimmed

        for at in range(len(self)):
            yield WindowRow(
                self.node[at], float(self.boot[at]), self.queue[at], int(self.window[at]), int(self.first_seq[at]),
                int(self.last_seq[at]), tuple(self.first[at].tolist()), trimmed(self.first_latency[at].tolist()),
                float(self.first_sum_ms[at]), tuple(self.last[at].tolist()), trimmed(self.last_latency[at].tolist()),
                float(self.last_sum_ms[at]), int(self.depth_max[at]), int(self.depth[at]), int(self.consumers[at]),
                int(self.in_flight[at]), float(self.at[at]))


@dataclass
class Collected:
    """A micro-batch's partial rows, merged on the driver: the summary per stream
    (entries, malformed, late, newest time and entry id), the first ``seq`` per node
    start, the active partial queues' windows in (node, boot, queue, window) order,
    and the on-time event counts (window, node, kind, count)."""

    summary: list[dict] = field(default_factory=list)
    boots: dict[tuple[str, float], int] = field(default_factory=dict)
    windows: WindowColumns = field(default_factory=WindowColumns.empty)
    events: list[tuple[int, str, str, int]] = field(default_factory=list)

    @property
    def entries(self) -> int:
        return sum(row["entries"] for row in self.summary)


def collect(table: Any, watermark: float) -> Collected:
    """The partial rows of a micro-batch (an Arrow table of ``partials_schema``, as
    the tasks gave them: a window cut by a partition boundary comes in two rows),
    merged. A window that closed before ``watermark`` is late: its events are
    dropped and the summary counts its entries as late; its queue rows stay (the
    driver keeps their counters as the base of the next window, counted nowhere)."""
    import numpy as np
    import pyarrow.compute as pc

    is_queue = pc.fill_null(pc.equal(table["part"], "queue"), False)
    collected = Collected()
    streams: dict[str, dict] = {}
    for row in table.filter(pc.invert(is_queue)).to_pylist():
        part, window = row["part"], row["window"]
        late = window is not None and window + WINDOW_SECONDS <= watermark
        if part == "summary":
            _summarize(streams, row, late)
        elif part == "boot":
            key = (row["node"], row["boot"])
            collected.boots[key] = min(row["first_seq"], collected.boots.get(key, row["first_seq"]))
        elif part == "event" and not late:
            collected.events.append((window, row["node"], row["kind"], row["count"]))
    collected.summary = list(streams.values())
    collected.windows = _window_columns(table, np.flatnonzero(is_queue.to_numpy(zero_copy_only=False)))
    return collected


def _window_columns(table: Any, rows: Any) -> WindowColumns:
    """The queue rows (``rows``, their indices in ``table``) as columns in (node, boot,
    queue, window) order; the rows of one window (adjacent, in first seq order: a
    partition boundary cut it) merged into one, and those of idle partial queues left
    out. Only the keys are sorted; each column is then read at the rows it needs."""
    import numpy as np
    import pyarrow.compute as pc

    if not len(rows):
        return WindowColumns.empty()
    keys = table.select(list(_ORDER)).take(rows)
    order = pc.sort_indices(keys, sort_keys=[(name, "ascending") for name in _ORDER])
    rows, keys = rows[order.to_numpy()], keys.take(order)
    flat = table.flatten()

    def column(name: str, at: Any) -> Any:
        values = flat.column(name).take(at)
        if values.null_count:  # ``first`` is sent only where it can be a baseline: zero elsewhere
            values = pc.fill_null(values, 0)
        return values.to_numpy(zero_copy_only=False)

    node, boot, queue, window, first_seq = (keys.column(name).to_numpy(zero_copy_only=False) for name in _ORDER)
    # A window's first row, and its last (the later part of a cut window comes after).
    same = (node[1:] == node[:-1]) & (boot[1:] == boot[:-1]) & (queue[1:] == queue[:-1]) & (window[1:] == window[:-1])
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    ends = np.concatenate((starts[1:], [len(node)])) - 1
    firsts, lasts = rows[starts], rows[ends]

    def counters(struct: str, at: Any) -> Any:
        return np.stack([column(f"{struct}.{name}", at) for name in COUNTERS], axis=1).astype(np.int64)

    def histograms(name: str, at: Any) -> Any:
        lists = flat.column(name).combine_chunks()
        offsets = lists.offsets.to_numpy()
        values = lists.values.to_numpy(zero_copy_only=False)
        begins = offsets[at]
        lengths = offsets[at + 1] - begins
        width = max(_BUCKETS, int(lengths.max(initial=0)))
        dense = np.zeros((len(at), width), np.int64)
        bucket = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        dense[np.repeat(np.arange(len(at)), lengths), bucket] = values[np.repeat(begins, lengths) + bucket]
        return dense

    last_counters = counters("last", lasts)
    depth_max = np.maximum.reduceat(column("depth_max", rows), starts)
    consumers, in_flight = column("now.consumers", lasts), column("now.in_flight", lasts)
    merged = WindowColumns(
        node=node[starts], boot=boot[starts], queue=queue[starts], window=window[starts],
        first_seq=first_seq[starts], last_seq=column("last_seq", lasts), first=counters("first", firsts),
        first_latency=histograms("first.latency", firsts), first_sum_ms=column("first.latency_sum_ms", firsts),
        last=last_counters, last_latency=histograms("last.latency", lasts),
        last_sum_ms=column("last.latency_sum_ms", lasts), depth_max=depth_max, depth=column("now.depth", lasts),
        consumers=consumers, in_flight=in_flight, at=column("now.at", lasts))
    active = (depth_max > 0) | (consumers > 0) | (in_flight > 0) | (last_counters > 0).any(axis=1)
    return merged if active.all() else merged.take(active)


def _summarize(streams: dict[str, dict], row: dict, late: bool) -> None:
    """A stream's summary row, added to: entries, malformed, late, newest time and id."""
    totals = streams.setdefault(row["stream"], {"stream": row["stream"], "entries": 0, "malformed": 0, "late": 0,
                                                "max_time": None, "last_id": None})
    totals["entries"] += row["entries"]
    totals["malformed"] += row["malformed"]
    totals["late"] += row["entries"] if late else 0
    if row["max_time"] is not None and (totals["max_time"] is None or row["max_time"] > totals["max_time"]):
        totals["max_time"] = row["max_time"]
    last = (row["last_ms"], row["last_seq"])
    if last != (0, 0) and (totals["last_id"] is None or last > totals["last_id"]):
        totals["last_id"] = last


def queue_windows(merged_rows: Any) -> Any:
    """One row per (node, boot, queue, window): the first and last snapshot's counters
    in the window, the latest depth / consumers / in-flight, the deepest depth."""
    F = _functions()
    return merged_rows.where(F.col("part") == "queue").select(*WINDOW_COLUMNS)


def boot_starts(merged_rows: Any) -> Any:
    """The first snapshot (``seq``) of each node start in the batch: a partial queue
    first reported after it was created after it, and counts from zero."""
    F = _functions()
    return merged_rows.where(F.col("part") == "boot").select(*BOOT_COLUMNS)


def event_windows(merged_rows: Any) -> Any:
    """Events on time, counted per window, node and kind."""
    F = _functions()
    return merged_rows.where(F.col("part") == "event").select(*EVENT_COLUMNS)
