"""The executors' reduction of stream entries (pipeline/decode.py) and the
driver's merge of the tasks' rows (pipeline/transform.collect), without Spark:
what each partial row says, and which windows are late."""

from __future__ import annotations

import json

from model.rollups import COUNTERS
from pipeline.decode import partials_schema, reduce_entries
from pipeline.transform import collect

SNAPSHOTS, EVENTS = "meshgate:snapshots", "meshgate:events"


def snapshot(seq: int, taken_at: float, queues: list[dict], node: str = "a", boot: float = 100.0) -> bytes:
    queues = [{"node": node, "in_flight": 0, "consumers": 0, **queue} for queue in queues]
    return json.dumps({"seq": seq, "taken_at": taken_at, "node": {"id": node, "started_at": boot},
                       "queues": queues}).encode()


def reduce_plain(entries: list[tuple], snapshots: str, events: str):
    """Entries with no head fields, as a node of an earlier version wrote them: each decoded."""
    return reduce_entries([(*entry, None) for entry in entries], snapshots, events)


def parts(rows: list[dict], part: str) -> list[dict]:
    return [row for row in rows if row["part"] == part]


def test_a_window_keeps_its_first_and_last_snapshot_whatever_the_order_and_its_deepest_depth():
    rows = reduce_plain([
        (SNAPSHOTS, "1000-0", None, None, snapshot(2, 101.0, [{"name": "q", "depth": 7, "enqueued": 10}])),
        (SNAPSHOTS, "1000-1", None, None, snapshot(1, 100.5, [{"name": "q", "depth": 2, "enqueued": 4}])),
        (SNAPSHOTS, "1000-2", None, None, snapshot(3, 109.0, [{"name": "q", "depth": 1, "enqueued": 12,
                                                                "acked": 11, "latency": [0, 3]}])),
        (SNAPSHOTS, "1000-3", None, None, snapshot(4, 110.0, [{"name": "q", "depth": 0, "enqueued": 12}])),
    ], SNAPSHOTS, EVENTS).rows()
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
    rows = reduce_plain([
        (SNAPSHOTS, "5-0", None, None, snapshot(1, 100.0, [{"name": "q", "depth": 1}])),
        (SNAPSHOTS, "6-0", None, None, b'{"seq": "two"}'),
        (SNAPSHOTS, "6-1", None, None, snapshot(3, 100.0, [{"depth": 1}])),  # a queue without a name
        (SNAPSHOTS, "6-2", None, None, b"\xff not json"),
        (SNAPSHOTS, "6-3", None, None, None),  # no data field
        (EVENTS, "6-4", "a", None, b'{"time": 100.0}'),  # no kind
        (EVENTS, "6-5", "a", "link_up", b'{"time": 101.0}'),
    ], SNAPSHOTS, EVENTS).rows()
    totals = {(row["stream"], row["window"]): (row["entries"], row["malformed"]) for row in parts(rows, "summary")}
    assert totals == {(SNAPSHOTS, 100): (1, 0), (SNAPSHOTS, None): (4, 4), (EVENTS, None): (1, 1),
                      (EVENTS, 100): (1, 0)}
    assert [row["queue"] for row in parts(rows, "queue")] == ["q"]
    assert parts(rows, "event") == [{"part": "event", "window": 100, "node": "a", "kind": "link_up", "count": 1}]


def test_a_fast_clock_is_capped_at_redis_time():
    rows = reduce_plain([
        (EVENTS, "200000-1", "a", "link_up", b'{"time": 105.0}'),
        (EVENTS, "200000-2", "a", "link_up", b'{"time": 900.0}'),  # its node's clock runs ahead of Redis's
    ], SNAPSHOTS, EVENTS).rows()
    assert {row["window"]: row["max_time"] for row in parts(rows, "summary")} == {100: 105.0, 900: 200.0}


def summary(stream: str, window: int | None, entries: int, malformed: int, max_time: float | None,
            last: tuple[int, int]) -> dict:
    return {"part": "summary", "stream": stream, "window": window, "entries": entries, "malformed": malformed,
            "max_time": max_time, "last_ms": last[0], "last_seq": last[1]}


def table(rows: list[dict]):
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    return pa.Table.from_pylist(rows, schema=to_arrow_schema(partials_schema()))


def queue_row(window: int, first_seq: int, last_seq: int, enqueued: tuple[int, int], depth: int, depth_max: int,
              node: str = "a") -> dict:
    def counters(value: int) -> dict:
        return {**dict.fromkeys(COUNTERS, 0), "enqueued": value, "latency": [], "latency_sum_ms": 0.0}

    return {"part": "queue", "node": node, "boot": 1.0, "queue": "q", "window": window, "first_seq": first_seq,
            "last_seq": last_seq, "first": counters(enqueued[0]), "last": counters(enqueued[1]),
            "depth_max": depth_max, "now": {"depth": depth, "consumers": 0, "in_flight": 0, "at": float(window)}}


def test_collect_marks_late_windows_drops_late_events_and_sums_each_stream():
    collected = collect(table([
        summary(SNAPSHOTS, 100, 4, 0, 109.0, (5, 1)),
        summary(SNAPSHOTS, 140, 2, 0, 141.0, (7, 0)),
        summary(SNAPSHOTS, None, 1, 1, None, (6, 0)),
        summary(EVENTS, 100, 1, 0, 101.0, (5, 0)),
        queue_row(100, 1, 2, (1, 2), 1, 1), queue_row(140, 3, 4, (2, 3), 1, 1),
        {"part": "event", "window": 100, "node": "a", "kind": "link_up", "count": 1},
        {"part": "event", "window": 140, "node": "a", "kind": "link_up", "count": 2},
        {"part": "boot", "node": "a", "boot": 1.0, "first_seq": 3},
        {"part": "boot", "node": "a", "boot": 1.0, "first_seq": 1},
    ]), watermark=110.0)
    assert [row.window for row in collected.windows] == [100, 140]  # late ones too: the next counts from them
    assert collected.events == [(140, "a", "link_up", 2)]
    assert collected.boots == {("a", 1.0): 1}
    by_stream = {row["stream"]: row for row in collected.summary}
    assert by_stream[SNAPSHOTS] == {"stream": SNAPSHOTS, "entries": 7, "malformed": 1, "late": 4, "max_time": 141.0,
                                    "last_id": (7, 0)}
    assert (by_stream[EVENTS]["entries"], by_stream[EVENTS]["late"]) == (1, 1)
    assert collected.entries == 8


def test_collect_merges_a_window_two_tasks_reduced_and_leaves_out_idle_partial_queues():
    collected = collect(table([
        queue_row(100, 5, 7, (50, 70), depth=0, depth_max=9),  # the later half of the window, read by another task
        queue_row(100, 1, 4, (10, 40), depth=3, depth_max=4),
        queue_row(100, 1, 3, (0, 0), depth=0, depth_max=0, node="idle"),
    ]), watermark=0.0)
    [row] = collected.windows
    assert (row.node, row.first_seq, row.last_seq, row.first[0], row.last[0]) == ("a", 1, 7, 10, 70)
    assert (row.depth_max, row.depth, row.at) == (9, 0, 100.0)


def test_a_partial_queue_that_appears_or_goes_mid_window_keeps_its_own_first_and_last():
    rows = reduce_plain([
        (SNAPSHOTS, "1-0", None, None, snapshot(1, 100.0, [{"name": "q", "depth": 1, "enqueued": 1}])),
        (SNAPSHOTS, "1-1", None, None, snapshot(2, 101.0, [{"name": "q", "depth": 2, "enqueued": 2},
                                                           {"name": "new", "depth": 5, "enqueued": 5}])),
        (SNAPSHOTS, "1-2", None, None, snapshot(3, 102.0, [{"name": "new", "depth": 6, "enqueued": 6}])),
        (SNAPSHOTS, "1-3", None, None, snapshot(4, 103.0, [{"name": "new", "depth": 4, "enqueued": 7}])),
    ], SNAPSHOTS, EVENTS).rows()
    by_name = {row["queue"]: row for row in parts(rows, "queue")}
    q, new = by_name["q"], by_name["new"]
    assert (q["first_seq"], q["last_seq"], q["first"]["enqueued"], q["last"]["enqueued"]) == (1, 2, 1, 2)
    assert (q["depth_max"], q["now"]["at"]) == (2, 101.0)
    # "new" showed up after the start's first snapshot: it counts from zero, so its first is not sent.
    assert (new["first_seq"], new["last_seq"], new["first"], new["last"]["enqueued"]) == (2, 4, None, 7)
    assert (new["depth_max"], new["now"]["depth"]) == (6, 4)


def test_the_arrow_batches_say_what_the_rows_say():
    entries = [(SNAPSHOTS, f"1-{seq}", None, None, snapshot(seq, 100.0 + seq, [
        {"name": name, "depth": seq, "enqueued": seq * 2, "latency": [0, seq]} for name in ("a", "b")]))
        for seq in range(1, 15)]
    reduction = reduce_plain([*entries, (EVENTS, "2-0", "n", "link_up", b'{"time": 101.0}')], SNAPSHOTS, EVENTS)
    from_arrow = [{k: v for k, v in row.items() if v is not None}
                  for batch in reduction.record_batches(rows_per_batch=3) for row in batch.to_pylist()]
    from_rows = [{k: v for k, v in row.items() if v is not None} for row in reduction.rows()]
    def key(row: dict) -> str:
        return json.dumps(row, sort_keys=True)

    assert sorted(from_arrow, key=key) == sorted(from_rows, key=key) and len(from_rows) == 9


def test_counts_made_by_position_encode_as_counts_made_by_name():
    import msgspec
    import numpy as np

    from model.rollups import Counts, with_percentiles
    from pipeline.rollup import _counts
    from pipeline.window_counts import Block

    counters = np.arange(1, 2 * len(COUNTERS) + 1).reshape(2, len(COUNTERS))
    block = Block(published=np.array([3, 0]), counters=counters, depth_last=np.array([4, 0]),
                  depth_max=np.array([9, 0]), consumers=np.array([2, 0]), in_flight=np.array([1, 0]),
                  latency=np.array([[0, 2, 1], [0, 0, 0]]), sum_ms=np.array([7.5, 0.0]), at=np.array([100.5, 0.0]))
    made = [msgspec.json.decode(msgspec.json.encode(counts), type=Counts) for counts in _counts(block)]
    expected = with_percentiles(Counts(
        published=3, **dict(zip(COUNTERS, range(1, len(COUNTERS) + 1), strict=True)), depth_last=4, depth_max=9,
        consumers=2, in_flight=1, latency=[0, 2, 1], latency_sum_ms=7.5, at=100.5))
    assert made[0] == expected and expected.p99_ms is not None
    assert made[1] == Counts(**dict(zip(COUNTERS, range(len(COUNTERS) + 1, 2 * len(COUNTERS) + 1), strict=True)))
    assert msgspec.json.encode(_counts(block)[1]) == msgspec.json.encode(made[1])


def test_percentiles_on_columns_equal_the_models_and_rows_are_trimmed():
    import random

    import numpy as np

    from model import latency
    from pipeline import counting

    rng = random.Random(7)
    rows = [[rng.choice([0, 0, 1, 3, 40, 900]) for _ in range(latency.BUCKETS)] for _ in range(2000)]
    rows += [[0] * latency.BUCKETS, [0] * 5 + [1] + [0] * (latency.BUCKETS - 6)]
    histograms = np.array(rows, np.int64)
    p50, p95, p99 = counting.percentiles(histograms)
    assert [list(found) for found in zip(p50, p95, p99, strict=True)] == [
        latency.percentiles_ms(row, counting.QUANTILES) for row in rows]
    assert counting.trimmed_rows(histograms) == [latency.trimmed(row) for row in rows]


def headed(entry_id: str, seq: int, taken_at: float, queues: list[dict], version: int, node: str = "a",
           boot: float = 100.0, data: bytes | None = None) -> tuple:
    """A snapshot entry as a node of this version writes it: its head in fields of its own."""
    data = snapshot(seq, taken_at, queues, node, boot) if data is None else data
    return (SNAPSHOTS, entry_id, node, None, data, (repr(boot).encode(), b"%d" % seq, repr(taken_at).encode(),
                                                    b"%d" % version))


def test_headed_snapshots_give_the_rows_decoding_every_one_gives():
    import random

    rng = random.Random(7)
    plain, with_heads = [], []
    for node in ("a", "b"):
        names, version, seq, deepest = ["q1", "q2"], 1, 0, {}
        counters = {}
        for step in range(120):
            taken_at = 100.0 + step * 0.7
            if rng.random() < 0.05:  # a queue created or deleted: the set's version goes up
                version += 1
                names = names[1:] if len(names) > 2 or (names and rng.random() < 0.5) else [*names, f"q{step}"]
            window = taken_at // 10
            queues = []
            for name in names:
                counters[name] = counters.get(name, 0) + rng.randint(0, 5)
                depth = rng.randint(0, 30)
                peak = max(depth, deepest.get((name, window), 0), rng.randint(0, 40))  # a peak between snapshots
                deepest[(name, window)] = peak
                queues.append({"name": name, "depth": depth, "enqueued": counters[name], "window_depth_max": peak})
            seq += 1
            entry_id = f"{int(taken_at * 1000)}-{0 if node == 'a' else 1}"
            plain.append((SNAPSHOTS, entry_id, None, None, snapshot(seq, taken_at, queues, node), None))
            with_heads.append(headed(entry_id, seq, taken_at, queues, version, node))

    def queue_rows(entries: list[tuple]) -> list[dict]:
        return sorted(parts(reduce_entries(entries, SNAPSHOTS, EVENTS).rows(), "queue"),
                      key=lambda row: (row["node"], row["queue"], row["window"]))

    expected = queue_rows(plain)
    assert len(expected) > 20 and queue_rows(with_heads) == expected
    summaries = [sorted(parts(reduce_entries(entries, SNAPSHOTS, EVENTS).rows(), "summary"), key=lambda r: r["window"])
                 for entries in (plain, with_heads)]
    assert summaries[0] == summaries[1]


def test_a_headed_window_decodes_only_its_first_and_last_snapshot():
    queues = [{"name": "q", "depth": 3, "enqueued": 5, "window_depth_max": 9}]
    rows = reduce_entries([
        headed("1000-0", 1, 100.0, queues, 1),
        headed("1001-0", 2, 101.0, queues, 1, data=b"not json: never decoded"),
        headed("1002-0", 3, 102.0, [{**queues[0], "enqueued": 8, "window_depth_max": 12}], 1),
        headed("1003-0", 4, 103.0, queues, 1, data=b"{}"),  # the window's last: decoded, malformed
    ], SNAPSHOTS, EVENTS).rows()
    [row] = parts(rows, "queue")
    # The last did not decode: the first stands for the window (the next window counts on from it).
    assert (row["first_seq"], row["last_seq"], row["last"]["enqueued"], row["depth_max"]) == (1, 1, 5, 9)
    [summary] = parts(rows, "summary")
    assert (summary["entries"], summary["malformed"]) == (4, 1)


def test_bad_json_in_a_window_whose_queues_changed_is_counted_malformed_not_a_crash():
    one, two = [{"name": "q", "depth": 1, "enqueued": 1}], [{"name": "q", "depth": 2, "enqueued": 2},
                                                               {"name": "r", "depth": 0}]
    rows = reduce_entries([
        headed("1000-0", 1, 100.0, one, 1),
        headed("1001-0", 2, 101.0, two, 2),  # a queue created: the window is decoded snapshot by snapshot
        headed("1002-0", 3, 102.0, two, 2, data=b"not json"),
        headed("1003-0", 4, 103.0, two, 2),
    ], SNAPSHOTS, EVENTS).rows()
    assert sorted((row["queue"], row["last_seq"]) for row in parts(rows, "queue")) == [("q", 4), ("r", 4)]
    [summary] = parts(rows, "summary")
    assert (summary["entries"], summary["malformed"]) == (4, 1)


def test_a_windows_first_counters_come_only_where_the_node_start_can_take_a_baseline():
    def queues(enqueued: int) -> list[dict]:
        return [{"name": "q", "depth": 1, "enqueued": enqueued, "window_depth_max": 1}]

    # A start the pipeline joined late (its first snapshot here is seq 5), read by two tasks.
    first_task = reduce_entries([headed("100000-0", 5, 100.0, queues(50), 1),
                                 headed("101000-0", 6, 101.0, queues(60), 1)], SNAPSHOTS, EVENTS)
    second_task = reduce_entries([
        headed("102000-0", 7, 102.0, queues(70), 1), headed("103000-0", 8, 103.0, queues(80), 1),
        headed("110000-0", 9, 110.0, queues(90), 1, data=b"not json: a later window's first is never decoded"),
        headed("111000-0", 10, 111.0, queues(100), 1),
        headed("120000-0", 11, 120.0, queues(110), 1),
        headed("121000-0", 12, 121.0, queues(120), 1, data=b"{}"),  # a bad last: the first stands in
    ], SNAPSHOTS, EVENTS)
    rows = parts(second_task.rows(), "queue")
    by_window = {row["window"]: (row["first_seq"], row["first"] and row["first"]["enqueued"], row["last_seq"],
                                 row["last"]["enqueued"]) for row in rows}
    # The task's earliest snapshot of the start (seq 7) could be a baseline; the later windows' cannot.
    assert by_window == {100: (7, 70, 8, 80), 110: (9, None, 10, 100), 120: (11, None, 11, 110)}
    [summary] = [row for row in parts(second_task.rows(), "summary") if row["window"] == 120]
    assert summary["malformed"] == 1
    import pyarrow as pa

    merged = collect(pa.Table.from_batches([*first_task.record_batches(), *second_task.record_batches()]), 0.0)
    firsts = {row.window: (row.first_seq, row.first[0]) for row in merged.windows}
    # The window the two tasks cut keeps seq 5's counters (the start's baseline); the others none (zero).
    assert firsts == {100: (5, 50), 110: (9, 0), 120: (11, 0)}
