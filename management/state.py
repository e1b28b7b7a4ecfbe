"""This node's state as the model describes it, read off the broker core and the
mesh: what management replies, the gossip and the metrics snapshots carry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Literal

from gateway import __version__
from gateway.broker.broker import Broker
from gateway.broker.message import QUEUE
from management.actions import broker_of
from model.latency import trimmed
from model.mesh import (
    WINDOW_S,
    Addresses,
    Connection,
    Link,
    ListenerCertificate,
    MetricsStatus,
    Node,
    NodeSummary,
    PartialQueue,
    QueueSummary,
    RemoteDemand,
    Snapshot,
    TopicSubscription,
)
from model.names import DEFAULT_VHOST

if TYPE_CHECKING:
    from gateway.broker.session import Session
    from gateway.broker.vhosts import VirtualHosts
    from mesh.node import MeshNode


class LocalState:
    def __init__(self, *, node_id: str, name: str, started_at: float, broker: Broker, mesh: MeshNode | None,
                 clock, addresses: Callable[[], Addresses], metrics: Callable[[], MetricsStatus] = MetricsStatus,
                 group_name: str = "", ha: Callable[[], dict] = dict,
                 certificates: Callable[[], list[ListenerCertificate]] = list,
                 vhosts: VirtualHosts | None = None) -> None:
        self.node_id = node_id
        self.name = name
        self.started_at = started_at
        self.broker = broker  # the default vhost's: the mesh's, the node's figures'
        self.vhosts = vhosts
        self.mesh = mesh
        self.clock = clock
        self.addresses = addresses
        self.metrics = metrics
        self.group_name = group_name
        self.ha = ha  # the Node fields of high availability: ha_mode, ha_state, epoch, standbys
        self.certificates = certificates  # each TLS listener's and dialler's certificate in use
        self._snapshots = 0
        self._depth_window: float | None = None  # the window the queues' depth_max belong to
        self._other_queues: tuple = ()  # the other vhosts' (name, broker, queues_version) at the last snapshot
        self._other_changes = 0
        if mesh is not None:
            mesh.describe_node = self.node

    # -- the node ---------------------------------------------------------------------------

    def node(self) -> Node:
        broker = self.broker
        store = broker.store
        leaving = self.mesh is not None and self.mesh.scaling_down
        return Node(
            id=self.node_id, name=self.name, version=__version__, group_name=self.group_name,
            started_at=self.started_at, state="leaving" if leaving else "up", last_seen=self.clock.seconds(),
            addresses=self.addresses(),
            connections=len({session.connection.name or name for name, _, session in self._sessions()
                             if session.connection is not None}),
            memory_used=broker.memory_used, memory_limit=broker.memory_limit, store_bytes=store.disk_bytes(),
            store_limit=store.limit, disk_free=store.disk_free(), store_blocked=store.failure or store.blocked,
            in_doubt=sum(queue.mesh.in_doubt for queue in broker.queues.values()), metrics=self.metrics(),
            certificates=self.certificates(), **self.ha(),
        )

    def summary(self) -> NodeSummary:
        if self.mesh is not None:
            summary = self.mesh.topology.refresh_own()
            return NodeSummary(node=summary.node, links=summary.links, queues=summary.queues, answered=True,
                               seq=summary.seq)
        queues = [QueueSummary(name, len(q), len(q.consumers), q.inflight, q.mesh.in_doubt, vhost)
                  for vhost, broker in self._brokers().items() for name, q in broker.queues.items()]
        return NodeSummary(node=self.node(), queues=queues, answered=True)

    # -- partial queues ---------------------------------------------------------------------

    def queues(self, name: str | None = None, now: float | None = None,
               vhost: str = DEFAULT_VHOST) -> list[PartialQueue]:
        """The default vhost's queues on this node (or another ``vhost``'s: outside the
        mesh for now, no remote demand; bad_request if the node has no such vhost)."""
        broker = broker_of(self.broker, self.vhosts, vhost)
        now = self.clock.seconds() if now is None else now
        self.roll_depth_window(now)
        demand = self._remote_demand() if broker is self.broker else {}
        queues = broker.queues
        selected = [(name, queues[name])] if name is not None and name in queues else \
            [] if name is not None else sorted(queues.items())
        result = []
        for queue_name, queue in selected:
            oldest = queue.oldest_created()
            consumers, remotes, counters = queue.consumers, queue.remotes, queue.mesh
            result.append(PartialQueue(
                node=self.node_id, name=queue_name, vhost=vhost, depth=len(queue),
                in_flight=sum([len(sub.inflight) for sub in consumers]) if consumers else 0,
                forwarding=sum([len(sub.inflight) for sub in remotes]) if remotes else 0,
                in_doubt=counters.in_doubt, consumers=len(queue.consumers),
                remote_demand=demand.get(queue_name, []),
                oldest_age_ms=max(0, int((now - oldest) * 1000)) if oldest else None,
                enqueued=queue.enqueued, acked=queue.acked, forwarded_out=counters.forwarded_out,
                forwarded_in=counters.forwarded_in, redistributed_out=counters.redistributed_out,
                redistributed_in=counters.redistributed_in, expired=queue.expired, dead_lettered=queue.dead_lettered,
                latency=trimmed(queue.latency), latency_sum_ms=queue.latency_sum / 1000.0,
                window_depth_max=max(queue.depth_max, len(queue)),
            ))
        return result

    def _remote_demand(self) -> dict[str, list[RemoteDemand]]:
        demand: dict[str, list[RemoteDemand]] = {}
        if self.mesh is None:
            return demand
        for peer_id, peer in self.mesh.peers.items():
            for record in peer.demand:
                if record.kind == QUEUE:
                    path = record.path
                    demand.setdefault(record.address, []).append(RemoteDemand(
                        node=path[0], via=peer_id, consumers=record.consumers, hops=len(path)))
        return demand

    # -- links ------------------------------------------------------------------------------

    def links(self) -> list[Link]:
        mesh = self.mesh
        if mesh is None:
            return []
        duplex = mesh.config.duplex

        def direction_of(dialled: bool) -> Literal["dialled", "accepted", "duplex"]:
            return "duplex" if duplex else "dialled" if dialled else "accepted"

        topic_queues = self.broker.links
        links = []
        for peer_id, peer in sorted(mesh.peers.items()):
            link = peer.link
            totals = mesh.link_totals.get(peer_id, (0, 0))
            binding = topic_queues.binding(peer_id)
            links.append(Link(
                node=self.node_id, peer=peer_id, peer_name=link.peer_name, direction=direction_of(link.dialled),
                dialled=link.dialled, state="up", since=peer.since, address=_address(peer.hello.link),
                in_flight=len(peer.forwarded), backlog=len(binding.queue) if binding is not None else 0,
                in_doubt=mesh.custody.in_doubt_for(peer_id), forwarded_out=totals[0] + peer.forwarded_out,
                forwarded_in=totals[1] + peer.forwarded_in,
            ))
        names = {summary.node.id: summary.node for summary in mesh.topology.departed.values()}
        names.update((node_id, entry.summary.node) for node_id, entry in mesh.topology.entries.items())
        for peer_id in sorted(mesh.custody.known_peers):
            if peer_id in mesh.peers:
                continue
            known = names.get(peer_id)
            totals = mesh.link_totals.get(peer_id, (0, 0))
            binding = topic_queues.binding(peer_id)
            links.append(Link(
                node=self.node_id, peer=peer_id, peer_name=known.name if known else peer_id[:8],
                direction=direction_of(False), dialled=False, state="down",
                since=mesh.link_down_since.get(peer_id, self.started_at),
                address=known.addresses.link if known else None,
                backlog=len(binding.queue) if binding is not None else 0,
                in_doubt=mesh.custody.in_doubt_for(peer_id), forwarded_out=totals[0], forwarded_in=totals[1],
            ))
        return links

    # -- topic subscriptions and connections -------------------------------------------------

    def subscriptions(self) -> list[TopicSubscription]:
        result = []
        for name, binding in sorted(self.broker.bindings.items()):
            if binding.peer is not None:
                continue  # a mesh peer's topic queue: the links show it
            active = binding.active
            result.append(TopicSubscription(
                node=self.node_id, name=name, destination="/topic/" + binding.pattern,
                client_id=active.session.client_id if active is not None else None, durable=binding.durable,
                active=active is not None, depth=len(binding.queue),
                in_flight=len(active.inflight) if active is not None else 0, selector=binding.selector_text,
                connection=active.session.name if active is not None else None,
            ))
        return result

    def connections(self) -> list[Connection]:
        rows: dict[str, Connection] = {}
        described = []
        for session_id, vhost, session in sorted(self._sessions(), key=lambda item: item[0]):
            info = session.connection
            if info is None:
                continue
            subscriptions = len(session.subscriptions)
            unacked = sum(len(sub.inflight) for sub in session.subscriptions.values())
            row = rows.get(info.name or session_id)
            if row is not None:  # another channel of the same AMQP connection
                row.subscriptions += subscriptions
                row.unacked += unacked
                continue
            principal = session.principal
            row = rows[info.name or session_id] = Connection(
                id=info.name or session_id, node=self.node_id, remote=info.remote,
                user=getattr(principal, "name", "?"), protocol=info.protocol, version=info.version,
                since=info.since, client_id=session.client_id, subscriptions=subscriptions, unacked=unacked,
                vhost=vhost,
            )
            if info.describe is not None:
                described.append((info.describe, row))
        for describe, row in described:  # what the adapter knows besides (AMQP: the channels)
            describe(row)
        return list(rows.values())

    def _sessions(self) -> list[tuple[str, str, Session]]:
        """Every vhost's sessions (clients and, in "/", the mesh links'): name, vhost, session."""
        return [(name, vhost, session) for vhost, broker in self._brokers().items()
                for name, session in broker.sessions.items()]

    # -- snapshots --------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The next of the snapshots the metrics stream numbers (``seq``)."""
        self._snapshots += 1
        return self.current(self._snapshots)

    def current(self, seq: int = 0) -> Snapshot:
        """The node as it is now (``seq`` 0: not one of the stream's; the node's /metrics)."""
        taken_at = self.clock.seconds()  # the queues' too: their deepest depth is of taken_at's window
        brokers = self._brokers()
        queues = [queue for vhost in brokers for queue in self.queues(now=taken_at, vhost=vhost)]
        return Snapshot(seq=seq, taken_at=taken_at, node=self.node(), links=self.links(),
                        queues=queues, subscriptions=self.subscriptions(),
                        queues_version=self._queues_version(brokers))

    def _brokers(self) -> dict[str, Broker]:
        """Every vhost's broker, "/" first."""
        return dict(self.vhosts.brokers) if self.vhosts is not None else {DEFAULT_VHOST: self.broker}

    def roll_depth_window(self, now: float) -> None:
        """Start the queues' deepest depth afresh when ``now`` is in a window of its
        own. The metrics loop calls this on each window's first moment; a snapshot or
        a read that comes first (a busy reactor) rolls it itself."""
        window = now // WINDOW_S * WINDOW_S
        if window == self._depth_window:
            return
        self._depth_window = window
        for broker in self._brokers().values():
            for queue in broker.queues.values():
                queue.depth_max = len(queue)

    def _queues_version(self, brokers: dict[str, Broker]) -> int:
        """The snapshot's ``queues_version``: the default vhost's, plus one for every
        snapshot in which the other vhosts' set of queues changed (a queue or a vhost
        made or deleted), so that it only goes up and is the default vhost's own on a
        node without other vhosts."""
        others = tuple((name, id(broker), broker.queues_version) for name, broker in brokers.items()
                       if broker is not self.broker)
        if others != self._other_queues:
            self._other_queues = others
            self._other_changes += 1
        return self.broker.queues_version + self._other_changes


def _address(value: object) -> str | None:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        host, port = value
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return None
