"""``meshgate pipeline``: the streaming job. Spark reads the snapshots and events
streams through ``meshgate_partials`` (``redis_streams`` decoding and reducing
as it reads); each micro-batch's partial rows are merged on Spark
(``transform``) and applied on the driver (``rollup``) in one Redis transaction.

The query restarts itself from its checkpoint when it fails (Redis gone, a task
lost), with backoff up to 30 s: Spark replays the batch it had not committed and
the rollups skip what was already applied."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import gc_paused, transform
from pipeline.rollup import Rollups, Settings

log = logging.getLogger("meshgate.pipeline")
QUERY_NAME = "meshgate-rollups"
# Test hooks: exit the process right after applying this batch, before Spark commits it;
# or with this batch committed by Spark and never applied.
EXIT_AFTER_BATCH = "MESHGATE_PIPELINE_EXIT_AFTER_BATCH"
EXIT_WITH_BATCH_UNAPPLIED = "MESHGATE_PIPELINE_EXIT_WITH_BATCH_UNAPPLIED"


class PipelineFailed(Exception):
    """A ``--once`` run failed (it is not retried)."""


@dataclass
class JobOptions:
    redis_url: str = "redis://127.0.0.1:6379/0"
    prefix: str = "meshgate"
    master: str = "local[2]"
    checkpoint: str = "data/pipeline/checkpoint"
    trigger_s: float = 1.0
    starting: str = "earliest"  # where a pipeline with no rollups yet starts reading
    watermark_s: float = 120.0
    max_entries: int = 200_000  # per micro-batch
    available_now: bool = False  # read what is there, apply it, stop


class RollupBatches:
    """The ``foreachBatch`` function: one micro-batch in, rollups out.

    A batch's rows are applied on a thread of their own while Spark computes the
    next batch's (the driver's Python and the executors' overlap); the batch after
    waits for it, so batches are applied one at a time and in order. Spark may then
    commit a batch whose rollups the process dies before writing: the next query's
    first read starts from what the rollups record as applied (``meshgate_partials``
    does that), so such a batch is read again, and counted once."""

    def __init__(self, spark: Any, options: JobOptions) -> None:
        import redis

        self.spark = spark
        self.options = options
        self.client = redis.Redis.from_url(options.redis_url, socket_timeout=30)
        self.rollups = Rollups(self.client, Settings(prefix=options.prefix, watermark_s=options.watermark_s,
                                                     master=options.master))
        self.batches = 0
        self.last_error: str | None = None
        self._exit_after = _hook(EXIT_AFTER_BATCH)
        self._exit_unapplied = _hook(EXIT_WITH_BATCH_UNAPPLIED)
        self._applying: Future | None = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="meshgate-rollups")

    def __call__(self, parts: Any, batch: int) -> None:
        began = time.time()
        pipeline = self._query_id()
        table = transform.unpacked(parts.toArrow())  # while the batch before is applied
        if self._exit_unapplied == batch - 1:
            os._exit(18)  # the batch before was committed by Spark, and is not applied
        self.drain()
        self._applying = self._worker.submit(self._apply, pipeline, batch, table, began)
        if self._exit_after == batch:
            self.drain()
            os._exit(17)  # applied, and Spark has not committed it

    def drain(self) -> None:
        """Wait for the batch being applied; its failure is raised here."""
        applying, self._applying = self._applying, None
        if applying is not None:
            applying.result()

    def close(self) -> None:
        """Apply what was handed over, then stop the thread."""
        try:
            self.drain()
        finally:
            self._worker.shutdown(wait=True)

    def _apply(self, pipeline: str, batch: int, table: Any, began: float) -> None:
        if self._exit_unapplied == batch:
            return
        if self.rollups.status is None:
            self.rollups.load()
        if self.rollups.applied(pipeline, batch):
            log.info("batch %d already applied; skipped", batch)
            return
        with gc_paused():
            collected = transform.collect(table, self.rollups.watermark)
            if not collected.entries:
                return
            status = self.rollups.apply(pipeline, batch, collected, began)
        self.batches += 1
        log.debug("batch %d: %d entries, %d malformed, %d late in %.2f s", batch, status.batch_entries,
                  status.malformed, status.late, status.batch_seconds)

    def _query_id(self) -> str:
        for query in self.spark.streams.active:
            if query.name == QUERY_NAME:
                return str(query.id)
        return "unknown"


def _hook(name: str) -> int | None:
    value = os.environ.get(name)
    return None if value is None else int(value)


def start_query(spark: Any, options: JobOptions, batches: RollupBatches) -> Any:
    """The streaming query, started; it resumes from its checkpoint if there is one,
    else from where the rollups in Redis left off, else from ``options.starting``."""
    status = batches.rollups.load()
    starting = json.dumps(status.offsets) if status and status.offsets else options.starting
    parts = (spark.readStream.format("meshgate_partials")
             .option("url", options.redis_url)
             .option("prefix", options.prefix)
             .option("packed", "true")
             .option("startingOffsets", starting)
             .option("maxEntriesPerTrigger", str(options.max_entries))
             .option("admission", "estimate")  # a batch of about max_entries: counting read every entry twice
             .option("progressKey", f"{options.prefix}:pipeline:progress")
             .load())
    writer = parts.writeStream.queryName(QUERY_NAME).foreachBatch(batches).option(
        "checkpointLocation", options.checkpoint)
    writer = writer.trigger(availableNow=True) if options.available_now else writer.trigger(
        processingTime=f"{options.trigger_s} seconds")
    return writer.start()


def run(options: JobOptions, stop: threading.Event | None = None) -> int:
    """Run until ``stop`` is set (or SIGINT / SIGTERM), restarting the query after
    failures. With ``available_now``, return once everything there is was applied."""
    from pipeline.spark import session

    stop = stop or _stop_on_signals()
    if "://" not in options.checkpoint:
        Path(options.checkpoint).mkdir(parents=True, exist_ok=True)
    spark = session(options.master)
    print(f"meshgate pipeline: Spark {spark.version} on {spark.sparkContext.master}, reading "
          f"{options.prefix}:snapshots and :events from {options.redis_url}", flush=True)
    try:
        _supervise(spark, options, stop)
    finally:
        spark.stop()
    return 0


def run_once(spark: Any, options: JobOptions) -> RollupBatches:
    """Apply what the streams hold now (an ``availableNow`` query) and return; a
    failure is raised, not retried."""
    options = JobOptions(**{**options.__dict__, "available_now": True})
    batches = RollupBatches(spark, options)
    query = start_query(spark, options, batches)
    try:
        query.awaitTermination()
    finally:
        batches.close()
    return batches


def _supervise(spark: Any, options: JobOptions, stop: threading.Event) -> None:
    backoff = 1.0
    while not stop.is_set():
        batches = RollupBatches(spark, options)
        try:
            query = start_query(spark, options, batches)
            while query.isActive and not stop.is_set():
                query.awaitTermination(0.5)
            if query.isActive:
                query.stop()
            batches.close()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            if options.available_now:
                return
        except Exception as error:  # Redis gone, a task failed: start again from the checkpoint
            with contextlib.suppress(Exception):  # what was handed over: applied or replayed
                batches.close()
            text = str(error).strip()
            message = text.splitlines()[0][:300] if text else type(error).__name__
            if options.available_now:  # a one-off run (cron) fails rather than waiting for help
                raise PipelineFailed(message) from error
            if batches.batches:
                backoff = 1.0  # it had been working: a fresh failure
            log.warning("pipeline query failed (%s); restarting from its checkpoint in %.0f s", message, backoff)
            if stop.wait(backoff):
                return
            backoff = min(30.0, backoff * 2)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: stop.set())
    return stop
