"""A node's place in the mesh: its links and the messages it forwards over them.

Forwarding rides on the broker core: each link has a session, and each queue
with demand beyond that link gets a *link subscription* on it. Queues serve
local consumers first and hand links only what those cannot take; a link
subscription never takes a message that already crossed its peer. A forwarded
message stays in the sender's store, in flight on the link subscription, until
the receiver says it is STORED (durably, for persistent ones); a lost link
returns what was in flight, *in doubt* (see :mod:`mesh.custody`).

The parts: :mod:`mesh.dialling` (connectors), :mod:`mesh.demand` (what is
advertised and followed, redistribution holds), :mod:`mesh.custody` (duplicate
markers, messages in doubt), :mod:`mesh.topology` (the gossiped view)."""

from __future__ import annotations

import logging
import uuid
from typing import Callable

from twisted.internet import defer, task
from twisted.internet import reactor as default_reactor

from gateway import __version__
from gateway.broker.broker import Broker
from gateway.broker.message import QUEUE, Message
from gateway.broker.queue import CLIENT_INDIVIDUAL, Subscription
from mesh.codec import FrameType
from mesh.custody import Custody, RecentWindow, not_durable
from mesh.definitions import DefinitionSync
from mesh.demand import Demand
from mesh.dialling import Connector
from mesh.link import PROTOCOL_VERSION, SELF_LINK, LinkProtocol, LinkServerFactory, hello_epoch
from mesh.peer import LINK_WINDOW, Forwarder, Peer, entry_name
from mesh.router import Router
from mesh.topology import Topology
from model.events import LinkDown, LinkUp, NodeLeft, Redistribution, ScaleDown
from model.mesh import Addresses, Node, NodeSummary, QueueSummary, address_text

log = logging.getLogger(__name__)
_FORGET_WINDOW = 10_000  # FORGET request ids remembered, so one that comes round again is not passed on
BUSY_RETRY_S = 1.0  # how long a peer that said BUSY gets nothing


class MeshNode:
    def __init__(self, config, *, node_id: str, name: str, broker: Broker, started_at: float,
                 stomp_address: tuple[str, int], reactor=default_reactor,
                 on_fatal: Callable[[str], None] | None = None, epoch: int = 0,
                 on_fenced: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.node_id = node_id
        # The data dir's epoch this process serves under (docs/ha.md): a peer that has
        # seen a higher one of this node id refuses it, and it stops (on_fenced).
        self.epoch = epoch
        self.on_fenced = on_fenced
        self.peer_epochs: dict[str, int] = {}  # node id -> the highest epoch seen of it (kept in its peer record)
        self.granted_epochs: dict[str, int] = {}  # node id -> the epoch a quorum vote granted a backup of it
        self.last_frame: dict[str, float] = {}  # node id -> when its last link's last frame came (quorum votes)
        self.listening_since = reactor.seconds()
        self.name = name
        self.broker = broker
        self.reactor = reactor
        self.started_at = started_at
        self.stomp_address = stomp_address
        self.on_fatal = on_fatal or (lambda reason: log.error("mesh: %s", reason))
        self.peers: dict[str, Peer] = {}
        self.store = broker.store
        self.connectors: list[Connector] = []
        self.discovered: dict[tuple[str, int], set[str]] = {}  # address -> the discoveries that list it
        self.own_nonces: set[str] = set()  # of this node's open links: a HELLO with one came from itself
        self.own_addresses: set[tuple[str, int]] = set()  # addresses found to reach this very node
        self.port = None
        self.link_address: tuple[str, int] = config.bind
        self._gossip_loop = None
        self._retention_loop = None
        # STRICT: each new message goes round-robin to this node or a node with the
        # queue, consumers or not; a backlog never moves.
        broker.strict_routing = config.message_load_balancing == "STRICT"
        self.events = broker.events
        self.custody = Custody(self)
        self.demand = Demand(self)
        self.topology = Topology(self, self.own_summary)
        self.router = Router(self)
        broker.definitions.origin = node_id
        broker.queue_deleted_watchers.append(self.demand.queue_deleted)
        self.definitions = DefinitionSync(self)
        # The node's own description for the view of the mesh; the node's management
        # layer replaces it with one that knows the listeners, memory and store.
        self.describe_node: Callable[[], Node] = self._describe_node
        self.link_totals: dict[str, list[int]] = {}  # peer id -> [forwarded out, in] over links that went
        self.link_down_since: dict[str, float] = {}
        self.scaling_down = False
        self._link_ids = 0
        self._forget_requests = RecentWindow(_FORGET_WINDOW)  # FORGET ids seen lately (they go round the mesh)

    # -- start and stop -------------------------------------------------------------------

    @defer.inlineCallbacks
    def start(self):
        host, port = self.config.bind
        self.port = yield self._listen(host, port)
        self.listening_since = self.reactor.seconds()
        address = self.port.getHost()
        self.link_address = (address.host, address.port)
        for peer in self.config.static:
            self.add_connector(peer)
        self._gossip_loop = task.LoopingCall(self.topology.gossip)
        self._gossip_loop.clock = self.reactor
        self._gossip_loop.start(self.config.check_period_ms / 1000.0)
        retention = self.config.peer_retention_s
        if retention:
            self._retention_loop = task.LoopingCall(self._retention)
            self._retention_loop.clock = self.reactor
            self._retention_loop.start(max(1.0, min(retention / 10, 3600.0)), now=False)
        return self

    def _listen(self, host: str, port: int):
        from twisted.internet import endpoints

        return endpoints.TCP4ServerEndpoint(self.reactor, port, interface=host).listen(LinkServerFactory(self))

    def add_connector(self, address: tuple[str, int]) -> None:
        address = tuple(address)
        if address == tuple(self.link_address) or address in self.own_addresses or any(
                c.address == address for c in self.connectors):
            return
        connector = Connector(self, address)
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
        address = tuple(address)
        self.discovered.setdefault(address, set()).add(source)
        if self.config.allow_direct_connections_only:
            log.debug("mesh: found %s:%d by %s; not dialled (allow_direct_connections_only)", *address, source)
            return
        self.add_connector(address)

    def lost(self, address: tuple[str, int], source: str) -> None:
        """A discovery no longer lists the address: stop dialling it once none does and
        it is not a ``static`` peer. A live link to it stays until it goes by itself."""
        address = tuple(address)
        sources = self.discovered.get(address, set())
        sources.discard(source)
        if sources:
            return
        self.discovered.pop(address, None)
        if address not in self.config.static:
            self.remove_connector(address)

    def dialled_itself(self, link: LinkProtocol) -> None:
        """A link this node opened reached this node (a discovery lists its own address):
        never dial that address again."""
        connector = link.connector
        if connector is None:
            return
        if connector.address not in self.own_addresses:
            log.info("mesh: %s:%d is this node's own link address; not dialled", *connector.address)
        self.own_addresses.add(connector.address)
        self.remove_connector(connector.address)

    def hold_recovered(self) -> None:
        self.custody.hold_recovered()

    @defer.inlineCallbacks
    def scale_down(self, patience: float = 30.0):
        """Hand every queued message to another node (of the same group_name, if
        set) before this one stops; what cannot be handed over stays in the store."""
        group = self.config.group_name
        targets = [p for p in self.peers.values() if not group or p.link.peer.get("group") == group]
        if not targets:
            log.warning("mesh: scale-down found no node to take the messages; they stay in this node's store")
            return
        target = targets[0]
        peer_id = target.link.peer_id
        self.scaling_down = True
        self.topology.leaving.add(self.node_id)
        self.topology.gossip()
        # This node is going: what a peer may hold is handed over too, marked
        # redelivered, rather than left where no one would ever deliver it.
        self.custody.release_doubts()
        for name, queue in list(self.broker.queues.items()):
            if not len(queue) or name in target.queue_subs:
                continue
            target.queue_subs[name] = target.session.subscribe(
                self.link_subscription_id(name), QUEUE, name, CLIENT_INDIVIDUAL, LINK_WINDOW, None, peer=peer_id)
        for name, binding in list(self.broker.bindings.items()):
            if not binding.durable or not len(binding.queue) or binding.peer == peer_id or name in target.durable_subs:
                continue
            if binding.peer is None:
                spec = {"name": name, "topic": binding.pattern, "selector": binding.selector_text}
            elif binding.peer in self.peers:
                continue  # its own link is up: it drains there
            else:
                # Kept for a peer whose link is down: the target keeps it for that peer now.
                spec = {"name": name, "link": binding.peer, "patterns": self.broker.link_patterns[binding.peer]}
            target.link.send_control(FrameType.DURABLE, spec)
            sub = self.broker.attach_handover(target.session, "d:" + name, binding, LINK_WINDOW, peer_id)
            target.session.subscriptions[sub.id] = sub
        for queue in self.broker.queues.values():
            queue.remote_dispatch = True
            queue.dispatch()
        waited = 0.0
        while waited < patience and self.peers.get(peer_id) is target and self._holding():
            yield task.deferLater(self.reactor, 0.05, lambda: None)
            waited += 0.05
        durable = [b.queue for b in self.broker.bindings.values() if b.durable]
        left = sum(len(q) + q.inflight + q.in_doubt for q in (*self.broker.queues.values(), *durable))
        self.events.emit(ScaleDown(target=peer_id, left=left))
        if left:
            log.warning("mesh: scale-down left %d message(s) in this node's store", left)
            return
        log.info("mesh: scaled down: every message handed to %s", target.link.peer_name)
        # Peers would otherwise wait for this node after their next restart, and
        # keep duplicate markers for messages it will never resend.
        for peer in self.peers.values():
            peer.link.send_control(FrameType.LEAVING)

    def hand_over(self, peer_id: str, queue_name: str, count: int | None = None) -> int:
        """Move up to ``count`` waiting messages of a queue to a linked node, with
        custody as for any forward: each leaves this node once the peer has it.
        There they follow consumers as any message does."""
        peer = self.peers.get(peer_id)
        queue = self.broker.queues.get(queue_name)
        if peer is None or queue is None:
            return 0
        messages = queue.take(count)
        if not messages:
            return 0
        # A subscription with no window: dispatch never gives it anything; these go by hand.
        sub = Subscription(peer.session, self.link_subscription_id(queue_name), queue, CLIENT_INDIVIDUAL, 0, None)
        sub.peer = peer_id
        sub.tag = True  # may go where it came from: an administrator sends it there
        queue.add_consumer(sub)
        peer.session.subscriptions[sub.id] = sub
        for message in messages:
            peer.session.deliver(sub, message)
        peer.retiring.add(sub)  # unsubscribed once the peer has confirmed them all
        return len(messages)

    def _holding(self) -> bool:
        durable = (b.queue for b in self.broker.bindings.values() if b.durable)
        return any(len(q) or q.inflight or q.in_doubt for q in (*self.broker.queues.values(), *durable))

    @defer.inlineCallbacks
    def stop(self):
        for loop in (self._gossip_loop, self._retention_loop):
            if loop is not None and loop.running:
                loop.stop()
        self.router.fail_all("this node is stopping")
        for connector in self.connectors:
            connector.stop()
        if self.port is not None:
            yield self.port.stopListening()
        for peer in list(self.peers.values()):
            peer.link.closing = True
            peer.link.transport.loseConnection()

    def link_subscription_id(self, address: str) -> str:
        self._link_ids += 1
        return f"q{self._link_ids}:{address}"

    # -- handshake ------------------------------------------------------------------------

    def hello(self, nonce: str) -> dict:
        return {
            "version": PROTOCOL_VERSION,
            "node_id": self.node_id,
            "name": self.name,
            "user": self.config.cluster_user,
            "nonce": nonce,
            "started": self.started_at,
            "link": list(self.link_address),
            "stomp": list(self.stomp_address),
            "group": self.config.group_name,
            "chunks": True,  # large messages may come as CHUNK frames (mesh.large)
            "busy": True,  # a message it cannot store for want of room gets BUSY back, not silence
            "epoch": self.epoch,
            "votes": True,  # answers a backup's quorum VOTE sent instead of a HELLO (mesh.quorum)
        }

    def newer_epoch(self, hello: dict) -> int | None:
        """A higher epoch of the HELLO's node id than it presents, if this node has seen
        one (or is that node id itself, at a higher epoch): the sender was replaced."""
        node_id = hello["node_id"]
        known = self.epoch if node_id == self.node_id else self.peer_epochs.get(node_id, 0)
        return known if hello_epoch(hello) < known else None

    def fenced(self, reason: str) -> None:
        """This node was replaced (its data dir taken over by another process): it must
        stop serving at once."""
        (self.on_fenced or self.on_fatal)(reason)

    def check_peer(self, hello: dict) -> str | None:
        if hello["node_id"] != self.node_id:
            return None
        if hello.get("nonce") in self.own_nonces:
            return SELF_LINK
        if hello_epoch(hello) > self.epoch:
            # The same node at a higher epoch: this process was replaced on a shared store.
            self.fenced(f"node id {self.node_id} is in the mesh at epoch {hello_epoch(hello)} as node "
                        f"{hello.get('name')!r} at {tuple(hello.get('link', ()))}, above this process's epoch "
                        f"{self.epoch}: another process took this node's data dir over, so this one was replaced")
            return f"node id {self.node_id} at epoch {self.epoch} is replaced by the dialler's epoch"
        if hello.get("started", 0) < self.started_at:
            # We are the newcomer: the other node had this identity first.
            self.on_fatal(
                f"node id {self.node_id} is already in the mesh as node {hello.get('name')!r} at "
                f"{tuple(hello.get('link', ()))}: this node's data dir was copied from it; start this node "
                "with a fresh data dir"
            )
        return (f"node id {self.node_id} is already in the mesh: the joining node's data dir was copied; "
                "it must start with a fresh data dir")

    def refused(self, link: LinkProtocol, reason: str) -> None:
        # Two nodes that dialled each other keep one link: the other one's refusal is routine.
        duplicate = reason == "duplicate link"
        link.duplicate = duplicate  # its end, should it have been up here, is no news either
        log.log(logging.DEBUG if duplicate else logging.WARNING, "mesh: %s refused the link: %s", link.peer_name,
                reason)

    # -- links ----------------------------------------------------------------------------

    def link_up(self, link: LinkProtocol) -> None:
        peer_id = link.peer_id
        for connector in self.connectors:
            if link.dialled and connector.address == _address_of(link):
                connector.connected(peer_id)
        epoch = hello_epoch(link.peer)
        existing = self.peers.get(peer_id)
        if existing is not None and hello_epoch(existing.link.peer) < epoch:
            # The peer's data dir was taken over while its old process still held a link
            # (a partition, or a hung process): that link goes, and the old process is told.
            old = existing.link
            log.warning("mesh: %s is back at epoch %d; dropping its link of epoch %d (a replaced process)",
                        link.peer_name, epoch, hello_epoch(old.peer))
            old.established = False
            old.refuse_stale(epoch)
            self.events.emit(LinkDown(peer=peer_id, peer_name=old.peer_name,
                                      reason=f"replaced: the node took over its data dir at epoch {epoch}"))
            self._drop_peer(peer_id)
            existing = None
        if epoch > self.peer_epochs.get(peer_id, 0):
            self.peer_epochs[peer_id] = epoch  # only now: the peer has proven the cluster password
        if existing is not None:
            # Both sides dialled: keep the link the lower node id dialled.
            keep_new = link.dialled == (self.node_id < peer_id)
            loser = existing.link if keep_new else link
            if not keep_new:
                link.established = False
                link.refuse("duplicate link", expected=True)
                return
            loser.established = False
            loser.refuse("duplicate link", expected=True)
            self._drop_peer(peer_id)
        forwarder = Forwarder(self.node_id)
        session = self.broker.open_session(forwarder, f"link-{link.peer_name}-{peer_id[:8]}")
        self.peers[peer_id] = forwarder.peer = Peer(link, session, self.reactor.seconds())
        self.link_down_since.pop(peer_id, None)
        log.info("mesh: linked with %s", link.peer_name)
        self.events.emit(LinkUp(peer=peer_id, peer_name=link.peer_name, dialled=link.dialled))
        self.custody.link_up(peer_id, link)
        self.definitions.link_up(link)  # before demand: a durable subscriber's demand names a definition
        self.demand.schedule_advertise()
        self.topology.gossip()

    def link_down(self, link: LinkProtocol) -> None:
        peer = self.peers.get(link.peer_id)
        if peer is None or peer.link is not link:
            return
        if link.duplicate:  # both dialled and the peer kept the other link, which comes up next
            log.debug("mesh: link with %s given up for the one %s dialled", link.peer_name, link.peer_name)
        else:
            log.info("mesh: link with %s lost", link.peer_name)
        self.events.emit(LinkDown(peer=link.peer_id, peer_name=link.peer_name,
                                  reason="duplicate link" if link.duplicate else link.down_reason or "connection lost"))
        self.last_frame[link.peer_id] = link.last_received
        self._drop_peer(link.peer_id)
        self.custody.unlinked(link.peer_id, self.reactor.seconds())
        self.demand.schedule_advertise()
        self.topology.gossip()

    def _drop_peer(self, peer_id: str) -> None:
        peer = self.peers.pop(peer_id)
        peer.session.sink.peer = None
        totals = self.link_totals.setdefault(peer_id, [0, 0])
        totals[0] += peer.forwarded_out
        totals[1] += peer.forwarded_in
        self.link_down_since[peer_id] = self.reactor.seconds()
        for message_id in peer.redistributing:
            sub = peer.forwarded.get(message_id)
            if sub is not None:
                sub.queue.backlog += 1  # it comes back and waits again
        self.custody.link_down(peer_id, peer)

    # -- receiving ------------------------------------------------------------------------

    def message_received(self, link: LinkProtocol, message: Message, origin: str, target: str = "",
                         redistributed: bool = False) -> None:
        peer = self.peers.get(link.peer_id)
        if peer is None:
            return
        entry = entry_name(target, message.id)
        store = self.store
        if message.persistent and (store.blocked or store.failure) and link.peer.get("busy"):
            # No room to store it: the sender keeps custody and tries again later.
            link.send_control(FrameType.BUSY, [entry])
            return
        if self.custody.take(link.peer_id, message, f"{origin}/{entry}"):
            peer.forwarded_in += 1
            if not target or not self.broker.put_in_subscription(target, message):
                self.broker.route(message)
                if message.kind == QUEUE:
                    queue = self.broker.queues.get(message.address)
                    if queue is not None:
                        if redistributed:
                            queue.redistributed_in += 1
                        else:
                            queue.forwarded_in += 1
        peer.to_confirm.append(entry)
        if len(peer.to_confirm) == 1:
            self.reactor.callLater(0, self._confirm, link.peer_id, peer)

    def _confirm(self, peer_id: str, peer: Peer) -> None:
        ids, peer.to_confirm = peer.to_confirm, []

        def send(_: object) -> None:
            if self.peers.get(peer_id) is peer:
                peer.link.send_control(FrameType.STORED, ids)

        self.store.when_durable().addCallbacks(send, not_durable)

    def busy(self, link: LinkProtocol, ids: list[str]) -> None:
        """The peer's store has no room for these: they go back to the head of their
        queues here, and nothing goes to that peer for BUSY_RETRY_S; then dispatch
        tries again (and the peer says BUSY again while it is still full)."""
        peer = self.peers.get(link.peer_id)
        if peer is None:
            return
        back: dict[Subscription, list[Message]] = {}
        for entry in ids:
            sub = peer.forwarded.pop(entry, None)
            message = None if sub is None else sub.inflight.pop(entry.rpartition("/")[2], None)
            if message is None:
                continue
            if entry in peer.redistributing:
                peer.redistributing.discard(entry)
                sub.queue.backlog += 1  # it waits again, as a backlog
            back.setdefault(sub, []).append(message)
        for sub, messages in back.items():
            sub.queue.put_back(messages)
        if back and not peer.busy:
            if not peer.busy_since:  # once per episode, not every retry
                peer.busy_since = self.reactor.seconds()
                log.info("mesh: %s has no room to store messages; they wait here, tried again every %.0f s",
                         link.peer_name, BUSY_RETRY_S)
            peer.busy = True
            peer.session.writable = False
            self.reactor.callLater(BUSY_RETRY_S, self._try_busy_peer, link.peer_id, peer)

    def _try_busy_peer(self, peer_id: str, peer: Peer) -> None:
        if self.peers.get(peer_id) is peer and peer.busy:
            peer.busy = False
            peer.session.set_writable(True)

    def stored(self, link: LinkProtocol, ids: list[str]) -> None:
        """The peer has custody: forget our copies, then tell it so."""
        peer = self.peers.get(link.peer_id)
        if peer is None:
            return
        if peer.busy_since:
            log.info("mesh: %s has room again after %.0f s", link.peer_name, self.reactor.seconds() - peer.busy_since)
            peer.busy_since = 0.0
        released = []
        forwarded = peer.forwarded
        redistributing = peer.redistributing
        consumed = self.broker.consumed
        settled: set[Subscription] = set()
        handed_over = 0
        for entry in ids:
            sub = forwarded.pop(entry, None)
            message = None if sub is None else sub.inflight.pop(entry.rpartition("/")[2], None)
            if message is None:
                continue
            if message.persistent:
                origin = message.path[0] if message.path else self.node_id
                released.append(f"{origin}/{entry}")
            queue = sub.queue
            if redistributing and entry in redistributing:
                redistributing.discard(entry)
                queue.redistributed_out += 1
                self.events.count(Redistribution(queue=queue.name, source=self.node_id, target=link.peer_id, count=0))
            else:
                queue.forwarded_out += 1
            consumed(queue, message)
            settled.add(sub)
            handed_over += 1
        peer.forwarded_out += handed_over
        # One dispatch per subscription for the whole batch: the window refills in one go.
        for sub in settled:
            if sub in peer.retiring and not sub.inflight:
                peer.retiring.discard(sub)
                peer.session.unsubscribe(sub.id)
            else:
                sub.queue.dispatch()
        if released:
            self.custody.release_when_durable(link.peer_id, released)

    def released(self, link: LinkProtocol, keys: list[str]) -> None:
        self.custody.release_markers(link.peer_id, keys)

    def markers_received(self, link: LinkProtocol, keys: list[str]) -> None:
        self.custody.markers_received(link, keys)

    def ask_received(self, link: LinkProtocol, keys: list[str]) -> None:
        self.custody.ask_received(link, keys)

    def have_received(self, link: LinkProtocol, keys: list[str]) -> None:
        self.custody.have_received(link, keys)

    def demand_received(self, link: LinkProtocol, records: list[dict]) -> None:
        self.demand.demand_received(link, records)

    def durable_received(self, link: LinkProtocol, spec: dict) -> None:
        if "link" in spec:
            self.broker.link_binding(spec["link"], spec["patterns"])
        else:
            self.broker.ensure_durable(spec["name"], spec["topic"], spec.get("selector"))

    # -- nodes that leave -----------------------------------------------------------------

    def leaving_received(self, link: LinkProtocol) -> None:
        """The peer scaled down and holds nothing: it will not resend, nor hold
        anything of ours after this node restarts."""
        log.info("mesh: %s scaled down and left the mesh", link.peer_name)
        self.topology.node_leaving(link.peer_id, link.peer_name)
        self.custody.stop_counting_on(link.peer_id)

    def forget(self, node_id: str) -> str | None:
        """An administrator says a node crashed and will not come back: stop
        waiting for it, release its duplicate markers, drop the topic messages kept
        for it, and tell every node. Returns why not, if it cannot be forgotten."""
        if node_id == self.node_id:
            return "a node cannot forget itself"
        if node_id in self.peers:
            return f"node {node_id} is linked with this node; stop it before forgetting it"
        ago = self.topology.heard_ago(node_id)
        if ago is not None:
            return (f"node {node_id} is still in the mesh (heard of {ago:.0f} s ago); a node is dropped "
                    f"{self.topology.expiry():.0f} s after it was last heard of")
        self._forget_received(node_id, str(uuid.uuid4()), None)
        return None

    def _retention(self) -> None:
        self.forget_departed()
        self.definitions.drop_old_tombstones()

    def forget_departed(self) -> list[str]:
        """Forget, as ``meshgate forget`` would, every node this node has linked with
        that no node has heard of for ``peer_retention_s``: what is kept for it (a
        topic backlog, markers, waits) would otherwise grow or wait forever. The
        clock runs from when the last link with it went (kept in the store, so a
        restart does not reset it), or from this node's start when it was linked
        as this node stopped."""
        retention, now = self.config.peer_retention_s, self.reactor.seconds()
        forgotten = []
        for peer_id in list(self.custody.known_peers):
            ago = self.topology.heard_ago(peer_id)
            if peer_id in self.peers or (ago is not None and ago < retention):
                continue
            since = max(self.custody.last_linked(peer_id) or self.started_at, self.link_down_since.get(peer_id, 0.0))
            if now - since < retention:
                continue
            departed = self.topology.departed.get(peer_id)
            name = departed.node.name if departed is not None else peer_id
            reason = f"not heard of for {_duration(now - since)} (mesh.peer_retention_s); forgotten"
            log.warning("mesh: node %s %s, with what was kept for it", name, reason)
            self.events.emit(NodeLeft(subject=peer_id, name=name, reason=reason))
            self._forget_received(peer_id, str(uuid.uuid4()), None)
            forgotten.append(peer_id)
        return forgotten

    def forget_received(self, link: LinkProtocol, request: dict) -> None:
        self._forget_received(request["node"], request["id"], link.peer_id)

    def _forget_received(self, node_id: str, request_id: str, source: str | None) -> None:
        if request_id in self._forget_requests:
            return  # it came round another way
        self._forget_requests.add(request_id)
        for peer_id, peer in self.peers.items():
            if peer_id != source:
                peer.link.send_control(FrameType.FORGET, {"node": node_id, "id": request_id})
        if node_id in self.peers:
            log.warning("mesh: told to forget %s, which is linked with this node: kept", node_id)
            return
        log.warning("mesh: forgetting node %s: it is not waited for, and what was kept for it is dropped", node_id)
        self.peer_epochs.pop(node_id, None)  # with its peer record: a node forgotten may come back at any epoch
        self.granted_epochs.pop(node_id, None)
        self.last_frame.pop(node_id, None)
        self.custody.stop_counting_on(node_id)
        self.broker.unbind_link(node_id)
        self.topology.forget(node_id)

    # -- the view of the mesh -------------------------------------------------------------

    def own_summary(self) -> NodeSummary:
        queues = [QueueSummary(name, len(q), len(q.consumers), q.inflight, q.in_doubt)
                  for name, q in self.broker.queues.items()]
        return NodeSummary(node=self.describe_node(), links=sorted(self.peers), queues=queues)

    def _describe_node(self) -> Node:
        stomp = address_text(*self.stomp_address)
        link = address_text(*self.link_address)
        return Node(id=self.node_id, name=self.name, version=__version__, group_name=self.config.group_name,
                    started_at=self.started_at, last_seen=self.reactor.seconds(),
                    addresses=Addresses(stomp=stomp, link=link), epoch=self.epoch)


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.0f} hours"
    return f"{seconds:.0f} s"


def _address_of(link: LinkProtocol) -> tuple[str, int]:
    address = link.transport.getPeer()
    return (address.host, address.port)
