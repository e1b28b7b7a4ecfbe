"""The Spark half of the rollups: parse the stream entries against the model,
explode each snapshot's partial queues and reduce them to one row per partial
queue, node start and 10-second window (``queue_windows``), and count events per
node, kind and window (``event_windows``). What runs here runs on the executors,
so it scales with the cluster; the driver gets rows per window, not per entry."""

from __future__ import annotations

from typing import Any

from model.mesh import PartialQueue, Snapshot
from model.rollups import COUNTERS
from pipeline.schema import defaults, spark_type

WINDOW_SECONDS = 10  # the finest resolution; coarser windows are sums of these
ENTRY_FIELDS = "node,kind,data"  # the entry fields the job reads (snapshots: node, seq, schema, data)
_QUEUE_FIELDS = ("name", "depth", "in_flight", "consumers", *COUNTERS, "latency", "latency_sum_ms")
_SNAPSHOT_KEEP = {"seq": None, "taken_at": None, "node": {"id", "started_at"}, "queues": set(_QUEUE_FIELDS)}


def _functions() -> Any:
    from pyspark.sql import functions as F

    return F


def parse(entries: Any, snapshots: str, events: str, applied: dict[str, str], watermark: float) -> Any:
    """Each new entry once, with ``kind`` one of snapshot / event / malformed, its
    event time, and ``late`` when its window closed before this batch."""
    F = _functions()
    snapshot_type = spark_type(Snapshot, _SNAPSHOT_KEEP)
    from pyspark.sql import types as T

    event_type = T.StructType([T.StructField("time", T.DoubleType())])
    id_ms = F.split(F.col("id"), "-").getItem(0).cast("long")
    id_seq = F.split(F.col("id"), "-").getItem(1).cast("long")
    fresh = F.lit(True)
    for stream, after in applied.items():
        ms, _, seq = after.partition("-")
        older = (id_ms < int(ms)) | ((id_ms == int(ms)) & (id_seq <= int(seq or 0)))
        fresh = fresh & ~((F.col("stream") == stream) & older)
    rows = entries.where(fresh).select(
        "stream", "id", id_ms.alias("id_ms"), id_seq.alias("id_seq"), "node",
        F.col("kind").alias("event_kind"),
        F.when(F.col("stream") == snapshots, F.from_json("data", snapshot_type)).alias("s"),
        F.when(F.col("stream") == events, F.from_json("data", event_type)).alias("e"),
    )
    s, e = F.col("s"), F.col("e")
    good_snapshot = (s.isNotNull() & s["node"]["id"].isNotNull() & s["node"]["started_at"].isNotNull()
                     & s["seq"].isNotNull() & s["taken_at"].isNotNull()
                     & F.coalesce(F.forall(F.coalesce(s["queues"], F.array()), lambda q: q["name"].isNotNull()),
                                  F.lit(False)))
    good_event = e.isNotNull() & e["time"].isNotNull() & F.col("event_kind").isNotNull() & F.col("node").isNotNull()
    kind = (F.when((F.col("stream") == snapshots) & good_snapshot, "snapshot")
            .when((F.col("stream") == events) & good_event, "event").otherwise("malformed"))
    time = F.when(kind == "snapshot", s["taken_at"]).when(kind == "event", e["time"])
    window = F.floor(time / WINDOW_SECONDS) * WINDOW_SECONDS
    return rows.select(
        "*", kind.alias("kind"), time.alias("time"), window.alias("window"),
        (window + WINDOW_SECONDS <= F.lit(watermark)).alias("late"),
    )


def batch_summary(parsed: Any) -> Any:
    """One row per stream: entries, malformed, late, the newest event time (capped
    by the time Redis added the entry, so a node's fast clock cannot push the
    watermark) and the last entry id."""
    F = _functions()
    good = F.col("kind") != "malformed"
    return parsed.groupBy("stream").agg(
        F.count(F.lit(1)).alias("entries"),
        F.sum(F.when(~good, 1).otherwise(0)).alias("malformed"),
        F.sum(F.when(good & F.col("late"), 1).otherwise(0)).alias("late"),
        F.max(F.when(good, F.least(F.col("time"), F.col("id_ms") / 1000.0))).alias("max_time"),
        F.max(F.struct("id_ms", "id_seq")).alias("last_id"),
    )


def queue_windows(parsed: Any) -> Any:
    """One row per (node, boot, queue, window): the first and last snapshot's
    counters in the window, the latest depth / consumers / in-flight, the deepest
    depth. Partial queues that never did anything are left out."""
    F = _functions()
    fill = defaults(PartialQueue)
    q = F.col("q")

    def field(name: str) -> Any:
        default = fill.get(name)
        if isinstance(default, list):
            return F.coalesce(q[name], F.array().cast("array<long>")).alias(name)
        if default is None:
            return q[name].alias(name)
        return F.coalesce(q[name], F.lit(default)).alias(name)

    exploded = parsed.where(F.col("kind") == "snapshot").select(
        F.col("s")["node"]["id"].alias("node"), F.col("s")["node"]["started_at"].alias("boot"),
        F.col("s")["seq"].alias("seq"), F.col("time").alias("at"), "window", "late",
        F.explode(F.col("s")["queues"]).alias("q"),
    ).select("node", "boot", "seq", "at", "window", "late", *(field(name) for name in _QUEUE_FIELDS))
    counters = F.struct(*COUNTERS, "latency", "latency_sum_ms")
    grouped = exploded.groupBy("node", "boot", F.col("name").alias("queue"), "window").agg(
        F.min("seq").alias("first_seq"), F.max("seq").alias("last_seq"), F.max("late").alias("late"),
        F.min_by(counters, "seq").alias("first"),
        F.max_by(counters, "seq").alias("last"),
        F.max("depth").alias("depth_max"),
        F.max_by(F.struct("depth", "consumers", "in_flight", "at"), "seq").alias("now"),
    )
    active = F.col("depth_max") > 0
    for name in ("consumers", "in_flight"):
        active = active | (F.col("now")[name] > 0)
    for name in COUNTERS:
        active = active | (F.col("last")[name] > 0)
    return grouped.where(active)


def boot_starts(parsed: Any) -> Any:
    """The first snapshot (``seq``) of each node start in the batch: a partial queue
    first reported after it was created after it, and counts from zero."""
    F = _functions()
    return (parsed.where(F.col("kind") == "snapshot")
            .groupBy(F.col("s")["node"]["id"].alias("node"), F.col("s")["node"]["started_at"].alias("boot"))
            .agg(F.min(F.col("s")["seq"]).alias("first_seq")))


def event_windows(parsed: Any) -> Any:
    """Events on time, counted per window, node and kind."""
    F = _functions()
    return (parsed.where((F.col("kind") == "event") & ~F.col("late"))
            .groupBy("window", "node", F.col("event_kind").alias("kind")).count())
