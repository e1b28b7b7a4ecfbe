"""The mesh as this node knows it: a model.NodeSummary per node, refreshed by gossip.

Every ``check_period_ms`` each node sends its neighbours every entry it holds,
its own refreshed, each with its age; a receiver keeps the newer version of each
(by the node's ``started_at`` and a sequence number). An entry not refreshed for
3 × ``connection_ttl_ms`` drops out, and the node is shown *down* until it comes
back or is forgotten. Management requests find their way along the links this
view knows (:meth:`Topology.route`).

An entry lists the node's queues of every vhost, each row naming its vhost; a
peer of link protocol 4 is sent the rows of "/" alone (it would read any other
as "/"'s)."""

from __future__ import annotations

from collections import deque
from typing import Callable

import msgspec

from gateway.broker.events import EventSink
from gateway.broker.vhosts import VirtualHosts
from mesh.peers import Peer, PeerTable
from mesh.settings import Clock
from mesh.wire import TOPOLOGY, FrameTable, FrameType, LinkSender
from model.events import NodeJoined, NodeLeaving, NodeLeft
from model.mesh import Node, NodeSummary, QueueSummary
from model.names import DEFAULT_VHOST


class _Entry:
    __slots__ = ("summary", "heard")

    def __init__(self, summary: NodeSummary, heard: float) -> None:
        self.summary = summary
        self.heard = heard  # reactor time when the entry was fresh at its node


class Topology:
    def __init__(self, node_id: str, vhosts: VirtualHosts, peers: PeerTable, clock: Clock, events: EventSink,
                 connection_ttl_ms: int, describe_node: Callable[[], Node], frames: FrameTable) -> None:
        self.node_id = node_id
        self.vhosts = vhosts
        self.linked = peers.linked
        self.clock = clock
        self.events = events
        self.connection_ttl_ms = connection_ttl_ms
        # The node's own description; the node's management layer replaces it with one
        # that knows the listeners, memory and store.
        self.describe_node = describe_node
        self.entries: dict[str, _Entry] = {}
        self.departed: dict[str, NodeSummary] = {}  # nodes that dropped out, shown down until forgotten
        self.leaving: set[str] = set()  # nodes that said they scale down
        self._seq = 0
        frames.on(FrameType.TOPOLOGY, TOPOLOGY, self.received)
        peers.watch(up=self.peer_up, down=self.peer_down)

    def peer_up(self, peer: Peer) -> None:
        self.gossip()

    def peer_down(self, peer: Peer, lost: bool) -> None:
        if lost:
            self.gossip()

    def own_summary(self) -> NodeSummary:
        queues = [QueueSummary(name, len(q), len(q.consumers), q.inflight, q.mesh.in_doubt, vhost)
                  for vhost, broker in self.vhosts.brokers.items() for name, q in broker.queues.items()]
        node = self.describe_node()
        if self.node_id in self.leaving and node.state != "leaving":  # its neighbours pick a node that stays
            node = msgspec.structs.replace(node, state="leaving")
        return NodeSummary(node=node, links=sorted(self.linked), queues=queues)

    def expiry(self) -> float:
        """Seconds after which a node not heard of drops out of the view of the mesh."""
        return 3 * self.connection_ttl_ms / 1000.0

    def refresh_own(self) -> NodeSummary:
        self._seq += 1
        summary = self.own_summary()
        summary.seq = self._seq
        summary.answered = True
        self.entries[self.node_id] = _Entry(summary, self.clock.seconds())
        return summary

    def gossip(self) -> None:
        """Tell every neighbour what this node knows of the mesh, itself refreshed."""
        now = self.clock.seconds()
        self.refresh_own()
        stale = self.expiry()
        for node_id in [n for n, entry in self.entries.items() if now - entry.heard > stale]:
            self._drop(node_id, f"not heard of for {stale:.0f} s")
        # Each entry goes with how long ago it was fresh, not when this node got it:
        # otherwise two nodes would keep handing a dead node's entry back to each
        # other, each time as new, and it would never drop out.
        payload = [msgspec.structs.replace(entry.summary, age=now - entry.heard, answered=False)
                   for entry in self.entries.values()]
        data = msgspec.json.encode(payload)
        data_of_default: bytes | None = None  # what a peer of protocol 4 gets: made if there is one
        for peer in self.linked.values():
            if peer.vhosts:
                peer.link.send_encoded(FrameType.TOPOLOGY, data)
            else:
                if data_of_default is None:
                    data_of_default = msgspec.json.encode([_of_default(summary) for summary in payload])
                peer.link.send_encoded(FrameType.TOPOLOGY, data_of_default)

    def received(self, link: LinkSender, summaries: list[NodeSummary]) -> None:
        now = self.clock.seconds()
        stale = self.expiry()
        for summary in summaries:
            node_id = summary.node.id
            if node_id == self.node_id or summary.age > stale:
                continue
            known = self.entries.get(node_id)
            if known is None or (summary.node.started_at, summary.seq) > (known.summary.node.started_at,
                                                                          known.summary.seq):
                self.entries[node_id] = _Entry(summary, now - summary.age)
                if known is None:
                    self._joined(summary)

    def _joined(self, summary: NodeSummary) -> None:
        node = summary.node
        self.departed.pop(node.id, None)
        self.leaving.discard(node.id)
        self.events.emit(NodeJoined(subject=node.id, name=node.name))

    def _drop(self, node_id: str, reason: str) -> None:
        entry = self.entries.pop(node_id, None)
        if entry is None:
            return
        summary = entry.summary
        if self.is_leaving(node_id):
            self.leaving.discard(node_id)  # it left for good: nothing to show
        else:
            node = msgspec.structs.replace(summary.node, state="down", last_seen=entry.heard)
            self.departed[node_id] = msgspec.structs.replace(summary, node=node, age=0.0, answered=False)
        self.events.emit(NodeLeft(subject=node_id, name=summary.node.name, reason=reason))

    def node_leaving(self, node_id: str, name: str) -> None:
        self.leaving.add(node_id)
        self.events.emit(NodeLeaving(subject=node_id, name=name))

    def is_leaving(self, node_id: str) -> bool:
        """It said it scales down (to its neighbours, or in its own last summary)."""
        entry = self.entries.get(node_id)
        return node_id in self.leaving or (entry is not None and entry.summary.node.state == "leaving")

    def heard_ago(self, node_id: str) -> float | None:
        entry = self.entries.get(node_id)
        return None if entry is None else self.clock.seconds() - entry.heard

    def forget(self, node_id: str) -> None:
        if node_id in self.entries:
            self._drop(node_id, "forgotten by an administrator")
        self.departed.pop(node_id, None)
        self.leaving.discard(node_id)

    def view(self) -> list[NodeSummary]:
        """Every node this node knows of, each with its age; departed ones down."""
        now = self.clock.seconds()
        self.refresh_own()
        nodes = []
        for node_id, entry in self.entries.items():
            summary = msgspec.structs.replace(entry.summary, age=now - entry.heard,
                                              answered=node_id == self.node_id)
            summary.node = msgspec.structs.replace(summary.node, last_seen=entry.heard,
                                                   state="leaving" if self.is_leaving(node_id) else "up")
            nodes.append(summary)
        nodes.extend(self.departed.values())
        return nodes

    def route(self, target: str) -> list[str] | None:
        """The shortest path of links from this node to ``target``, both included.
        A link counts when both its ends report it (this node's own links are the
        ones it has): a dead node's last word does not make a path."""
        start = self.node_id
        links = {node_id: set(entry.summary.links) for node_id, entry in self.entries.items()}
        links[start] = set(self.linked)
        previous = {start: start}
        frontier = deque([start])
        while frontier:
            node_id = frontier.popleft()
            if node_id == target:
                path = [target]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return path[::-1]
            for neighbour in sorted(links.get(node_id, ())):
                if neighbour not in previous and node_id in links.get(neighbour, ()):
                    previous[neighbour] = node_id
                    frontier.append(neighbour)
        return None


def _of_default(summary: NodeSummary) -> NodeSummary:
    """The entry with the queue rows of "/" alone."""
    if all(row.vhost == DEFAULT_VHOST for row in summary.queues):
        return summary
    return msgspec.structs.replace(summary, queues=[row for row in summary.queues if row.vhost == DEFAULT_VHOST])
