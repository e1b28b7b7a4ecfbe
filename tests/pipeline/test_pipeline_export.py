"""``meshgate pipeline --export DIR``: the streams' history as Parquet,
partitioned by day and node, equal to what the traffic did; exporting again
replaces, never doubles."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
from test_pipeline_rollups import drive
from traffic import COUNTER_NAMES, started_mesh


def test_the_export_writes_per_window_rows_by_day_and_node_and_replaces_on_a_second_run(
        client, redis_server, tmp_path, pipeline_process):
    mesh, base = started_mesh(client, 120, seed=3)
    drive(mesh, base, 30)
    target = tmp_path / "history"
    for _ in range(2):
        export = pipeline_process(redis_server.url, "--export", str(target))
        assert export.wait() == 0, export.log()
        queues = pq.read_table(target / "queues").to_pylist()
        events = pq.read_table(target / "events").to_pylist()
        day = time.strftime("%Y-%m-%d", time.gmtime(base))
        assert {(row["day"], row["node"]) for row in queues} == {(day, node) for node in ("a", "b", "c")}
        assert {p.name for p in (target / "queues").iterdir() if p.is_dir()} == {f"day={day}"}
        got = {(row["window_start"].timestamp(), row["queue"], row["node"]): row for row in queues}
        expected = {(w, q, n): c for (s, w, q, n), c in mesh.expected.counts.items() if s == 10}
        assert set(got) == set(expected)
        for key, counts in expected.items():
            assert {name: got[key][name] for name in COUNTER_NAMES} == counts, key
            assert got[key]["published"] == counts["enqueued"] - counts["forwarded_in"]
            assert got[key]["depth_last"] == mesh.expected.depth_last[(10, *key)][1]
        want_events = {(w, k): n for (s, w, k), n in mesh.expected.events.items() if s == 10}
        got_events: dict = {}
        for row in events:
            key = (row["window_start"].timestamp(), row["kind"])
            got_events[key] = got_events.get(key, 0) + row["count"]
        assert got_events == want_events
    assert "wrote" in export.log()
