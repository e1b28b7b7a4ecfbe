"""A node's place in the mesh, assembled from its parts, with what the rest of the
node (meshgate, management) uses of it.

The parts, each handed what it needs and none calling back here:

- :mod:`mesh.identity` who this node is on its links (its HELLO, its epoch);
- :mod:`mesh.peers` the peer table: linked peers, epochs, fencing; it tells the
  others when a peer comes up or goes (``peer_up``/``peer_down``);
- :mod:`mesh.link` one link's handshake and health; an established link hands each
  frame to the part that registered for its type (:class:`mesh.wire.FrameTable`);
- :mod:`mesh.forwarding` the data path (MESSAGE, CHUNK, STORED, BUSY);
- :mod:`mesh.custody` duplicate markers and messages in doubt (MARKERS, ASK, HAVE, RELEASED);
- :mod:`mesh.demand` what is advertised and followed, redistribution holds (DEMAND);
- :mod:`mesh.topology` the gossiped view of the mesh (TOPOLOGY);
- :mod:`mesh.definitions` mesh-wide definitions (DEFINITIONS);
- :mod:`mesh.router` management requests along the links (REQUEST, REPLY);
- :mod:`mesh.departures` scale-down, hand-over and forgetting nodes (DURABLE, LEAVING, FORGET);
- :mod:`mesh.quorum` the answers to a backup's VOTE;
- :mod:`mesh.dialling` one connector per address to dial (glued here to discovery, which
  skips a peer whose TLS requirement differs from this node's: ``announced``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Mapping

from twisted.internet import defer, task
from twisted.internet import reactor as default_reactor

from gateway import __version__
from gateway.broker.broker import Broker
from gateway.broker.vhosts import VirtualHosts
from gateway.hostile_log import PeerLog
from gateway.tls import TlsMaterial
from mesh.custody import Custody
from mesh.definitions import DefinitionSync
from mesh.demand import Demand
from mesh.departures import Departures
from mesh.dialling import Connector
from mesh.forwarding import Forwarding, peer_opener
from mesh.identity import Identity
from mesh.link import LinkContext, LinkServerFactory
from mesh.peers import Peer, PeerTable
from mesh.quorum import VoteJudge
from mesh.router import Router
from mesh.settings import MeshSettings
from mesh.topology import Topology
from mesh.wire import FrameTable
from model.mesh import Addresses, Node, NodeSummary, address_text

if TYPE_CHECKING:
    from mesh.discovery import Announcement

log = logging.getLogger(__name__)


class MeshNode:
    def __init__(self, config: MeshSettings, *, node_id: str, name: str, vhosts: VirtualHosts, started_at: float,
                 stomp_address: tuple[str, int], reactor: Any = default_reactor,
                 on_fatal: Callable[[str], None] | None = None, epoch: int = 0,
                 on_fenced: Callable[[str], None] | None = None, tls: TlsMaterial | None = None) -> None:
        self.config = config
        self.tls = tls  # [mesh.tls]: every link speaks TLS; None: plain TCP, unwrapped
        # A refused handshake is logged once a minute per peer: anyone can connect, and diallers retry.
        self.tls_log = PeerLog(logging.getLogger("mesh.tls"), reactor.seconds, per_minute=1)
        self.node_id = node_id
        self.name = name
        self.vhosts = vhosts
        broker = self.broker = vhosts.default
        self.reactor = reactor
        self.identity = Identity(config, node_id=node_id, name=name, started_at=started_at, epoch=epoch,
                                 stomp_address=stomp_address, on_fenced=on_fenced,
                                 on_fatal=on_fatal or (lambda reason: log.error("mesh: %s", reason)))
        for vhost_name, vhost_broker in vhosts.brokers.items():
            self._vhost_added(vhost_name, vhost_broker)
        vhosts.watch(added=self._vhost_added)
        events = broker.events
        self.frames = frames = FrameTable()
        self.peer_table = peers = PeerTable(self.identity, reactor, events, peer_opener(broker, node_id))
        # Listeners of the peer table are called in the order the parts are made here.
        self.custody = Custody(node_id, vhosts, peers, reactor, config.in_doubt_timeout_ms, frames)
        self.forwarding = Forwarding(node_id, vhosts, peers, self.custody, reactor, frames)
        self.demand = Demand(node_id, config, vhosts, peers, reactor, frames)
        # Every vhost's definitions carry this node's id as their origin (set there).
        self.definitions = DefinitionSync(node_id, vhosts, peers, config.peer_retention_s,
                                          self.demand.durables_changed, frames)
        self.topology = Topology(node_id, vhosts, peers, reactor, events, config.connection_ttl_ms,
                                 self._describe_node, frames)
        self.router = Router(node_id, name, peers, self.topology, reactor, frames)
        self.departures = Departures(self.identity, config, vhosts, peers, self.custody, self.demand, self.topology,
                                     reactor, frames)
        self.votes = VoteJudge(config, self.identity, peers, reactor)
        self.links = LinkContext(self.identity, peers, frames, self.votes, reactor, config)
        self.connectors: list[Connector] = []
        self.discovered: dict[tuple[str, int], set[str]] = {}  # address -> the discoveries that list it
        self.own_addresses: set[tuple[str, int]] = set()  # addresses found to reach this very node
        # node id -> the TLS requirement it announced, for the peers announced unlike this node (not dialled)
        self.tls_mismatches: dict[str, bool] = {}
        self.port: Any = None
        self._loops: list[task.LoopingCall] = []

    def _vhost_added(self, name: str, broker: Broker) -> None:
        # STRICT: each new message goes round-robin to this node or a node with the
        # queue, consumers or not; a backlog never moves.
        broker.strict_routing = self.config.message_load_balancing == "STRICT"

    # -- what the rest of the node reads ----------------------------------------------------

    @property
    def peers(self) -> Mapping[str, Peer]:
        return self.peer_table.view

    @property
    def peer_epochs(self) -> dict[str, int]:
        return self.peer_table.epochs

    @property
    def link_totals(self) -> dict[str, list[int]]:
        return self.peer_table.link_totals

    @property
    def link_down_since(self) -> dict[str, float]:
        return self.peer_table.link_down_since

    @property
    def started_at(self) -> float:
        return self.identity.started_at

    @started_at.setter
    def started_at(self, started_at: float) -> None:
        self.identity.started_at = started_at

    @property
    def epoch(self) -> int:
        return self.identity.epoch

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self.identity.epoch = epoch

    @property
    def stomp_address(self) -> tuple[str, int]:
        return self.identity.stomp_address

    @stomp_address.setter
    def stomp_address(self, address: tuple[str, int]) -> None:
        self.identity.stomp_address = address

    @property
    def link_address(self) -> tuple[str, int]:
        return self.identity.link_address

    @property
    def on_fatal(self) -> Callable[[str], None]:
        return self.identity.on_fatal

    @on_fatal.setter
    def on_fatal(self, on_fatal: Callable[[str], None]) -> None:
        self.identity.on_fatal = on_fatal

    @property
    def on_fenced(self) -> Callable[[str], None] | None:
        return self.identity.on_fenced

    @on_fenced.setter
    def on_fenced(self, on_fenced: Callable[[str], None] | None) -> None:
        self.identity.on_fenced = on_fenced

    @property
    def describe_node(self) -> Callable[[], Node]:
        """The node's own description for the view of the mesh (replaceable)."""
        return self.topology.describe_node

    @describe_node.setter
    def describe_node(self, describe: Callable[[], Node]) -> None:
        self.topology.describe_node = describe

    @property
    def scaling_down(self) -> bool:
        return self.departures.scaling_down

    def own_summary(self) -> NodeSummary:
        return self.topology.own_summary()

    def _describe_node(self) -> Node:
        identity = self.identity
        return Node(id=self.node_id, name=self.name, version=__version__, group_name=self.config.group_name,
                    started_at=self.started_at, last_seen=self.reactor.seconds(),
                    addresses=Addresses(stomp=address_text(*identity.stomp_address),
                                        link=address_text(*identity.link_address)), epoch=identity.epoch)

    # -- what the rest of the node does with it ---------------------------------------------

    def hold_recovered(self) -> None:
        self.custody.hold_recovered()

    def scale_down(self, patience: float = 30.0) -> defer.Deferred:
        return self.departures.scale_down(patience)

    def hand_over(self, peer_id: str, queue_name: str, count: int | None = None, vhost: str = "/") -> int:
        return self.departures.hand_over(peer_id, queue_name, count, vhost)

    def forget(self, node_id: str) -> str | None:
        return self.departures.forget(node_id)

    def forget_departed(self) -> list[str]:
        return self.departures.forget_departed()

    # -- start and stop -------------------------------------------------------------------

    @defer.inlineCallbacks
    def start(self) -> Any:
        host, port = self.config.bind
        self.port = yield self._listen(host, port)
        self.votes.listening_since = self.reactor.seconds()
        address = self.port.getHost()
        self.identity.link_address = (address.host, address.port)
        for peer in self.config.static:
            self.add_connector(peer)
        self._loop(self.topology.gossip, self.config.check_period_ms / 1000.0)
        retention = self.config.peer_retention_s
        if retention:
            self._loop(self._retention, max(1.0, min(retention / 10, 3600.0)), now=False)
        return self

    def _loop(self, call: Callable[[], object], interval: float, now: bool = True) -> None:
        loop = task.LoopingCall(call)
        loop.clock = self.reactor
        loop.start(interval, now=now)
        self._loops.append(loop)

    def _retention(self) -> None:
        self.departures.forget_departed()
        self.definitions.drop_old_tombstones()

    def _listen(self, host: str, port: int) -> defer.Deferred:
        from twisted.internet import endpoints

        factory: Any = LinkServerFactory(self.links)
        if self.tls is not None:
            factory = self.tls.server_factory(factory, self.tls_log, self.reactor)
        return endpoints.TCP4ServerEndpoint(self.reactor, port, interface=host).listen(factory)

    @defer.inlineCallbacks
    def stop(self) -> Any:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self.router.fail_all("this node is stopping")
        for connector in self.connectors:
            connector.stop()
        if self.port is not None:
            yield self.port.stopListening()
        for peer in list(self.peer_table.linked.values()):
            peer.link.close()

    # -- dialling ---------------------------------------------------------------------------

    def add_connector(self, address: tuple[str, int]) -> None:
        address = (address[0], address[1])
        if address == tuple(self.link_address) or address in self.own_addresses or any(
                c.address == address for c in self.connectors):
            return
        connector = Connector(self.links, address, self.reactor, self._reached_itself,
                              None if self.tls is None else (self.tls, self.tls_log))
        self.connectors.append(connector)
        connector.start()

    def remove_connector(self, address: tuple[str, int]) -> None:
        for connector in [c for c in self.connectors if c.address == tuple(address)]:
            connector.stop()
            self.connectors.remove(connector)

    def found(self, address: tuple[str, int], source: str) -> None:
        """A discovery (``source``: multicast, dns) lists a node's link address: dial it,
        unless this node dials only its ``static`` peers (others may still dial it;
        every link carries demand both ways)."""
        address = (address[0], address[1])
        self.discovered.setdefault(address, set()).add(source)
        if self.config.allow_direct_connections_only:
            log.debug("mesh: found %s:%d by %s; not dialled (allow_direct_connections_only)", *address, source)
            return
        self.add_connector(address)

    def announced(self, peer: Announcement) -> None:
        """Multicast discovery heard a node, or its announcement changed: dial it if it
        speaks as this node does on links (TLS or plaintext). Otherwise they could never
        link: do not dial it, and say why once for that peer, until its flag changes (a
        restart with or without ``[mesh.tls]``: then it is dialled)."""
        who = f"{peer.name[:100]} ({peer.link[0][:100]}:{peer.link[1]})"  # signed, but still bounded in a line
        if peer.requires_tls == (self.tls is not None):
            if self.tls_mismatches.pop(peer.node_id, None) is not None:
                log.info("mesh: node %s now %s as this node does; dialling it", who,
                         "requires TLS" if peer.requires_tls else "speaks plaintext")
            self.found(peer.link, "multicast")
            return
        if self.tls_mismatches.get(peer.node_id) != peer.requires_tls:
            if peer.requires_tls:
                log.warning("mesh: node %s requires TLS; this node has no [mesh.tls]; not dialled", who)
            else:
                log.warning("mesh: node %s speaks plaintext; this node requires TLS (mesh.tls); not dialled", who)
        self.tls_mismatches[peer.node_id] = peer.requires_tls
        self.lost(peer.link, "multicast")  # dialled under an announcement from before its restart

    def lost(self, address: tuple[str, int], source: str) -> None:
        """A discovery no longer lists the address: stop dialling it once none does and
        it is not a ``static`` peer. A live link to it stays until it goes by itself."""
        address = (address[0], address[1])
        sources = self.discovered.get(address, set())
        sources.discard(source)
        if sources:
            return
        self.discovered.pop(address, None)
        if address not in self.config.static:
            self.remove_connector(address)

    def _reached_itself(self, address: tuple[str, int]) -> None:
        """A link this node dialled reached this node (a discovery lists its own
        address): never dial that address again."""
        if address not in self.own_addresses:
            log.info("mesh: %s:%d is this node's own link address; not dialled", *address)
        self.own_addresses.add(address)
        self.remove_connector(address)
