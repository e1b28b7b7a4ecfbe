"""``meshgate pipeline --export DIR``: the history in the streams, as Parquet.

A batch job over the same entries and the same reduction as the streaming job,
all of it on Spark: per partial queue (its vhost and queue name) and 10-second window the counts (counter
differences, each node start counted from its first snapshot seen), depths,
consumers and latency percentiles (``DIR/queues``), and events per node, kind
and window (``DIR/events``). Both are partitioned by ``day`` and ``node``;
exporting the same days again replaces them, so a periodic export never doubles
rows."""

from __future__ import annotations

from typing import Any

from model import latency
from model.names import DEFAULT_VHOST
from model.rollups import COUNTERS, QUEUE_KEY_SEPARATOR
from pipeline import transform


def export(spark: Any, redis_url: str, prefix: str, directory: str, starting: str = "earliest",
           ending: str = "latest") -> dict[str, int]:
    """Write the Parquet datasets; returns the rows written to each."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    parts = (spark.read.format("meshgate_partials").option("url", redis_url).option("prefix", prefix)
             .option("startingOffsets", starting).option("endingOffsets", ending).load())
    parsed = transform.merged(parts).persist()
    try:
        starts = transform.boot_starts(parsed).withColumnRenamed("first_seq", "boot_first")
        groups = transform.queue_windows(parsed).join(starts, ["node", "boot"])
        ordered = Window.partitionBy("node", "boot", "queue").orderBy("window")
        previous = F.lag("last").over(ordered)
        from_zero = (F.col("first_seq") == 1) | (F.col("first_seq") > F.col("boot_first"))
        columns = []
        for name in COUNTERS:
            base = F.coalesce(previous[name], F.when(from_zero, F.lit(0)).otherwise(F.col("first")[name]))
            columns.append(F.greatest(F.col("last")[name] - base, F.lit(0)).alias(name))
        base_latency = F.coalesce(previous["latency"],
                                  F.when(from_zero, F.array().cast("array<long>")).otherwise(F.col("first")["latency"]))
        base_sum = F.coalesce(previous["latency_sum_ms"], F.when(from_zero, F.lit(0.0))
                              .otherwise(F.col("first")["latency_sum_ms"]))
        histogram = F.zip_with(F.col("last")["latency"], base_latency,
                               lambda a, b: F.greatest(F.coalesce(a, F.lit(0)) - F.coalesce(b, F.lit(0)), F.lit(0)))
        key = F.col("queue")  # model.rollups.queue_key: the vhost and the name
        vhost = F.when(F.instr(key, QUEUE_KEY_SEPARATOR) > 0, F.substring_index(key, QUEUE_KEY_SEPARATOR, 1))
        rows = groups.select(
            F.date_format(F.timestamp_seconds("window"), "yyyy-MM-dd").alias("day"), "node", "boot",
            vhost.otherwise(F.lit(DEFAULT_VHOST)).alias("vhost"),
            F.substring_index(key, QUEUE_KEY_SEPARATOR, -1).alias("queue"),
            F.timestamp_seconds("window").alias("window_start"), F.lit(transform.WINDOW_SECONDS).alias("seconds"),
            *columns, F.col("depth_max"), F.col("now")["depth"].alias("depth_last"),
            F.col("now")["consumers"].alias("consumers"), F.col("now")["in_flight"].alias("in_flight"),
            histogram.alias("latency"),
            F.greatest(F.col("last")["latency_sum_ms"] - base_sum, F.lit(0.0)).alias("latency_sum_ms"),
        ).withColumn("published", F.greatest(
            F.col("enqueued") - F.col("forwarded_in") - F.col("redistributed_in"), F.lit(0)))
        for quantile in (50, 95, 99):
            rows = rows.withColumn(f"p{quantile}_ms", _percentile(quantile / 100)(F.col("latency")))
        events = transform.event_windows(parsed).select(
            F.date_format(F.timestamp_seconds("window"), "yyyy-MM-dd").alias("day"), "node",
            F.timestamp_seconds("window").alias("window_start"), "kind", "count")
        written = {}
        for name, frame in (("queues", rows), ("events", events)):
            frame = frame.persist()
            written[name] = frame.count()
            (frame.write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
             .partitionBy("day", "node").parquet(f"{directory.rstrip('/')}/{name}"))
            frame.unpersist()
        return written
    finally:
        parsed.unpersist()


def _percentile(quantile: float) -> Any:
    from pyspark.sql import functions as F

    return F.udf(lambda counts: latency.percentile_ms(counts, quantile) if counts else None, "double")
