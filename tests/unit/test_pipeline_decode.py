"""The executors' reduction of stream entries (pipeline/decode.py) and the
driver's split of the merged rows (pipeline/transform.split), without Spark:
what each partial row says, and which windows are late."""

from __future__ import annotations

import json

from pipeline.decode import reduce_entries
from pipeline.transform import split

SNAPSHOTS, EVENTS = "meshgate:snapshots", "meshgate:events"


def snapshot(seq: int, taken_at: float, queues: list[dict], node: str = "a", boot: float = 100.0) -> bytes:
    queues = [{"node": node, "in_flight": 0, "consumers": 0, **queue} for queue in queues]
    return json.dumps({"seq": seq, "taken_at": taken_at, "node": {"id": node, "started_at": boot},
                       "queues": queues}).encode()


def parts(rows: list[dict], part: str) -> list[dict]:
    return [row for row in rows if row["part"] == part]


def test_a_window_keeps_its_first_and_last_snapshot_whatever_the_order_and_its_deepest_depth():
    rows = reduce_entries([
        (SNAPSHOTS, "1000-0", None, None, snapshot(2, 101.0, [{"name": "q", "depth": 7, "enqueued": 10}])),
        (SNAPSHOTS, "1000-1", None, None, snapshot(1, 100.5, [{"name": "q", "depth": 2, "enqueued": 4}])),
        (SNAPSHOTS, "1000-2", None, None, snapshot(3, 109.0, [{"name": "q", "depth": 1, "enqueued": 12,
                                                                "acked": 11, "latency": [0, 3]}])),
        (SNAPSHOTS, "1000-3", None, None, snapshot(4, 110.0, [{"name": "q", "depth": 0, "enqueued": 12}])),
    ], SNAPSHOTS, EVENTS)
    first_window, second_window = sorted(parts(rows, "queue"), key=lambda row: row["window"])
    assert (first_window["window"], first_window["first_seq"], first_window["last_seq"]) == (100, 1, 3)
    assert first_window["first"]["enqueued"] == 4 and first_window["last"]["enqueued"] == 12
    assert first_window["last"]["latency"] == [0, 3] and first_window["depth_max"] == 7
    assert first_window["now"] == {"depth": 1, "consumers": 0, "in_flight": 0, "at": 109.0}
    assert (second_window["window"], second_window["first_seq"]) == (110, 4)
    assert parts(rows, "boot") == [{"part": "boot", "node": "a", "boot": 100.0, "first_seq": 1}]
    summary = {row["window"]: (row["entries"], row["malformed"], row["last_ms"], row["last_seq"])
               for row in parts(rows, "summary")}
    assert summary == {100: (3, 0, 1000, 2), 110: (1, 0, 1000, 3)}


def test_malformed_entries_are_counted_apart_and_skipped():
    rows = reduce_entries([
        (SNAPSHOTS, "5-0", None, None, snapshot(1, 100.0, [{"name": "q", "depth": 1}])),
        (SNAPSHOTS, "6-0", None, None, b'{"seq": "two"}'),
        (SNAPSHOTS, "6-1", None, None, snapshot(3, 100.0, [{"depth": 1}])),  # a queue without a name
        (SNAPSHOTS, "6-2", None, None, b"\xff not json"),
        (SNAPSHOTS, "6-3", None, None, None),  # no data field
        (EVENTS, "6-4", "a", None, b'{"time": 100.0}'),  # no kind
        (EVENTS, "6-5", "a", "link_up", b'{"time": 101.0}'),
    ], SNAPSHOTS, EVENTS)
    totals = {(row["stream"], row["window"]): (row["entries"], row["malformed"]) for row in parts(rows, "summary")}
    assert totals == {(SNAPSHOTS, 100): (1, 0), (SNAPSHOTS, None): (4, 4), (EVENTS, None): (1, 1),
                      (EVENTS, 100): (1, 0)}
    assert [row["queue"] for row in parts(rows, "queue")] == ["q"]
    assert parts(rows, "event") == [{"part": "event", "window": 100, "node": "a", "kind": "link_up", "count": 1}]


def test_a_fast_clock_is_capped_at_redis_time():
    rows = reduce_entries([
        (EVENTS, "200000-1", "a", "link_up", b'{"time": 105.0}'),
        (EVENTS, "200000-2", "a", "link_up", b'{"time": 900.0}'),  # its node's clock runs ahead of Redis's
    ], SNAPSHOTS, EVENTS)
    assert {row["window"]: row["max_time"] for row in parts(rows, "summary")} == {100: 105.0, 900: 200.0}


def merged_summary(stream: str, window: int | None, entries: int, malformed: int, max_time: float | None,
                   last: tuple[int, int]) -> dict:
    return {"part": "summary", "stream": stream, "window": window, "entries": entries, "malformed": malformed,
            "max_time": max_time, "last_id": {"id_ms": last[0], "id_seq": last[1]}}


def test_split_marks_late_windows_drops_late_events_and_sums_each_stream():
    queue = {"part": "queue", "node": "a", "boot": 1.0, "queue": "q", "first_seq": 1, "last_seq": 2, "first": {},
             "last": {}, "depth_max": 3, "now": {}}
    rows = split([
        merged_summary(SNAPSHOTS, 100, 4, 0, 109.0, (5, 1)),
        merged_summary(SNAPSHOTS, 140, 2, 0, 141.0, (7, 0)),
        merged_summary(SNAPSHOTS, None, 1, 1, None, (6, 0)),
        merged_summary(EVENTS, 100, 1, 0, 101.0, (5, 0)),
        {**queue, "window": 100}, {**queue, "window": 140},
        {"part": "event", "window": 100, "node": "a", "kind": "link_up", "count": 1},
        {"part": "event", "window": 140, "node": "a", "kind": "link_up", "count": 2},
        {"part": "boot", "window": None, "node": "a", "boot": 1.0, "first_seq": 1},
    ], watermark=110.0)
    assert [(row["window"], row["late"]) for row in rows["queue"]] == [(100, True), (140, False)]
    assert rows["event"] == [{"window": 140, "node": "a", "kind": "link_up", "count": 2}]
    assert rows["boot"] == [{"node": "a", "boot": 1.0, "first_seq": 1}]
    by_stream = {row["stream"]: row for row in rows["summary"]}
    assert by_stream[SNAPSHOTS] == {"stream": SNAPSHOTS, "entries": 7, "malformed": 1, "late": 4, "max_time": 141.0,
                                    "last_id": {"id_ms": 7, "id_seq": 0}}
    assert (by_stream[EVENTS]["entries"], by_stream[EVENTS]["late"]) == (1, 1)
