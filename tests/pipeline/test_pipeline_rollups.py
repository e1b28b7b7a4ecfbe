"""Generated snapshots and events through the real job on local Spark: the
rollups in Redis equal what the test works out from the traffic itself."""

from __future__ import annotations

import pytest
from rollup_support import assert_rollups_agree, cluster, status
from traffic import Mesh, started_mesh

from pipeline.job import JobOptions, run_once


def options(redis_server, tmp_path, **more) -> JobOptions:
    return JobOptions(redis_url=redis_server.url, checkpoint=str(tmp_path / "checkpoint"), **more)


def drive(mesh: Mesh, base: float, seconds: int, nodes=("a", "b", "c"), queues=("orders", "audit", "mail")) -> int:
    """Random traffic on every node, each snapshotting every second (staggered).
    Traffic happens at the snapshot's time, so it shows in the window of the
    snapshot that first carries it."""
    rng = mesh.random
    written = 0
    for tick in range(seconds):
        for offset, node in enumerate(nodes):
            t = base + tick + 0.1 + 0.3 * offset
            for name in queues:
                if rng.random() < 0.7:
                    mesh.send(t, node, name, rng.randint(1, 20), via_link=rng.random() < 0.2)
                partial = mesh.nodes[node].queues.get(name)
                if partial and partial.depth > 0 and rng.random() < 0.6:
                    mesh.ack(t, node, name, rng.randint(1, partial.depth), latency_us=rng.choice(
                        [300, 1500, 9000, 70_000, 400_000]))
                if partial and partial.depth > 5 and rng.random() < 0.1:
                    mesh.forward(t, node, name, 3)
            mesh.snapshot(t, node)
            written += 1
            if rng.random() < 0.1:
                mesh.event(t, node, rng.choice(["link_up", "dead_letter"]))
                written += 1
    return written


@pytest.mark.parametrize("headed", [True, False], ids=["as-nodes-write", "without-head-fields"])
def test_rollups_equal_what_the_traffic_did_at_both_resolutions(spark, client, redis_server, tmp_path, headed):
    mesh, base = started_mesh(client, 240, headed=headed)
    written = drive(mesh, base, 150)
    run_once(spark, options(redis_server, tmp_path))
    assert_rollups_agree(client, mesh.expected)
    applied = status(client)
    assert (applied.entries, applied.malformed, applied.late) == (written, 0, 0)
    whole_minute = cluster(client, 60, base + 60)
    sent = [c["enqueued"] - c["forwarded_in"] for (s, w, _, _), c in mesh.expected.counts.items()
            if (s, w) == (60, base + 60)]
    assert whole_minute.total.published == sum(sent) > 0
    assert set(whole_minute.nodes) == {"a", "b", "c"} and whole_minute.queues == 3
