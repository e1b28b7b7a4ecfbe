"""model/latency.py: log-scale latency buckets, and the queue counting acks into them."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.testing import MemoryReactorClock

from gateway.broker.broker import Broker
from gateway.store.memory import MemoryStore
from model.latency import BUCKETS, TOP, bounds_us, bucket_of, empty_histogram, merge, percentile_ms, percentiles_ms


@pytest.mark.parametrize("microseconds, bucket", [
    (0, 0),
    (0.5, 0),
    (0.999, 0),
    (1, 1),
    (1.5, 1),
    (2, 2),
    (3, 2),
    (3.999, 2),
    (4, 3),
    (1023, 10),
    (1023.9, 10),
    (1024, 11),
    (2 ** 29, 30),
    (2 ** 30 - 1, 30),
    (2 ** 30, TOP),
    (1e12, TOP),
    (1e300, TOP),
])
def test_bucket_of_boundaries(microseconds, bucket):
    assert bucket_of(microseconds) == bucket


def test_negative_latency_counts_in_the_first_bucket():
    assert bucket_of(-5.0) == 0  # a clock that stepped back must not index from the end


def test_histogram_shape():
    assert BUCKETS == 32 and TOP == 31
    assert empty_histogram() == [0] * 32
    assert empty_histogram() is not empty_histogram()


def test_bounds_us():
    assert bounds_us(0) == (0.0, 1.0)
    assert bounds_us(1) == (1.0, 2.0)
    assert bounds_us(2) == (2.0, 4.0)
    assert bounds_us(11) == (1024.0, 2048.0)
    assert bounds_us(30) == (2.0 ** 29, 2.0 ** 30)
    assert bounds_us(TOP) == (2.0 ** 30, math.inf)


@pytest.mark.parametrize("index", range(BUCKETS))
def test_bounds_and_bucket_of_agree(index):
    low, high = bounds_us(index)
    assert bucket_of(low) == index
    if high != math.inf:
        assert bucket_of(high) == index + 1
        assert bucket_of(math.nextafter(high, 0)) == index
    # Buckets tile the line: each starts where the one before ends.
    if index:
        assert bounds_us(index - 1)[1] == low


def test_percentile_of_nothing_is_none():
    assert percentile_ms(empty_histogram(), 0.5) is None
    assert percentile_ms([], 0.99) is None


def histogram_of(latencies_us):
    counts = empty_histogram()
    for value in latencies_us:
        counts[bucket_of(value)] += 1
    return counts


def true_percentile(latencies_us, quantile):
    ordered = sorted(latencies_us)
    rank = max(1, math.ceil(quantile * len(ordered)))
    return ordered[rank - 1]


def test_percentiles_of_known_latencies_are_within_a_factor_of_two():
    rng = random.Random(7)
    # Mostly fast, a slow tail: 0.3 ms typical, a few ms, a few hundred ms.
    latencies = ([rng.uniform(200, 400) for _ in range(900)] + [rng.uniform(3000, 7000) for _ in range(90)]
                 + [rng.uniform(150_000, 250_000) for _ in range(10)])
    counts = histogram_of(latencies)
    for quantile in (0.5, 0.9, 0.99, 0.999):
        true_ms = true_percentile(latencies, quantile) / 1000.0
        answer = percentile_ms(counts, quantile)
        assert true_ms < answer <= 2 * true_ms, (quantile, true_ms, answer)
    assert 0.2 < percentile_ms(counts, 0.5) <= 0.512
    assert 3.0 < percentile_ms(counts, 0.99) <= 8.192


def test_percentile_answers_the_upper_bound_of_the_bucket():
    counts = histogram_of([1500] * 10)  # bucket 11: [1024, 2048) µs
    assert percentile_ms(counts, 0.5) == 2.048
    assert percentile_ms(counts, 1.0) == 2.048
    assert percentile_ms(histogram_of([0.2]), 0.5) == 0.001  # under 1 µs


def test_open_top_bucket_answers_its_lower_bound():
    counts = histogram_of([10, 20, 5e9])  # the last one: about 83 minutes
    assert percentile_ms(counts, 0.5) == 0.032  # the 2nd of 3: 20 µs, in [16, 32)
    assert percentile_ms(counts, 1.0) == 2 ** 30 / 1000.0
    only_top = empty_histogram()
    only_top[TOP] = 4
    assert percentile_ms(only_top, 0.5) == 2 ** 30 / 1000.0


def test_percentile_skips_empty_buckets_at_quantile_zero():
    counts = histogram_of([100, 100, 5000])
    assert percentile_ms(counts, 0.0) == 0.128  # the smallest, not bucket 0


@given(st.lists(st.floats(min_value=1.0, max_value=2.0 ** 30 - 1), min_size=1, max_size=200),
       st.floats(min_value=0.0, max_value=1.0))
def test_percentile_property(latencies, quantile):
    true_ms = true_percentile(latencies, quantile) / 1000.0
    answer = percentile_ms(histogram_of(latencies), quantile)
    assert true_ms < answer <= 2 * true_ms


@given(st.lists(st.integers(min_value=0, max_value=50), max_size=BUCKETS),
       st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=5))
def test_percentiles_in_one_pass_equal_each_asked_alone(counts, quantiles):
    quantiles = sorted(quantiles)
    assert percentiles_ms(counts, quantiles) == [percentile_ms_alone(counts, q) for q in quantiles]


def percentile_ms_alone(counts, quantile):
    """The definition, one quantile at a time: the first bucket whose running count reaches the rank."""
    total, seen = sum(counts), 0
    for index, count in enumerate(counts):
        seen += count
        if count and seen >= quantile * total:
            low, high = bounds_us(index)
            return (low if high == float("inf") else high) / 1000.0
    return None


def test_merge_adds_bucket_by_bucket():
    a = histogram_of([1, 5, 5, 1e10])
    b = histogram_of([5, 300])
    merged = merge(a, b)
    assert merged == [x + y for x, y in zip(a, b, strict=True)]
    assert merged[bucket_of(5)] == 3 and merged[TOP] == 1 and sum(merged) == 6
    assert a == histogram_of([1, 5, 5, 1e10]) and b == histogram_of([5, 300])  # inputs untouched
    assert merge() == empty_histogram()
    assert merge(a) == a and merge(a) is not a


def test_merge_tolerates_short_and_long_histograms():
    assert merge([1, 2], [0, 0, 3]) == [1, 2, 3] + [0] * (BUCKETS - 3)
    longer = [1] * (BUCKETS + 5)
    assert merge(longer) == [1] * BUCKETS


def test_merging_then_asking_equals_asking_all_at_once():
    first, second = [100.0] * 50 + [9000.0] * 5, [20.0] * 40 + [70000.0] * 5
    merged = merge(histogram_of(first), histogram_of(second))
    assert merged == histogram_of(first + second)
    assert percentile_ms(merged, 0.99) == percentile_ms(histogram_of(first + second), 0.99)


# -- the queue's ack counting ---------------------------------------------------------------


@pytest.fixture
def clock():
    clock = MemoryReactorClock()
    clock.advance(1_700_000_000)  # a created time of 0 means "unknown": start the clock somewhere real
    return clock


def test_send_stamps_created_from_the_broker_clock(clock):
    broker = Broker(MemoryStore(), clock=clock)
    message = broker.send("queue", "orders", {}, b"x")
    assert message.created == 1_700_000_000


@pytest.mark.parametrize("delay", [0.0, 0.0000005, 0.000003, 0.0005, 0.0015, 0.25, 3.0, 600.0, 5000.0])
def test_acknowledged_counts_the_bucket_of_the_latency(clock, delay):
    broker = Broker(MemoryStore(), clock=clock)
    queue = broker.queue("orders")
    message = broker.send("queue", "orders", {}, b"x")
    clock.advance(delay)
    now = clock.seconds()
    queue.acknowledged([message], now)
    expected = empty_histogram()
    expected[bucket_of((now - message.created) * 1e6)] += 1
    assert queue.latency == expected
    assert queue.acked == 1


def test_acknowledged_buckets_each_message_and_skips_unknown_created(clock):
    broker = Broker(MemoryStore(), clock=clock)
    queue = broker.queue("orders")
    early = broker.send("queue", "orders", {}, b"a")
    clock.advance(0.002)
    late = broker.send("queue", "orders", {}, b"b")
    unknown = broker.send("queue", "orders", {}, b"c")
    unknown.created = 0.0  # e.g. recovered from a journal written before messages carried it
    clock.advance(0.0001)
    now = clock.seconds()
    queue.acknowledged([early, late, unknown], now)
    expected = empty_histogram()
    expected[bucket_of((now - early.created) * 1e6)] += 1
    expected[bucket_of((now - late.created) * 1e6)] += 1
    assert bucket_of((now - early.created) * 1e6) != bucket_of((now - late.created) * 1e6)
    assert queue.latency == expected
    assert sum(queue.latency) == 2
    assert queue.acked == 3  # the unknown one is acked all the same
    assert queue.latency_sum == pytest.approx(((now - early.created) + (now - late.created)) * 1e6)
    queue.acknowledged([], now)
    assert queue.acked == 3 and sum(queue.latency) == 2


def test_acknowledged_accumulates_across_calls(clock):
    broker = Broker(MemoryStore(), clock=clock)
    queue = broker.queue("orders")
    messages = [broker.send("queue", "orders", {}, b"x") for _ in range(5)]
    clock.advance(0.01)
    queue.acknowledged(messages[:2], clock.seconds())
    queue.acknowledged(messages[2:], clock.seconds())
    index = bucket_of(0.01 * 1e6)
    assert queue.latency[index] == 5 and sum(queue.latency) == 5
    assert queue.acked == 5
    assert percentile_ms(queue.latency, 0.5) == bounds_us(index)[1] / 1000.0


def test_acknowledged_with_a_clock_that_stepped_back(clock):
    broker = Broker(MemoryStore(), clock=clock)
    queue = broker.queue("orders")
    message = broker.send("queue", "orders", {}, b"x")
    queue.acknowledged([message], message.created - 2.0)
    assert queue.latency[0] == 1 and sum(queue.latency) == 1
