"""A window's counts per partial queue (one node's part of a queue) as columns
(numpy), for ``rollup``: a micro-batch's counted rows are added to them, and the
totals its documents carry (a queue's across nodes, a node's across queues, the
whole mesh's) are summed on them. An object per partial queue, kept and summed
attribute by attribute, cost more than everything else the driver did, so only
the documents written become objects (``rollup``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from model.rollups import COUNTERS, Counts
from pipeline.counting import Counted, widened

_ENQUEUED, _FORWARDED_IN, _REDISTRIBUTED_IN = map(COUNTERS.index, ("enqueued", "forwarded_in", "redistributed_in"))


@dataclass
class Block:
    """The counts of some partial queues, or of sums of them, as columns: per row,
    published, counters (``COUNTERS`` columns), gauges, histogram, latency sum and
    last snapshot time. A sum's published is its parts' (each at least zero), not
    the difference of its summed counters."""

    published: Any
    counters: Any
    depth_last: Any
    depth_max: Any
    consumers: Any
    in_flight: Any
    latency: Any
    sum_ms: Any
    at: Any

    def sums(self, starts: Any) -> Block:
        """Each group's sum, the groups being the rows from each of ``starts`` to the
        next; its time the latest of its rows' (at least zero, as ``Counts``')."""
        return Block(*(np.add.reduceat(column, starts, axis=0) for column in (
            self.published, self.counters, self.depth_last, self.depth_max, self.consumers, self.in_flight,
            self.latency, self.sum_ms)), np.maximum(np.maximum.reduceat(self.at, starts), 0.0))

    def total(self) -> Block:
        """The sum of every row (of none: zero)."""
        return Block(*(column.sum(axis=0, keepdims=True) for column in (
            self.published, self.counters, self.depth_last, self.depth_max, self.consumers, self.in_flight,
            self.latency, self.sum_ms)), self.at.max(initial=0.0, keepdims=True))


class WindowCounts:
    """One window's partial queues, a row each, in the order they first came."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], int] = {}  # (queue, node) -> row
        self.queues: dict[str, int] = {}  # queue -> code, in the order they came
        self.nodes: dict[str, int] = {}  # node -> code, likewise
        self.queue = np.zeros(0, np.int64)  # each row's queue code
        self.node = np.zeros(0, np.int64)  # and node code
        self.counters = np.zeros((0, len(COUNTERS)), np.int64)
        self.depth_last = np.zeros(0, np.int64)
        self.depth_max = np.zeros(0, np.int64)
        self.consumers = np.zeros(0, np.int64)
        self.in_flight = np.zeros(0, np.int64)
        self.latency = np.zeros((0, 0), np.int64)  # as wide as the widest histogram added
        self.sum_ms = np.zeros(0, np.float64)
        self.at = np.zeros(0, np.float64)

    @classmethod
    def stored(cls, queues: dict[str, dict[str, Counts]]) -> WindowCounts:
        """What a window holds in Redis (each queue's ``QueueWindow.nodes``) as columns."""
        counts = cls()
        parts = [(queue, node, partial) for queue, nodes in queues.items() for node, partial in nodes.items()]
        if not parts:
            return counts
        rows = counts._rows(np.array([queue for queue, _, _ in parts], object),
                            np.array([node for _, node, _ in parts], object))
        partials = [partial for _, _, partial in parts]
        counts._widen(max(len(partial.latency) for partial in partials))
        counts.counters[rows] = [[getattr(partial, name) for name in COUNTERS] for partial in partials]
        for row, partial in zip(rows.tolist(), partials, strict=True):
            counts.latency[row, :len(partial.latency)] = partial.latency
        for name in ("depth_last", "depth_max", "consumers", "in_flight", "at"):
            getattr(counts, name)[rows] = [getattr(partial, name) for partial in partials]
        counts.sum_ms[rows] = [partial.latency_sum_ms for partial in partials]
        return counts

    def add(self, counted: Counted) -> None:
        """Counted rows of this window added, in their order: counters, histograms and
        latency sums add up, the deepest depth stays, and the gauges are those of the
        latest snapshot (of equal ones, the row added last)."""
        rows = self._rows(counted.queue, counted.node)
        self._widen(counted.latency.shape[1])
        # ufunc.at adds a row's repeats (a node started twice in the window) in order.
        np.add.at(self.counters, rows, counted.delta)
        np.add.at(self.latency, rows, widened(counted.latency, self.latency.shape[1]))
        np.add.at(self.sum_ms, rows, counted.sum_ms)
        np.maximum.at(self.depth_max, rows, counted.depth_max)
        order = np.lexsort((counted.at, rows))  # stable: of equal times, the later row last
        ordered = rows[order]
        latest = order[np.append(ordered[1:] != ordered[:-1], True)]
        latest = latest[counted.at[latest] >= self.at[rows[latest]]]
        into = rows[latest]
        self.depth_last[into], self.consumers[into] = counted.depth[latest], counted.consumers[latest]
        self.in_flight[into], self.at[into] = counted.in_flight[latest], counted.at[latest]

    def by_queue(self, names: set[str]) -> tuple[list[str], list[int], list[str], Block, Block]:
        """The partial queues of the queues ``names``, grouped by queue: each group's
        queue, where the groups start (and the end), each row's node, the rows and
        each group's total."""
        wanted = np.zeros(len(self.queues), bool)
        wanted[np.array([self.queues[name] for name in names], np.int64)] = True
        rows = np.flatnonzero(wanted[self.queue])
        rows = rows[np.argsort(self.queue[rows], kind="stable")]  # a queue's nodes in the order they came
        codes = self.queue[rows]
        starts = _starts(codes)
        queues, nodes = list(self.queues), list(self.nodes)
        partials = self._block(rows)
        return ([queues[code] for code in codes[starts].tolist()], [*starts.tolist(), len(rows)],
                [nodes[code] for code in self.node[rows].tolist()], partials, partials.sums(starts))

    def by_node(self) -> tuple[list[str], Block, Block]:
        """Each node's total across queues (nodes in name order), and the window's."""
        nodes = list(self.nodes)
        rank = np.zeros(len(nodes), np.int64)
        rank[sorted(range(len(nodes)), key=nodes.__getitem__)] = np.arange(len(nodes))
        rows = np.argsort(rank[self.node], kind="stable")
        codes = self.node[rows]
        starts = _starts(codes)
        totals = self._block(rows).sums(starts)
        return [nodes[code] for code in codes[starts].tolist()], totals, totals.total()

    def _block(self, rows: Any) -> Block:
        counters = self.counters[rows]
        published = np.maximum(counters[:, _ENQUEUED] - counters[:, _FORWARDED_IN] - counters[:, _REDISTRIBUTED_IN], 0)
        return Block(published, counters, self.depth_last[rows], self.depth_max[rows], self.consumers[rows],
                     self.in_flight[rows], self.latency[rows], self.sum_ms[rows], self.at[rows])

    def _rows(self, queue: Any, node: Any) -> Any:
        """The rows of (``queue``, ``node``) pairs, made for the new ones (zero, and
        older than any snapshot)."""
        rows = self.rows
        before = len(rows)
        keys = zip(queue.tolist(), node.tolist(), strict=True)
        found = np.fromiter((rows.setdefault(key, len(rows)) for key in keys), np.int64, len(queue))
        if len(rows) == before:
            return found
        new = list(rows)[before:]
        size = len(new)
        queues, nodes = self.queues, self.nodes
        self.queue = np.concatenate((self.queue, [queues.setdefault(name, len(queues)) for name, _ in new]))
        self.node = np.concatenate((self.node, [nodes.setdefault(name, len(nodes)) for _, name in new]))
        self.counters = np.concatenate((self.counters, np.zeros((size, len(COUNTERS)), np.int64)))
        self.latency = np.concatenate((self.latency, np.zeros((size, self.latency.shape[1]), np.int64)))
        for name in ("depth_last", "depth_max", "consumers", "in_flight"):
            setattr(self, name, np.concatenate((getattr(self, name), np.zeros(size, np.int64))))
        self.sum_ms = np.concatenate((self.sum_ms, np.zeros(size)))
        self.at = np.concatenate((self.at, np.full(size, -np.inf)))
        return found

    def _widen(self, width: int) -> None:
        self.latency = widened(self.latency, width)


def _starts(values: Any) -> Any:
    """Where each run of equal values starts."""
    if not len(values):
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.append(True, values[1:] != values[:-1]))
