"""The executors' reduction of a batch of stream entries (pipeline/decode.py),
without Spark: what each partial row says."""

from __future__ import annotations

import json

from pipeline.decode import reduce_batch

SNAPSHOTS, EVENTS = "meshgate:snapshots", "meshgate:events"


def snapshot(seq: int, taken_at: float, queues: list[dict], node: str = "a", boot: float = 100.0) -> str:
    return json.dumps({"seq": seq, "taken_at": taken_at, "node": {"id": node, "started_at": boot},
                       "queues": [{"node": node, "in_flight": 0, "consumers": 0, **queue} for queue in queues]})


def columns(*entries: tuple) -> dict[str, list]:
    names = ("stream", "id", "node", "kind", "data")
    return {name: [entry[i] for entry in entries] for i, name in enumerate(names)}


def parts(rows: list[dict], part: str) -> list[dict]:
    return [row for row in rows if row["part"] == part]


def test_a_window_keeps_its_first_and_last_snapshot_whatever_the_order_and_its_deepest_depth():
    rows = reduce_batch(columns(
        (SNAPSHOTS, "1000-0", "a", None, snapshot(2, 101.0, [{"name": "q", "depth": 7, "enqueued": 10}])),
        (SNAPSHOTS, "1000-1", "a", None, snapshot(1, 100.5, [{"name": "q", "depth": 2, "enqueued": 4}])),
        (SNAPSHOTS, "1000-2", "a", None, snapshot(3, 109.0, [{"name": "q", "depth": 1, "enqueued": 12,
                                                              "acked": 11, "latency": [0, 3]}])),
        (SNAPSHOTS, "1000-3", "a", None, snapshot(4, 110.0, [{"name": "q", "depth": 0, "enqueued": 12}])),
    ), SNAPSHOTS, EVENTS, {}, 0.0)
    first_window, second_window = sorted(parts(rows, "queue"), key=lambda row: row["window"])
    assert (first_window["window"], first_window["first_seq"], first_window["last_seq"]) == (100, 1, 3)
    assert first_window["first"]["enqueued"] == 4 and first_window["last"]["enqueued"] == 12
    assert first_window["last"]["latency"] == [0, 3] and first_window["depth_max"] == 7
    assert first_window["now"] == {"depth": 1, "consumers": 0, "in_flight": 0, "at": 109.0}
    assert (second_window["window"], second_window["first_seq"]) == (110, 4)
    assert parts(rows, "boot") == [{"part": "boot", "node": "a", "boot": 100.0, "first_seq": 1}]
    (summary,) = parts(rows, "summary")
    assert (summary["entries"], summary["malformed"], summary["last_ms"], summary["last_seq"]) == (4, 0, 1000, 3)


def test_entries_already_applied_are_skipped_and_malformed_ones_counted():
    rows = reduce_batch(columns(
        (SNAPSHOTS, "5-0", "a", None, snapshot(1, 100.0, [{"name": "q", "depth": 1}])),
        (SNAPSHOTS, "6-0", "a", None, '{"seq": "two"}'),
        (SNAPSHOTS, "6-1", "a", None, snapshot(3, 100.0, [{"depth": 1}])),  # a queue without a name
        (EVENTS, "6-2", "a", None, '{"time": 100.0}'),  # no kind
        (EVENTS, "6-3", "a", "link_up", '{"time": 101.0}'),
    ), SNAPSHOTS, EVENTS, {SNAPSHOTS: (5, 0)}, 0.0)
    totals = {row["stream"]: (row["entries"], row["malformed"]) for row in parts(rows, "summary")}
    assert totals == {SNAPSHOTS: (2, 2), EVENTS: (2, 1)}
    assert parts(rows, "queue") == []
    assert parts(rows, "event") == [{"part": "event", "window": 100, "node": "a", "kind": "link_up", "count": 1}]


def test_late_entries_are_marked_and_late_events_not_counted_and_a_fast_clock_is_capped():
    rows = reduce_batch(columns(
        (SNAPSHOTS, "200000-0", "a", None, snapshot(1, 100.0, [{"name": "q", "depth": 1}])),
        (EVENTS, "200000-1", "a", "link_up", '{"time": 105.0}'),
        (EVENTS, "200000-2", "a", "link_up", '{"time": 900.0}'),  # its node's clock runs ahead of Redis's
    ), SNAPSHOTS, EVENTS, {}, 150.0)
    assert parts(rows, "queue")[0]["late"] is True
    assert parts(rows, "event") == [{"part": "event", "window": 900, "node": "a", "kind": "link_up", "count": 1}]
    late = {row["stream"]: (row["late_count"], row["max_time"]) for row in parts(rows, "summary")}
    assert late == {SNAPSHOTS: (1, 100.0), EVENTS: (1, 200.0)}
