"""Malformed entries, late data and node restarts: counted, dropped or absorbed,
never a crash, a negative count or a spike."""

from __future__ import annotations

import time

from rollup_support import assert_rollups_agree, cluster, queue, status
from test_pipeline_rollups import drive, options
from traffic import Mesh, started_mesh

from pipeline.job import run_once

MALFORMED = [
    ("snapshots", {"node": "a", "seq": 1, "schema": 1, "data": "not json"}),
    ("snapshots", {"node": "a", "seq": 2, "schema": 1, "data": '{"seq": 2, "taken_at": 5}'}),  # no node
    ("snapshots", {"node": "a", "seq": 3, "schema": 1, "data": '{"seq": "three", "taken_at": 5, '
                                                                '"node": {"id": "a", "started_at": 1}}'}),
    ("snapshots", {"node": "a", "data": b"\xff\xfe\x00binary"}),
    ("snapshots", {"node": "a"}),  # no data at all
    ("snapshots", {"node": "a", "seq": 4, "schema": 1,
                   "data": '{"seq": 4, "taken_at": 5, "node": {"id": "a", "started_at": 1}, '
                           '"queues": [{"depth": 1}]}'}),
    ("events", {"node": "a", "kind": "link_up", "schema": 1, "data": "{"}),
    ("events", {"node": "a", "schema": 1, "data": '{"kind": "link_up", "time": 5}'}),  # no kind field
    ("events", {"node": "a", "kind": "link_up", "schema": 1, "data": '{"kind": "link_up"}'}),  # no time
]


def test_malformed_entries_are_counted_and_skipped_and_the_rest_still_counts(spark, client, redis_server, tmp_path):
    mesh, base = started_mesh(client, 120, nodes=("a",))
    for tick in range(20):
        t = base + tick + 0.5
        mesh.send(t, "a", "orders", 5)
        if tick == 10:
            for stream, fields in MALFORMED:
                mesh.raw(stream, fields)
        mesh.snapshot(t, "a")
        mesh.event(t, "a")
    run_once(spark, options(redis_server, tmp_path))
    applied = status(client)
    assert applied.malformed == len(MALFORMED)
    assert applied.entries == 40 + len(MALFORMED)
    assert_rollups_agree(client, mesh.expected)


def test_late_entries_inside_the_watermark_count_and_outside_are_dropped(spark, client, redis_server, tmp_path):
    mesh = Mesh(client)
    now = time.time()
    base = float(int(now // 10) * 10 - 60)
    mesh.start("a", base - 1000)
    for tick in range(50):
        t = base + tick + 0.5
        mesh.send(t, "a", "orders", 1)
        mesh.snapshot(t, "a")
    run_once(spark, options(redis_server, tmp_path, watermark_s=120))
    watermark = status(client).watermark
    assert abs(watermark - (base + 49.5 - 120)) < 1e-6
    inside, outside = base - 40 + 1, base - 400 + 1  # windows ending after / before the watermark
    mesh.event(inside, "a", "link_up")
    mesh.event(outside, "a", "link_up", count=False)
    mesh.event(base + 50.5, "a", "link_up")
    run_once(spark, options(redis_server, tmp_path, watermark_s=120))
    applied = status(client)
    assert applied.late == 1
    assert cluster(client, 10, float(int(inside // 10) * 10)).events == {"link_up": 1}
    assert cluster(client, 10, float(int(outside // 10) * 10)) is None
    assert_rollups_agree(client, mesh.expected)


def test_a_node_restart_starts_its_counters_again_without_a_negative_or_a_spike(spark, client, redis_server,
                                                                                tmp_path):
    mesh, base = started_mesh(client, 180, nodes=("a",))
    for tick in range(30):
        t = base + tick + 0.5
        mesh.send(t, "a", "orders", 100)
        mesh.ack(t, "a", "orders", 100)
        mesh.snapshot(t, "a")
    mesh.start("a", base + 31)  # a restart: counters from zero, seq from 1
    for tick in range(32, 60):
        t = base + tick + 0.5
        mesh.send(t, "a", "orders", 2)
        mesh.ack(t, "a", "orders", 1)
        mesh.snapshot(t, "a")
    run_once(spark, options(redis_server, tmp_path))
    assert_rollups_agree(client, mesh.expected)
    after = queue(client, 10, base + 40, "orders")
    assert (after.total.enqueued, after.total.acked) == (20, 10)


def test_a_node_start_the_pipeline_joins_late_is_a_baseline_not_a_spike(spark, client, redis_server, tmp_path):
    mesh = Mesh(client)
    base = float(int(time.time() // 60) * 60 - 120)
    mesh.start("a", base - 3600)
    for tick in range(20):  # what the node did before the pipeline could see it: trimmed away below
        mesh.send(base + tick, "a", "orders", 1000)
        mesh.snapshot(base + tick, "a", count_depth=False)
    client.delete("meshgate:snapshots")
    mesh.expected = type(mesh.expected)()
    first_seen = base + 20.5
    mesh.nodes["a"].queues["orders"].counters["enqueued"] += 7  # done before the first snapshot seen
    mesh.snapshot(first_seen, "a")
    for tick in range(21, 40):
        t = base + tick + 0.5
        mesh.send(t, "a", "orders", 3)
        mesh.snapshot(t, "a")
    run_once(spark, options(redis_server, tmp_path))
    assert_rollups_agree(client, mesh.expected)
    window = queue(client, 10, base + 20, "orders")
    assert window.total.enqueued == 9 * 3  # ticks 21..29: the 20,007 before them are the baseline


def test_a_one_off_run_that_cannot_reach_redis_fails_with_a_message(pipeline_process, tmp_path):
    from meshgate.redis_server import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    run = pipeline_process(url, "--once", "--checkpoint", str(tmp_path / "checkpoint"))
    assert run.wait() == 1, run.log()
    assert "meshgate pipeline: failed:" in run.log() and "Connection refused" in run.log(), run.log()


def test_a_backlog_read_in_small_batches_counts_every_window(spark, client, redis_server, tmp_path):
    """The events stream is small: with a limit per batch its fair share would reach
    the end of the backlog in the first batch, and its event time would carry the
    watermark past the snapshots still to come, dropping them as late. The streams
    are read in step instead."""
    mesh, base = started_mesh(client, 480, seed=3)
    written = drive(mesh, base, 400)
    run_once(spark, options(redis_server, tmp_path, watermark_s=60, max_entries=300))
    applied = status(client)
    assert (applied.entries, applied.late) == (written, 0)
    assert_rollups_agree(client, mesh.expected)
