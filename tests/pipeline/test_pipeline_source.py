"""The redis_streams data source on its own: batch reads, offsets, partitions,
field columns or a map, Arrow or tuples, admission control, availableNow and
commit; bad options fail with a message naming them."""

from __future__ import annotations

import json

import pytest

from pipeline.source import fair_shares


def fill(client, key: str, count: int, start: int = 0, every_ms: int | None = None) -> list[str]:
    """``count`` entries; ``every_ms`` apart in id time (from 2023-11-14) if given, else as Redis stamps them."""
    pipe = client.pipeline(transaction=False)
    for i in range(start, start + count):
        entry_id = "*" if every_ms is None else f"{1_700_000_000_000 + i * every_ms}-0"
        pipe.xadd(key, {"n": str(i), "kind": "even" if i % 2 == 0 else "odd"}, id=entry_id)
    return [entry_id.decode() for entry_id in pipe.execute()]


def reader(spark, redis_server, **options):
    frame = spark.read.format("redis_streams").option("url", redis_server.url)
    for name, value in options.items():
        frame = frame.option(name, value)
    return frame.load()


def test_a_batch_read_gives_every_entry_once_split_into_partitions(spark, client, redis_server):
    a_ids = fill(client, "s:a", 5000, every_ms=1)
    b_ids = fill(client, "s:b", 1200, every_ms=7)
    burst = fill(client, "s:c", 3000)  # in a few milliseconds: cut where the milliseconds allow
    frame = reader(spark, redis_server, streams="s:a,s:b", fields="n,kind", entriesPerPartition="1000")
    assert frame.rdd.getNumPartitions() == 5 + 2
    rows = frame.collect()
    assert sorted((r.stream, r.id) for r in rows) == sorted([("s:a", i) for i in a_ids] + [("s:b", i) for i in b_ids])
    first = min((r for r in rows if r.stream == "s:a"), key=lambda r: int(r.n))
    assert (first.id, first.n, first.kind) == (a_ids[0], "0", "even")
    assert abs(first.time.timestamp() * 1000 - int(a_ids[0].split("-")[0])) < 1
    bursts = reader(spark, redis_server, streams="s:c", fields="n", entriesPerPartition="1000")
    assert sorted(r.id for r in bursts.collect()) == sorted(burst)


def test_offsets_start_after_an_id_and_end_at_one_inclusive(spark, client, redis_server):
    ids = fill(client, "s:a", 100)
    other = fill(client, "s:b", 10)
    rows = reader(spark, redis_server, streams="s:a", fields="n", startingOffsets=ids[9],
                  endingOffsets=ids[19]).collect()
    assert sorted(int(r.n) for r in rows) == list(range(10, 20))
    by_stream = reader(spark, redis_server, streams="s:a,s:b", fields="n",
                       startingOffsets=json.dumps({"s:a": ids[97]})).collect()
    assert sorted((r.stream, r.id) for r in by_stream) == sorted([("s:a", ids[98]), ("s:a", ids[99])]
                                                                 + [("s:b", i) for i in other])
    assert reader(spark, redis_server, streams="s:a", startingOffsets="latest").count() == 0


def test_the_map_column_arrow_and_tuples_read_the_same_and_bad_bytes_are_replaced(spark, client, redis_server):
    fill(client, "s:a", 50)
    client.xadd("s:a", {"n": b"\xff\xfe", b"\xc3": "x"})
    arrow = reader(spark, redis_server, streams="s:a").collect()
    tuples = reader(spark, redis_server, streams="s:a", arrow="false").collect()
    assert [r.asDict() for r in arrow] == [r.asDict() for r in tuples]
    assert arrow[0].fields == {"n": "0", "kind": "even"}
    assert arrow[-1].fields == {"n": "\ufffd\ufffd", "\ufffd": "x"}


def test_a_stream_query_takes_at_most_max_entries_a_batch_shared_fairly_in_step_and_commits(
        spark, client, redis_server, tmp_path):
    a_ids = fill(client, "s:a", 700, every_ms=1)  # 700 entries over 0.7 s
    b_ids = fill(client, "s:b", 40, every_ms=10)  # 40 over 0.4 s
    batches: list[dict[str, int]] = []

    def collect(frame, batch_id):
        batches.append({r["stream"]: r["count"] for r in frame.groupBy("stream").count().collect()})

    query = (spark.readStream.format("redis_streams").option("url", redis_server.url).option("streams", "s:a,s:b")
             .option("maxEntriesPerTrigger", "300").option("progressKey", "progress").load()
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None
    # Batch 0: the fair shares are 260 and 40, but s:a's part stops at its 260th entry
    # (259 ms), so s:b's stops there too (26 entries); batch 1 is fair and in step.
    assert batches == [{"s:a": 260, "s:b": 26}, {"s:a": 286, "s:b": 14}, {"s:a": 154}]
    # Spark commits a batch's offsets when it plans the next one: the last may not be committed yet.
    progress = {key.decode(): value.decode() for key, value in client.hgetall("progress").items()}
    assert progress["s:b"] == b_ids[-1] and progress["s:a"] in (a_ids[259], a_ids[545], a_ids[-1])


@pytest.mark.parametrize(("options", "message"), [
    ({}, "'streams' option is required"),
    ({"streams": "s:a", "maxEntriesPerTrigger": "0"}, "maxEntriesPerTrigger must be positive"),
    ({"streams": "s:a", "startingOffsets": "yesterday"}, "invalid literal"),
])
def test_bad_options_fail_with_a_message_that_names_them(spark, redis_server, options, message):
    with pytest.raises(Exception, match=message):
        reader(spark, redis_server, **options).collect()


def test_fair_shares_split_a_limit_and_pass_on_what_a_short_stream_leaves():
    assert fair_shares({"a": 1000, "b": 1000}, 300) == {"a": 150, "b": 150}
    assert fair_shares({"a": 1000, "b": 40}, 300) == {"a": 260, "b": 40}
    assert fair_shares({"a": 5, "b": 3}, 300) == {"a": 5, "b": 3}
    assert fair_shares({"a": 10, "b": 10, "c": 10}, 2) == {"a": 1, "b": 1, "c": 0}
    assert sum(fair_shares({"a": 7, "b": 9, "c": 100}, 31).values()) == 31


def test_a_reader_that_ended_its_last_batch_at_the_streams_end_does_not_count_again(client, redis_server):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from pipeline.source import Options, StreamReader

    def scripts() -> int:
        stats = client.info("commandstats")
        return sum(stats.get(name, {}).get("calls", 0) for name in ("cmdstat_evalsha", "cmdstat_eval"))

    a_ids, b_ids = fill(client, "s:a", 700), fill(client, "s:b", 40)
    reader = StreamReader(Options({"url": redis_server.url, "streams": "s:a,s:b"}))
    limit = ReadMaxRows(300)
    # The streams hold more than the limit and the reader knows nothing yet: it counts.
    before = scripts()
    end = reader.latestOffset({"s:a": a_ids[599], "s:b": b_ids[-1]}, limit)
    assert end == {"s:a": a_ids[-1], "s:b": b_ids[-1]} and scripts() > before
    # The next batch starts where that one ended: what came since is known without counting.
    a_more, b_more = fill(client, "s:a", 50, start=700), fill(client, "s:b", 10, start=40)
    before = scripts()
    end = reader.latestOffset(end, limit)
    assert end == {"s:a": a_more[-1], "s:b": b_more[-1]} and scripts() == before
    # More than the limit came: it counts, and the batch takes exactly the limit.
    a_most = fill(client, "s:a", 400, start=750)
    end = reader.latestOffset(end, limit)
    assert end == {"s:a": a_most[299], "s:b": b_more[-1]} and scripts() > before


def test_estimated_admission_reads_nothing_more_and_gives_batches_of_about_the_limit_in_step(client, redis_server):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from pipeline.source import NOTHING, Options, StreamReader, id_key

    def scripts_and_reads() -> int:
        stats = client.info("commandstats")
        return sum(stats.get(name, {}).get("calls", 0) for name in ("cmdstat_evalsha", "cmdstat_eval",
                                                                       "cmdstat_xrange"))

    fill(client, "s:a", 700, every_ms=1)  # 700 entries over 0.7 s
    fill(client, "s:b", 40, every_ms=10)  # 40 over 0.4 s
    reader = StreamReader(Options({"url": redis_server.url, "streams": "s:a,s:b", "admission": "estimate"}))
    start, sizes, before = {"s:a": NOTHING, "s:b": NOTHING}, [], scripts_and_reads()
    while True:
        end = reader.latestOffset(start, ReadMaxRows(300))
        if end == start:
            break
        parts = {key: len(client.xrange(key, f"({start[key]}", end[key])) for key in end}
        sizes.append(parts)
        if end["s:b"] != fill_last(client, "s:b"):  # in step: s:b stops within one of its entries of s:a's end
            assert abs(id_key(end["s:a"])[0] - id_key(end["s:b"])[0]) < 10
        start = end
        before += len(end)  # the test's own XRANGEs
    assert scripts_and_reads() == before  # no entry counted or paged through to decide
    assert sum(part["s:a"] for part in sizes) == 700 and sum(part["s:b"] for part in sizes) == 40
    assert len(sizes) == 3 and all(sum(part.values()) <= 300 for part in sizes[:-1])
    assert all(sum(part.values()) >= 270 for part in sizes[:2])  # about the limit, not far below


def test_estimated_admission_moves_past_a_burst_bigger_than_the_limit(client, redis_server):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from pipeline.source import NOTHING, Options, StreamReader

    pipe = client.pipeline(transaction=False)
    for i in range(500):  # all in one millisecond
        pipe.xadd("s:a", {"n": str(i)}, id=f"1700000000000-{i + 1}")
    pipe.xadd("s:a", {"n": "late"}, id="1700000005000-0")
    ids = [entry_id.decode() for entry_id in pipe.execute()]
    reader = StreamReader(Options({"url": redis_server.url, "streams": "s:a", "admission": "estimate"}))
    end = reader.latestOffset({"s:a": NOTHING}, ReadMaxRows(300))
    assert end == {"s:a": ids[499]}  # the burst in one batch: it moves, and stops before the next entry
    assert reader.latestOffset(end, ReadMaxRows(300)) == {"s:a": ids[-1]}


def fill_last(client, key: str) -> str:
    return client.xrevrange(key, count=1)[0][0].decode()


def test_estimated_admission_takes_a_rest_just_over_the_limit_rather_than_leave_it_for_a_batch_of_its_own(
        client, redis_server):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from pipeline.source import NOTHING, Options, StreamReader

    ids = fill(client, "s:a", 320, every_ms=1)
    reader = StreamReader(Options({"url": redis_server.url, "streams": "s:a", "admission": "estimate"}))
    assert reader.latestOffset({"s:a": NOTHING}, ReadMaxRows(300)) == {"s:a": ids[-1]}  # 320: within 10% over
    more = fill(client, "s:a", 400, start=320, every_ms=1)
    end = reader.latestOffset({"s:a": ids[-1]}, ReadMaxRows(300))
    assert more.index(end["s:a"]) in range(290, 300)  # 400: about the limit, the rest after
