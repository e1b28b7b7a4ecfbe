"""The Spark half of the rollups. The executors decode and reduce the stream
entries to partial rows as they read them (``pipeline.partials``); Spark merges
the partial rows of every task in one aggregation (``merged``) into one row per
stream and window (the batch's summary), node start (``boot_starts``), partial
queue and 10-second window (``queue_windows``) and event window, node and kind
(``event_windows``). What runs here runs on the executors, so it scales with the
cluster; the driver gets rows per window, not per entry, and says which windows
are late (``split``)."""

from __future__ import annotations

from typing import Any

from model.rollups import COUNTERS
from pipeline.decode import WINDOW_SECONDS

__all__ = ["WINDOW_SECONDS", "merged", "split", "queue_windows", "boot_starts", "event_windows"]


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


WINDOW_COLUMNS = ("node", "boot", "queue", "window", "first_seq", "last_seq", "first", "last", "depth_max", "now")
BOOT_COLUMNS = ("node", "boot", "first_seq")
EVENT_COLUMNS = ("window", "node", "kind", "count")


def split(rows: list[dict], watermark: float) -> dict[str, list[dict]]:
    """Collected ``merged`` rows by kind, each with its kind's columns only:
    ``{"summary": …, "queue": …, "boot": …, "event": …}``. A window that closed
    before ``watermark`` is late: its queue rows say ``late``, its events are
    dropped, and the summary (one row per stream) counts its entries as late."""
    result: dict[str, list[dict]] = {"summary": [], "queue": [], "boot": [], "event": []}
    streams: dict[str, dict] = {}
    for row in rows:
        part = row["part"]
        window = row["window"]
        late = window is not None and window + WINDOW_SECONDS <= watermark
        if part == "summary":
            _summarize(streams, row, late)
        elif part == "queue":
            result["queue"].append({**{name: row[name] for name in WINDOW_COLUMNS}, "late": late})
        elif part == "boot":
            result["boot"].append({name: row[name] for name in BOOT_COLUMNS})
        elif not late:
            result["event"].append({name: row[name] for name in EVENT_COLUMNS})
    result["summary"] = list(streams.values())
    return result


def _summarize(streams: dict[str, dict], row: dict, late: bool) -> None:
    """A stream's summary row, added to: entries, malformed, late, newest time and id."""
    totals = streams.setdefault(row["stream"], {"stream": row["stream"], "entries": 0, "malformed": 0, "late": 0,
                                                "max_time": None, "last_id": None})
    totals["entries"] += row["entries"]
    totals["malformed"] += row["malformed"]
    totals["late"] += row["entries"] if late else 0
    if row["max_time"] is not None and (totals["max_time"] is None or row["max_time"] > totals["max_time"]):
        totals["max_time"] = row["max_time"]
    last = row["last_id"]
    if last is not None and (totals["last_id"] is None or (last["id_ms"], last["id_seq"]) >
                             (totals["last_id"]["id_ms"], totals["last_id"]["id_seq"])):
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
