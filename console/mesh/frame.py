"""One moment of the mesh as the console shows it: node, link and queue rows and
the totals, computed at once from every node's latest two snapshots and then only
read (by many requests and the live worker, from any thread)."""

from __future__ import annotations

from dataclasses import dataclass

from console.mesh.shapes import LinkRow, NodeRow, Overview, QueuePart, QueueRow, Rates
from model.latency import merge
from model.mesh import Link, PartialQueue, Snapshot

STALE_INTERVALS = 3  # a node whose snapshot is this many intervals late is down
MIN_STALE = 3.0  # seconds


@dataclass(frozen=True)
class NodeSnapshots:
    """A node's latest snapshot and the one before (for rates)."""

    latest: Snapshot
    previous: Snapshot | None
    previous_queues: dict[str, PartialQueue]

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
        self.states = {row.id: row.state for row in self.nodes}
        self.links = self._links()
        self.queues = self._queues()
        self.queue_index = {row.name: row for row in self.queues}
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
        for node_id, snapshots in self.snapshots.items():
            snapshot = snapshots.latest
            queues = snapshot.queues
            rates = Rates()
            for partial in queues:
                rates.add(_rates(snapshots, partial))
            rows[node_id] = NodeRow(
                id=node_id, name=snapshot.node.name, state=self._state_of(node_id),
                age=self.taken_at - snapshot.taken_at, node=snapshot.node, queues=len(queues),
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
        parts: dict[str, list[QueuePart]] = {}
        for node_id, snapshots in self.snapshots.items():
            if not self._fresh[node_id]:
                continue  # a down node's partial queues are not counted: they are not there to be had
            name = snapshots.latest.node.name
            for partial in snapshots.latest.queues:
                parts.setdefault(partial.name, []).append(QueuePart(
                    node=node_id, node_name=name, messages=_messages(partial), depth=partial.depth,
                    in_flight=partial.in_flight, forwarding=partial.forwarding, in_doubt=partial.in_doubt,
                    consumers=partial.consumers, oldest_age_ms=partial.oldest_age_ms,
                    rates=_rates(snapshots, partial), partial=partial))
        rows = []
        for name, nodes in parts.items():
            rates = Rates()
            for part in nodes:
                rates.add(part.rates)
            nodes.sort(key=lambda part: part.node_name)
            rows.append(QueueRow(
                name=name, messages=sum(p.messages for p in nodes), depth=sum(p.depth for p in nodes),
                in_flight=sum(p.in_flight for p in nodes), forwarding=sum(p.forwarding for p in nodes),
                in_doubt=sum(p.in_doubt for p in nodes), consumers=sum(p.consumers for p in nodes),
                node_count=len(nodes), rates=rates, latency=merge(*(p.partial.latency for p in nodes)),
                latency_sum_ms=sum(p.partial.latency_sum_ms for p in nodes), nodes=nodes))
        return sorted(rows, key=lambda row: row.name)

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
            rate = 0.0
            for snapshots, link in fresh:
                previous = _previous_link(snapshots, link)
                if previous is not None:
                    rate += (link.forwarded_out - previous.forwarded_out) / snapshots.interval
            rows.append(LinkRow(
                id=f"{a}~{b}", a=a, a_name=names.get(a, a[:8]), b=b, b_name=names.get(b, b[:8]),
                state="up" if up else "down", direction=fresh[0][1].direction,
                since=max(link.since for _, link in fresh), in_flight=sum(link.in_flight for _, link in fresh),
                backlog=sum(link.backlog for _, link in fresh), in_doubt=sum(link.in_doubt for _, link in fresh),
                forwarded=sum(link.forwarded_out for _, link in fresh), rate=max(0.0, rate),
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


_COUNTERS = (("enqueue", "enqueued"), ("ack", "acked"), ("forward", "forwarded_out"),
             ("redistribute", "redistributed_out"), ("expire", "expired"), ("dead_letter", "dead_lettered"))


def _rates(snapshots: NodeSnapshots, partial: PartialQueue) -> Rates:
    """Per second over the node's last interval; none across a restart (counters start again)."""
    previous = snapshots.previous
    if previous is None or previous.node.started_at != snapshots.latest.node.started_at:
        return Rates()
    before = snapshots.previous_queues.get(partial.name)
    interval = snapshots.interval
    rates = Rates()
    for rate, counter in _COUNTERS:
        then = getattr(before, counter) if before is not None else 0
        setattr(rates, rate, max(0.0, (getattr(partial, counter) - then) / interval))
    return rates


def _previous_link(snapshots: NodeSnapshots, link: Link) -> Link | None:
    previous = snapshots.previous
    if previous is None or previous.node.started_at != snapshots.latest.node.started_at:
        return None
    return next((old for old in previous.links if old.peer == link.peer), None)
