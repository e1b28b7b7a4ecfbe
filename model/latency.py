"""End-to-end latency histograms: from the moment a node accepted a SEND to the
moment a consumer acknowledged the message, on whichever node.

Fixed log-scale buckets of microseconds, so histograms from any nodes and
intervals merge by adding counts: bucket 0 counts under 1 µs, bucket ``i``
(1 ≤ i < 31) counts ``[2**(i-1), 2**i)`` µs, and bucket 31 everything from
``2**30`` µs (about 18 minutes) up. A bucket index is ``int(µs).bit_length()``,
capped: recording costs one increment."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate, zip_longest

BUCKETS = 32
TOP = BUCKETS - 1


def empty_histogram() -> list[int]:
    return [0] * BUCKETS


def bucket_of(microseconds: float) -> int:
    if microseconds < 1:
        return 0
    index = int(microseconds).bit_length()
    return index if index < TOP else TOP


def bounds_us(index: int) -> tuple[float, float]:
    """The range of latencies bucket ``index`` counts, in microseconds."""
    if index == 0:
        return 0.0, 1.0
    high = float("inf") if index == TOP else float(2 ** index)
    return float(2 ** (index - 1)), high


def percentile_ms(counts: list[int], quantile: float) -> float | None:
    """The latency below which ``quantile`` (0–1) of the counted messages fall, in
    milliseconds, within a factor of two (the bucket's upper bound; the open top
    bucket answers its lower bound). None when nothing was counted."""
    return percentiles_ms(counts, (quantile,))[0]


def percentiles_ms(counts: list[int], quantiles: Sequence[float]) -> list[float | None]:
    """``percentile_ms`` of each of ``quantiles`` (ascending), in one pass."""
    cumulative = list(accumulate(counts))
    total = cumulative[-1] if cumulative else 0
    if not total:
        return [None] * len(quantiles)
    found: list[float | None] = []
    for quantile in quantiles:
        # The first bucket the running count reaches the rank in; counts are whole, so a
        # rank under one is reached by the first message (never by an empty bucket).
        index = bisect_left(cumulative, max(quantile * total, 1))
        found.append(None if index == len(cumulative) else reported_ms(index))
    return found


def reported_ms(index: int) -> float:
    """What a percentile falling in bucket ``index`` is reported as: its upper bound
    (the open top bucket: its lower bound), in milliseconds."""
    if index < BUCKETS:
        return _REPORTED_MS[index]
    low, high = bounds_us(index)
    return (low if high == float("inf") else high) / 1000.0


_REPORTED_MS = [(low if high == float("inf") else high) / 1000.0 for low, high in map(bounds_us, range(BUCKETS))]


def trimmed(histogram: list[int]) -> list[int]:
    """The histogram without its trailing empty buckets (as snapshots carry it)."""
    end = len(histogram)
    while end and not histogram[end - 1]:
        end -= 1
    return histogram[:end]


def padded(histogram: list[int]) -> list[int]:
    """All ``BUCKETS`` buckets of a histogram that may have been trimmed."""
    return list(histogram[:BUCKETS]) + [0] * (BUCKETS - len(histogram))


def merge(*histograms: list[int]) -> list[int]:
    """The bucket-by-bucket sum, all ``BUCKETS`` buckets."""
    merged = list(map(sum, zip_longest(*(histogram[:BUCKETS] for histogram in histograms), fillvalue=0)))
    return merged + [0] * (BUCKETS - len(merged))
