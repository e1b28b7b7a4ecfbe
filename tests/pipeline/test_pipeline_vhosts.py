"""The rollups per vhost (docs/pipeline.md, "Rollup keys in Redis"): two vhosts
with a queue of the same name roll up as two queues, each exact, under keys that
name the vhost; the default vhost's keep the keys they had before vhosts, and
windows written then (with no vhost) read as "/" and are added to; the Parquet
export names the vhost in a column of its own."""

from __future__ import annotations

import msgspec
import pyarrow.parquet as pq
from rollup_support import assert_rollups_agree, cluster, queue, status
from test_pipeline_rollups import drive, options
from traffic import started_mesh

from model.rollups import QueueWindow, queue_field, queue_key, split_queue_key, window_key
from pipeline.job import run_once

TEAM_A, TEAM_B = "team-a", "team b/é"


def test_a_queue_name_in_two_vhosts_rolls_up_as_two_queues_each_exact(spark, client, redis_server, tmp_path):
    mesh, base = started_mesh(client, 120, seed=5)
    names = ("orders", queue_key("orders", TEAM_A), queue_key("orders", TEAM_B))
    written = drive(mesh, base, 60, queues=names)
    run_once(spark, options(redis_server, tmp_path))
    assert_rollups_agree(client, mesh.expected)
    assert (status(client).entries, status(client).malformed) == (written, 0)
    minute = window_key("meshgate", "1m", base)
    assert {field.decode() for field in client.hkeys(minute)} == {
        "cluster", "queue:orders", "vhost-queue:team-a/orders", "vhost-queue:team%20b%2F%C3%A9/orders"}
    default, team_a = queue(client, 60, base, "orders"), queue(client, 60, base, names[1])
    assert (default.vhost, team_a.vhost, team_a.queue) == ("/", TEAM_A, "orders")
    assert default.total.enqueued != team_a.total.enqueued  # different traffic, not one queue's sum twice
    assert cluster(client, 60, base).queues == 3


def test_windows_written_before_vhosts_read_as_the_default_vhost_and_are_added_to(
        spark, client, redis_server, tmp_path):
    mesh, base = started_mesh(client, 120, seed=9)
    drive(mesh, base, 25, queues=("orders", "audit"))
    run_once(spark, options(redis_server, tmp_path))
    # What a pipeline from before vhosts wrote: the same fields, documents without "vhost".
    for key in client.keys("meshgate:rollup:*"):
        if key.endswith(b":index"):
            continue
        for field, raw in client.hgetall(key).items():
            if field.startswith(b"queue:"):
                document = msgspec.json.decode(raw)
                assert document.pop("vhost") == "/"
                client.hset(key, field, msgspec.json.encode(document))
    mesh.random.seed(10)
    drive(mesh, base + 25, 20, queues=("orders", "audit", queue_key("audit", TEAM_A)))  # the same windows go on
    run_once(spark, options(redis_server, tmp_path))
    assert_rollups_agree(client, mesh.expected)
    raw = client.hget(window_key("meshgate", "1m", base), queue_field("orders"))
    assert msgspec.json.decode(raw, type=QueueWindow).vhost == "/"
    assert queue(client, 60, base, queue_key("audit", TEAM_A)).total.enqueued > 0


def test_the_export_has_a_vhost_column_and_the_queue_name_alone(client, redis_server, tmp_path, pipeline_process):
    mesh, base = started_mesh(client, 120, seed=4, nodes=("a",))
    drive(mesh, base, 20, nodes=("a",), queues=("orders", queue_key("orders", TEAM_B)))
    export = pipeline_process(redis_server.url, "--export", str(tmp_path / "history"))
    assert export.wait() == 0, export.log()
    rows = pq.read_table(tmp_path / "history" / "queues").to_pylist()
    got = {(row["window_start"].timestamp(), row["vhost"], row["queue"]): row["enqueued"] for row in rows}
    expected = {(w, *split_queue_key(q)): c["enqueued"] for (s, w, q, _), c in mesh.expected.counts.items() if s == 10}
    assert got == expected and {vhost for _, vhost, _ in got} == {"/", TEAM_B}
