"""One moment of the mesh as the console shows it: node, link and queue rows and
the totals, computed at once from every node's latest two snapshots and then only
read (by many requests and the live worker, from any thread)."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from console.mesh.shapes import (
    LinkRow,
    NodeRow,
    Overview,
    QueueDetail,
    QueuePart,
    QueueRow,
    QueueWhere,
    Rates,
)
from model.latency import merge
from model.mesh import Link, PartialQueue, Snapshot
from model.rollups import queue_key

STALE_INTERVALS = 3  # a node whose snapshot is this many intervals late is down
MIN_STALE = 3.0  # seconds


@dataclass(frozen=True)
class NodeSnapshots:
    """A node's latest snapshot and the one before (for rates)."""

    latest: Snapshot
    previous: Snapshot | None
    previous_queues: dict[str, PartialQueue]  # by queue_key

    @property
    def interval(self) -> float:
        if self.previous is None or self.previous.node.started_at != self.latest.node.started_at:
            return 1.0
        return max(0.05, self.latest.taken_at - self.previous.taken_at)

    def fresh(self, now: float) -> bool:
        return now - self.latest.taken_at <= max(MIN_STALE, STALE_INTERVALS * self.interval)


class MeshFrame:
    def __init__(self, snapshots: dict[str, NodeSnapshots], now: float) -> None:
        self.taken_at = now
        self.snapshots = snapshots
        self._fresh = {node_id: s.fresh(now) for node_id, s in snapshots.items()}
        self._reports = self._link_reports()
        self.nodes = self._nodes()
        self.names = {row.id: row.name for row in self.nodes}
        self.version = 0
        self.states = {row.id: row.state for row in self.nodes}
        self.links = self._links()
        self.queues = self._queues()
        self.queue_index = {row.key: row for row in self.queues}  # by queue_key
        self.overview = self._overview()

    # -- states -----------------------------------------------------------------------------

    def _link_reports(self) -> dict[str, list[Link]]:
        """What the nodes that write fresh snapshots say of their links, by peer."""
        reports: dict[str, list[Link]] = {}
        for node_id, snapshots in self.snapshots.items():
            if self._fresh[node_id]:
                for link in snapshots.latest.links:
                    reports.setdefault(link.peer, []).append(link)
        return reports

    def _state_of(self, node_id: str) -> str:
        snapshots = self.snapshots.get(node_id)
        reported = self._reports.get(node_id, ())
        if snapshots is None or not self._fresh[node_id]:
            if snapshots is None and any(link.state == "up" for link in reported):
                return "silent"  # linked, but it writes no snapshots (metrics off)
            return "down"
        if reported and all(link.state == "down" for link in reported):
            return "down"  # its neighbours lost it: it is gone, whatever its last snapshot says
        return "leaving" if snapshots.latest.node.state == "leaving" else "up"

    # -- rows -------------------------------------------------------------------------------

    def _nodes(self) -> list[NodeRow]:
        rows = {}
        self._partial_rates: dict[str, dict[str, Rates]] = {}
        for node_id, snapshots in self.snapshots.items():
            snapshot = snapshots.latest
            queues = snapshot.queues
            rates = Rates()
            partial_rates = self._partial_rates[node_id] = {}
            for partial in queues:
                partial_rates[queue_key(partial.name, partial.vhost)] = these = _rates(snapshots, partial)
                if these is not _NO_RATES:
                    rates.add(these)
            rows[node_id] = NodeRow(
                id=node_id, name=snapshot.node.name, state=self._state_of(node_id),
                age=max(0.0, self.taken_at - snapshot.taken_at), node=snapshot.node, queues=len(queues),
                messages=sum(_messages(q) for q in queues), consumers=sum(q.consumers for q in queues),
                in_doubt=snapshot.node.in_doubt, links_up=sum(1 for link in snapshot.links if link.state == "up"),
                links_down=sum(1 for link in snapshot.links if link.state == "down"), rates=rates,
            )
        for snapshots in self.snapshots.values():
            for link in snapshots.latest.links:
                if link.peer not in rows:
                    rows[link.peer] = NodeRow(id=link.peer, name=link.peer_name, state=self._state_of(link.peer),
                                              age=None, node=None)
        return sorted(rows.values(), key=lambda row: (row.name, row.id))

    def _queues(self) -> list[QueueRow]:
        """Totals per queue; where each queue is (:meth:`with_where_of`) and its
        partial queues in full (:meth:`detail`) are made when asked for: a page shows
        a hundred queues, the mesh may hold a hundred thousand partial queues."""
        groups: dict[str, list[tuple[str, str, PartialQueue, Rates]]] = {}
        for node_id, snapshots in self.snapshots.items():
            if not self._fresh[node_id]:
                continue  # a down node's partial queues are not counted: they are not there to be had
            name = snapshots.latest.node.name
            rates = self._partial_rates[node_id]
            for partial in snapshots.latest.queues:
                key = queue_key(partial.name, partial.vhost)
                groups.setdefault(key, []).append((node_id, name, partial, rates[key]))
        self._groups = groups
        rows = []
        for items in groups.values():
            rates = Rates()
            depth = in_flight = forwarding = in_doubt = consumers = 0
            latency_sum = 0.0
            histograms = []
            for _, _, partial, partial_rates in items:
                depth += partial.depth
                in_flight += partial.in_flight
                forwarding += partial.forwarding
                in_doubt += partial.in_doubt
                consumers += partial.consumers
                if partial_rates is not _NO_RATES:
                    rates.add(partial_rates)
                if partial.latency_sum_ms:
                    latency_sum += partial.latency_sum_ms
                    histograms.append(partial.latency)
            rows.append(QueueRow(
                name=items[0][2].name, vhost=items[0][2].vhost, messages=depth + in_flight + forwarding + in_doubt,
                depth=depth, in_flight=in_flight,
                forwarding=forwarding, in_doubt=in_doubt, consumers=consumers, node_count=len(items), rates=rates,
                latency=merge(*histograms), latency_sum_ms=latency_sum))
        return sorted(rows, key=lambda row: (row.name, row.vhost))

    def detail(self, row: QueueRow) -> QueueDetail:
        """The queue with each node's partial queue in full, by node name."""
        parts = [QueuePart(node=node_id, node_name=name, messages=_messages(partial), depth=partial.depth,
                           in_flight=partial.in_flight, forwarding=partial.forwarding, in_doubt=partial.in_doubt,
                           consumers=partial.consumers, oldest_age_ms=partial.oldest_age_ms, rates=rates,
                           partial=partial)
                 for node_id, name, partial, rates in self._groups.get(row.key, ())]
        parts.sort(key=lambda part: part.node_name)
        return QueueDetail(**msgspec.structs.asdict(row) | {"nodes": parts})

    def with_where_of(self, rows: list[QueueRow]) -> list[QueueRow]:
        """The rows with where each queue's messages and consumers are, node by node."""
        return [msgspec.structs.replace(row, nodes=self.where(row.key)) for row in rows]

    def where(self, key: str) -> list[QueueWhere]:
        """Where the queue of ``key`` (shapes.queue_key) is."""
        where = [QueueWhere(node=node_id, node_name=node_name, messages=_messages(partial),
                            consumers=partial.consumers, in_flight=partial.in_flight, in_doubt=partial.in_doubt)
                 for node_id, node_name, partial, _ in self._groups.get(key, ())]
        where.sort(key=lambda part: part.node_name)
        return where

    def _links(self) -> list[LinkRow]:
        ends: dict[tuple[str, str], list[tuple[NodeSnapshots, Link]]] = {}
        for snapshots in self.snapshots.values():
            for link in snapshots.latest.links:
                pair = tuple(sorted((link.node, link.peer)))
                ends.setdefault(pair, []).append((snapshots, link))
        names = dict(self.names)
        rows = []
        for (a, b), reported in ends.items():
            fresh = [(s, link) for s, link in reported if self._fresh[s.latest.node.id]] or reported
            up = all(link.state == "up" for _, link in fresh) and "down" not in (self.states.get(a),
                                                                                  self.states.get(b))
            from_end = {a: 0.0, b: 0.0}
            for snapshots, link in fresh:
                previous = _previous_link(snapshots, link)
                if previous is not None:
                    from_end[link.node] = max(0.0, (link.forwarded_out - previous.forwarded_out) / snapshots.interval)
            rate = from_end[a] + from_end[b]
            rows.append(LinkRow(
                id=f"{a}~{b}", a=a, a_name=names.get(a, a[:8]), b=b, b_name=names.get(b, b[:8]),
                state="up" if up else "down", direction=fresh[0][1].direction,
                since=max(link.since for _, link in fresh), in_flight=sum(link.in_flight for _, link in fresh),
                backlog=sum(link.backlog for _, link in fresh), in_doubt=sum(link.in_doubt for _, link in fresh),
                forwarded=sum(link.forwarded_out for _, link in fresh), rate=rate, rate_from_a=from_end[a],
                rate_from_b=from_end[b],
                ends=[link for _, link in fresh]))
        return sorted(rows, key=lambda row: (row.a_name, row.b_name))

    def _overview(self) -> Overview:
        rates = Rates()
        for row in self.nodes:
            if row.state in ("up", "leaving"):
                rates.add(row.rates)
        fresh = [s.latest for node_id, s in self.snapshots.items() if self._fresh[node_id]]
        return Overview(
            taken_at=self.taken_at, nodes=len(self.nodes),
            nodes_up=sum(1 for n in self.nodes if n.state in ("up", "leaving")),
            nodes_down=sum(1 for n in self.nodes if n.state == "down"),
            links_up=sum(1 for link in self.links if link.state == "up"),
            links_down=sum(1 for link in self.links if link.state == "down"), queues=len(self.queues),
            messages=sum(q.messages for q in self.queues), consumers=sum(q.consumers for q in self.queues),
            connections=sum(s.node.connections for s in fresh), in_doubt=sum(s.node.in_doubt for s in fresh),
            rates=rates, metrics_behind=sorted(s.node.name for s in fresh if s.node.metrics.state == "behind"))


def _messages(partial: PartialQueue) -> int:
    return partial.depth + partial.in_flight + partial.forwarding + partial.in_doubt


_COUNTERS = (("ack", "acked"), ("forward", "forwarded_out"), ("redistribute", "redistributed_out"),
             ("expire", "expired"), ("dead_letter", "dead_lettered"))


def sent(partial: PartialQueue | None) -> int:
    """Messages producers sent to this partial queue: what entered it, but for what came
    from other nodes (a message forwarded from node to node is sent once)."""
    if partial is None:
        return 0
    return partial.enqueued - partial.forwarded_in - partial.redistributed_in


_NO_RATES = Rates()  # shared by every idle partial queue: never changed


def _rates(snapshots: NodeSnapshots, partial: PartialQueue) -> Rates:
    """Per second over the node's last interval; none across a restart (counters start again)."""
    previous = snapshots.previous
    if previous is None or previous.node.started_at != snapshots.latest.node.started_at:
        return _NO_RATES
    before = snapshots.previous_queues.get(queue_key(partial.name, partial.vhost))
    if before is not None and before.enqueued == partial.enqueued and before.acked == partial.acked \
            and before.forwarded_out == partial.forwarded_out \
            and before.redistributed_out == partial.redistributed_out and before.expired == partial.expired \
            and before.dead_lettered == partial.dead_lettered:
        return _NO_RATES  # idle since the last snapshot, as most queues are
    interval = snapshots.interval
    rates = Rates(enqueue=max(0.0, (sent(partial) - sent(before)) / interval))
    for rate, counter in _COUNTERS:
        then = getattr(before, counter) if before is not None else 0
        setattr(rates, rate, max(0.0, (getattr(partial, counter) - then) / interval))
    return rates


def _previous_link(snapshots: NodeSnapshots, link: Link) -> Link | None:
    previous = snapshots.previous
    if previous is None or previous.node.started_at != snapshots.latest.node.started_at:
        return None
    return next((old for old in previous.links if old.peer == link.peer), None)
