"""End to end: a 3-node mesh publishing its snapshots and events to Redis, STOMP
traffic through it, and ``meshgate pipeline`` (Spark, local[2]) rolling it up —
the rollups say what the clients did."""

from __future__ import annotations

import subprocess
import sys

import msgspec
import pytest
import redis
from e2e_support import manage_result, unique
from mesh_support import mesh_fixture, send_many, wait_until  # noqa: F401  (the fixture)

from model.requests import Summary
from model.rollups import CLUSTER_FIELD, ClusterWindow, Counts, QueueWindow, index_key, queue_field, window_key

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def pipeline(tmp_path, redis_server):
    log_path = tmp_path / "pipeline.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "meshgate.cli", "pipeline", "--redis", redis_server.url, "--trigger", "0.5",
             "--checkpoint", str(tmp_path / "checkpoint")], stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    process.log = lambda: log_path.read_text(errors="replace")[-3000:]
    yield process
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def queue_windows(client: redis.Redis, queue: str) -> list[QueueWindow]:
    windows = []
    for start in client.zrange(index_key("meshgate", "10s"), 0, -1):
        raw = client.hget(window_key("meshgate", "10s", float(start)), queue_field(queue))
        if raw:
            windows.append(msgspec.json.decode(raw, type=QueueWindow))
    return sorted(windows, key=lambda window: window.start)


def totals(windows: list[QueueWindow]) -> Counts:
    counts = Counts()
    for window in windows:
        for name in ("published", "enqueued", "acked", "forwarded_out", "redistributed_out"):
            setattr(counts, name, getattr(counts, name) + getattr(window.total, name))
    return counts


def test_the_pipeline_rolls_up_what_a_three_node_mesh_carried(mesh, redis_server, pipeline):
    a, b, c = mesh(3, sets=[f"metrics.redis_url={redis_server.url}", "metrics.interval_ms=200"])
    ids = {node.name: manage_result(node.stomp, Summary()).node.id for node in (a, b, c)}
    client = redis.Redis.from_url(redis_server.url)
    orders, parked = unique("orders"), unique("parked")

    consumer = c.client()
    consumer.subscribe("/queue/" + orders, ack="client-individual")
    send_many(a.client(), "/queue/" + orders, [f"a{i}" for i in range(30)])
    send_many(b.client(), "/queue/" + orders, [f"b{i}" for i in range(20)])
    for message in consumer.listener.wait_for(50):
        consumer.ack(message)
    send_many(a.client(), "/queue/" + parked, [f"p{i}" for i in range(10)])

    def rolled_up() -> bool:
        assert pipeline.poll() is None, pipeline.log()
        carried, waiting = totals(queue_windows(client, orders)), queue_windows(client, parked)
        return (carried.published, carried.acked) == (50, 50) and bool(waiting) and \
            (totals(waiting).published, waiting[-1].total.depth_last) == (10, 10)

    def describe() -> str:
        parked_windows = [(w.start, w.total) for w in queue_windows(client, parked)]
        return f"orders: {totals(queue_windows(client, orders))}; parked: {parked_windows}; {pipeline.log()}"

    wait_until(rolled_up, "rollups of 50 sent and acked and 10 parked", timeout=180, describe=describe)
    carried = queue_windows(client, orders)
    moved = totals(carried)
    assert moved.forwarded_out + moved.redistributed_out >= 50  # a and b's messages all went to c's consumer
    assert {node for window in carried for node in window.nodes} == set(ids.values())
    acked_windows = [window for window in carried if window.total.acked]
    assert all(window.total.p50_ms and window.total.p99_ms >= window.total.p50_ms for window in acked_windows)
    assert sum(sum(window.total.latency) for window in carried) == 50

    starts = client.zrange(index_key("meshgate", "10s"), 0, -1)
    cluster = [msgspec.json.decode(client.hget(window_key("meshgate", "10s", float(start)), CLUSTER_FIELD),
                                   type=ClusterWindow) for start in starts]
    assert sum(window.total.published for window in cluster) >= 60
    assert set().union(*(window.nodes for window in cluster)) == set(ids.values())
