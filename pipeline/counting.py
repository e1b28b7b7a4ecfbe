"""Counting a micro-batch's windows on columns (numpy), for ``rollup``: each
partial queue's window counts from the one before it (or from what the rollups
kept of it), so a window's count is its last counters minus its base; a coarser
window sums the 10-second ones inside it. A Python object per window cost more
than everything else the driver does, so only the results become objects.

The rules are ``rollup``'s (its module docstring): a window whose last snapshot
was counted already (a replay) is a duplicate and skipped; a late window (closed
before the watermark) counts nowhere but moves its partial queue's base; a
difference below zero counts as zero."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from model.latency import reported_ms
from pipeline.decode import WINDOW_SECONDS
from pipeline.transform import WindowColumns

QUANTILES = (0.50, 0.95, 0.99)


@dataclass
class Base:
    """Where a partial queue counts from: the last seq, counters, histogram and latency
    sum before the batch, and whether the rollups kept them (a window whose last seq
    is not above a kept one is a duplicate)."""

    seq: int
    counters: Any
    latency: Any
    sum_ms: float
    kept: bool


@dataclass
class Counted:
    """What partial queues did in windows of one resolution: per row, its window's
    start, queue, node, counters (``COUNTERS`` columns), histogram (the buckets up to
    the last any row filled), latency sum, deepest depth and latest gauges; ``unit``
    the partial queue it belongs to."""

    unit: Any
    start: Any
    queue: Any
    node: Any
    delta: Any
    latency: Any
    sum_ms: Any
    depth_max: Any
    depth: Any
    consumers: Any
    in_flight: Any
    at: Any

    def __len__(self) -> int:
        return len(self.start)

    def take(self, rows: Any) -> Counted:
        """The rows ``rows`` (indices, a mask or a slice) of every column."""
        return Counted(**{name: column[rows] for name, column in self.__dict__.items()})


def partial_queue_starts(windows: WindowColumns) -> Any:
    """The rows where a partial queue (node, boot, queue) starts."""
    node, boot, queue = windows.node, windows.boot, windows.queue
    first = np.ones(len(node), bool)
    first[1:] = (node[1:] != node[:-1]) | (boot[1:] != boot[:-1]) | (queue[1:] != queue[:-1])
    return np.flatnonzero(first)


def count(windows: WindowColumns, starts: Any, bases: list[Base], watermark: float) -> tuple[Counted, Any]:
    """Each window's count from its base (the window before it in the batch, else the
    partial queue's ``Base``), for the windows to count (neither duplicates nor late);
    and per partial queue the row of its last window that was not a duplicate (-1:
    none), whose last counters are its base from now on."""
    size = len(windows)
    unit = np.zeros(size, np.int64)
    unit[starts[1:]] = 1
    unit = np.cumsum(unit)
    width = max(windows.last_latency.shape[1], max((len(base.latency) for base in bases), default=0))
    last_latency = widened(windows.last_latency, width)
    base_seq = np.array([base.seq for base in bases], np.int64)
    base_counters = np.array([list(base.counters) for base in bases], np.int64).reshape(len(bases), -1)
    base_latency = np.zeros((len(bases), width), np.int64)
    for at, base in enumerate(bases):
        base_latency[at, :len(base.latency)] = base.latency
    base_sum = np.array([base.sum_ms for base in bases], np.float64)
    kept = np.array([base.kept for base in bases], bool)

    duplicate = kept[unit] & (base_seq[unit] >= windows.last_seq)
    after = np.zeros(size, bool)  # counts from the window before it in the batch
    after[1:] = (unit[1:] == unit[:-1]) & ~duplicate[:-1]
    before = np.flatnonzero(after) - 1
    counters, latency, sum_ms = base_counters[unit], base_latency[unit], base_sum[unit]
    counters[after], latency[after], sum_ms[after] = windows.last[before], last_latency[before], \
        windows.last_sum_ms[before]

    delta = np.maximum(windows.last - counters, 0)
    latency = np.maximum(last_latency - latency, 0)
    latency = latency[:, :filled_width(latency)]  # the empty buckets after the last filled: less to carry
    acked = latency.any(axis=1)
    sum_ms = np.where(acked, np.maximum(windows.last_sum_ms - sum_ms, 0.0), 0.0)
    ends = np.concatenate((starts[1:], [size])) - 1
    lasts = np.where(duplicate[ends], -1, ends)
    rows = np.flatnonzero(~duplicate & (windows.window + WINDOW_SECONDS > watermark))
    return Counted(unit[rows], windows.window[rows].astype(np.float64), windows.queue[rows], windows.node[rows],
                   delta[rows], latency[rows], sum_ms[rows], windows.depth_max[rows], windows.depth[rows],
                   windows.consumers[rows], windows.in_flight[rows], windows.at[rows]), lasts


def by_window(counted: Counted, seconds: int) -> Counted:
    """The counts summed over windows of ``seconds``: a partial queue's consecutive
    10-second windows inside one (its deepest depth, its latest gauges)."""
    start = counted.start - counted.start % seconds
    if seconds == WINDOW_SECONDS or not len(counted):
        return Counted(**{**counted.__dict__, "start": start})
    first = np.ones(len(start), bool)
    first[1:] = (counted.unit[1:] != counted.unit[:-1]) | (start[1:] != start[:-1])
    runs = np.flatnonzero(first)
    ends = np.concatenate((runs[1:], [len(start)])) - 1
    return Counted(counted.unit[runs], start[runs], counted.queue[runs], counted.node[runs],
                   np.add.reduceat(counted.delta, runs, axis=0), np.add.reduceat(counted.latency, runs, axis=0),
                   np.add.reduceat(counted.sum_ms, runs), np.maximum.reduceat(counted.depth_max, runs),
                   counted.depth[ends], counted.consumers[ends], counted.in_flight[ends], counted.at[ends])


def percentiles(histograms: Any) -> list[list[float | None]]:
    """``model.latency.percentiles_ms`` of each row, for each of ``QUANTILES``: one list
    per quantile."""
    # The buckets after the last filled one move no rank: left out (most of them, often).
    cumulative = np.cumsum(histograms[:, :max(filled_width(histograms), 1)], axis=1)
    total = cumulative[:, -1] if cumulative.shape[1] else np.zeros(len(cumulative), np.int64)
    reported = np.array([reported_ms(index) for index in range(max(cumulative.shape[1], 1))], object)
    empty = total == 0
    found = []
    for quantile in QUANTILES:
        rank = np.maximum(quantile * total, 1)
        values = reported[np.minimum((cumulative < rank[:, None]).sum(axis=1), len(reported) - 1)]
        values[empty] = None
        found.append(values.tolist())
    return found


def trimmed_rows(histograms: Any) -> list[list[int]]:
    """Each row as a list without its trailing empty buckets."""
    width = filled_width(histograms)
    if not width:
        return [[] for _ in range(len(histograms))]
    filled = histograms[:, :width] != 0
    lengths = np.where(filled.any(axis=1), width - np.argmax(filled[:, ::-1], axis=1), 0)
    return [row if length == width else row[:length]
            for row, length in zip(histograms[:, :width].tolist(), lengths.tolist(), strict=True)]


def filled_width(histograms: Any) -> int:
    """The buckets up to the last one filled in any row."""
    filled = np.flatnonzero(histograms.any(axis=0))
    return int(filled[-1]) + 1 if len(filled) else 0


def widened(histograms: Any, width: int) -> Any:
    """The histograms with empty buckets added up to ``width``."""
    if histograms.shape[1] >= width:
        return histograms
    wider = np.zeros((len(histograms), width), np.int64)
    wider[:, :histograms.shape[1]] = histograms
    return wider
