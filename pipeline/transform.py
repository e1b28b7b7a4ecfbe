"""The Spark half of the rollups. The executors decode each Arrow batch of stream
entries and reduce it to partial rows (``pipeline.decode``, through
``mapInArrow``); Spark merges the partial rows of every batch in one aggregation
(``merged``) into one row per stream (the batch's summary), node start
(``boot_starts``), partial queue and 10-second window (``queue_windows``) and
event window, node and kind (``event_windows``). What runs here runs on the executors, so it scales with the
cluster; the driver gets rows per window, not per entry."""

from __future__ import annotations

from typing import Any

from model.rollups import COUNTERS
from pipeline.decode import WINDOW_SECONDS, reduce_arrow

__all__ = ["WINDOW_SECONDS", "ENTRY_FIELDS", "partials", "merged", "split", "queue_windows",
           "boot_starts", "event_windows"]

ENTRY_FIELDS = "node,kind,data"  # the entry fields the job reads (snapshots: node, seq, schema, data)
_COUNTS = ", ".join(f"{name}: bigint" for name in COUNTERS)
_COUNTERS_TYPE = f"struct<{_COUNTS}, latency: array<bigint>, latency_sum_ms: double>"
PARTIALS_SCHEMA = (
    "part string, stream string, entries bigint, malformed bigint, late_count bigint, max_time double, "
    "last_ms bigint, last_seq bigint, node string, boot double, queue string, window bigint, first_seq bigint, "
    f"first {_COUNTERS_TYPE}, last {_COUNTERS_TYPE}, late boolean, depth_max bigint, "
    "now struct<depth: bigint, consumers: bigint, in_flight: bigint, at: double>, kind string, count bigint"
)


def _functions() -> Any:
    from pyspark.sql import functions as F

    return F


def partials(entries: Any, snapshots: str, events: str, applied: dict[str, str], watermark: float) -> Any:
    """The partial rows of the new entries (those after ``applied``, per stream), with
    ``part`` one of summary / boot / event / queue; ``late`` marks what falls in a
    window closed before ``watermark``."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    arrow_schema = to_arrow_schema(_parse_datatype_string(PARTIALS_SCHEMA))
    applied = dict(applied)

    def reduce(batches: Any) -> Any:
        return reduce_arrow(batches, snapshots, events, applied, watermark, arrow_schema)

    return entries.select("stream", "id", "node", "kind", "data").mapInArrow(reduce, PARTIALS_SCHEMA)


def merged(parts: Any) -> Any:
    """Every kind of partial row merged in one aggregation (one shuffle, one pass over
    the entries): grouped by ``part`` and the keys of its kind (the other keys are
    null), with each kind's merge. Partial queues that never did anything are left
    out. ``batch_summary`` and the rest select their kind from it; the job splits one
    collected result by ``part`` (``split``)."""
    F = _functions()
    grouped = parts.groupBy("part", "stream", "node", "boot", "queue", "window", "kind").agg(
        F.sum("entries").alias("entries"), F.sum("malformed").alias("malformed"),
        F.sum("late_count").alias("late_count"), F.max("max_time").alias("max_time"),
        F.max(F.struct(F.col("last_ms").alias("id_ms"), F.col("last_seq").alias("id_seq"))).alias("last_id"),
        F.min("first_seq").alias("first_seq"), F.max("last_seq").alias("last_seq"), F.max("late").alias("late"),
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


SUMMARY_COLUMNS = ("stream", "entries", "malformed", "late", "max_time", "last_id")
WINDOW_COLUMNS = ("node", "boot", "queue", "window", "first_seq", "last_seq", "late", "first", "last", "depth_max",
                  "now")
BOOT_COLUMNS = ("node", "boot", "first_seq")
EVENT_COLUMNS = ("window", "node", "kind", "count")


def split(rows: list[dict]) -> dict[str, list[dict]]:
    """Collected ``merged`` rows by kind, each with its kind's columns only:
    ``{"summary": …, "queue": …, "boot": …, "event": …}``."""
    columns = {"summary": SUMMARY_COLUMNS, "queue": WINDOW_COLUMNS, "boot": BOOT_COLUMNS, "event": EVENT_COLUMNS}
    result: dict[str, list[dict]] = {part: [] for part in columns}
    for row in rows:
        part = row["part"]
        if part == "summary":
            row["late"] = row["late_count"]
        result[part].append({name: row[name] for name in columns[part]})
    return result


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
