"""Exactly once across restarts: from the checkpoint, after a crash between
applying a micro-batch and Spark committing it, after one between Spark committing
a micro-batch and its rollups being written, and with a new checkpoint."""

from __future__ import annotations

import logging
from functools import partial

from rollup_support import assert_rollups_agree, status
from test_pipeline_rollups import drive, options
from traffic import Mesh, started_mesh

from pipeline.job import EXIT_AFTER_BATCH, EXIT_WITH_BATCH_UNAPPLIED, run_once

replay_mesh = partial(started_mesh, back=300, seed=11)


def assert_agrees(client, mesh: Mesh, written: int) -> None:
    assert_rollups_agree(client, mesh.expected)
    assert status(client).entries == written


def crash_in_batches_of_50(pipeline_process, redis_server, checkpoint, hook: str, status_code: int) -> None:
    """``meshgate pipeline --once`` in batches of 50 entries, made to exit by the test
    hook ``hook`` (after batch 1) with ``status_code``."""
    crashed = pipeline_process(redis_server.url, "--once", "--max-entries", "50", "--checkpoint", str(checkpoint),
                               env={hook: "1"})
    assert crashed.wait() == status_code, crashed.log()


def test_a_restart_from_the_checkpoint_counts_new_entries_once(spark, client, redis_server, tmp_path):
    mesh, base = replay_mesh(client)
    written = drive(mesh, base, 40)
    run_once(spark, options(redis_server, tmp_path))
    first = status(client)
    written += drive(mesh, base + 40, 40)
    run_once(spark, options(redis_server, tmp_path))
    assert status(client).batch > first.batch and status(client).pipeline == first.pipeline
    assert_agrees(client, mesh, written)


def test_a_batch_applied_but_not_committed_is_replayed_without_counting_twice(
        spark, client, redis_server, tmp_path, pipeline_process, caplog):
    mesh, base = replay_mesh(client)
    written = drive(mesh, base, 60)
    checkpoint = tmp_path / "checkpoint"
    crash_in_batches_of_50(pipeline_process, redis_server, checkpoint, EXIT_AFTER_BATCH, 17)
    assert status(client).batch == 1
    assert (checkpoint / "offsets" / "1").exists() and not (checkpoint / "commits" / "1").exists()
    with caplog.at_level(logging.INFO, logger="meshgate.pipeline"):
        run_once(spark, options(redis_server, tmp_path, max_entries=50))
    assert "batch 1 already applied; skipped" in caplog.text
    assert status(client).batch > 1
    assert_agrees(client, mesh, written)


def test_a_batch_committed_but_not_applied_is_read_again_and_counted_once(
        spark, client, redis_server, tmp_path, pipeline_process):
    mesh, base = replay_mesh(client)
    written = drive(mesh, base, 60)
    checkpoint = tmp_path / "checkpoint"
    crash_in_batches_of_50(pipeline_process, redis_server, checkpoint, EXIT_WITH_BATCH_UNAPPLIED, 18)
    assert (checkpoint / "commits" / "1").exists()  # Spark counts batch 1 as done ...
    assert status(client).batch == 0  # ... and its rollups were never written
    run_once(spark, options(redis_server, tmp_path, max_entries=50))
    assert status(client).batch > 1
    assert_agrees(client, mesh, written)


def test_a_new_checkpoint_carries_on_from_what_redis_says_was_applied(spark, client, redis_server, tmp_path):
    mesh, base = replay_mesh(client)
    written = drive(mesh, base, 40)
    run_once(spark, options(redis_server, tmp_path))
    written += drive(mesh, base + 40, 30)
    fresh = options(redis_server, tmp_path)
    fresh.checkpoint = str(tmp_path / "another-checkpoint")
    run_once(spark, fresh)
    assert_agrees(client, mesh, written)
