"""A node's place in the mesh: its links, what consumer demand it advertises and
has learned, and custody of the messages it forwards and receives.

Forwarding rides on the broker core: each link has a session, and each queue
with demand beyond that link gets a *link subscription* on it. Queues serve
local consumers first and hand links only what those cannot take; a link
subscription never takes a message that already crossed its peer. A forwarded
message stays in the sender's store, in flight on the link subscription, until
the receiver says it is STORED (durably, for persistent ones); a lost link
returns what was in flight. The receiver keeps a durable duplicate marker per
persistent message until the sender has durably forgotten the message
(RELEASED), so a resend after a reconnect or a crash is dropped.

A queue message whose link went before it was confirmed, or that this node
recovered after a stop, may already be in a peer's custody: it is *in doubt*,
held out of every queue until that peer (every peer this node has linked with,
after a restart) has said on reconnect whether it has it, or until
``in_doubt_timeout_ms``. For persistent messages the peer lists its markers; for
non-persistent ones this node asks (ASK) and the peer answers from its recent
window (HAVE). If the peer has it, the peer keeps it and this node forgets it;
otherwise it is dispatched again, marked redelivered. Sending it elsewhere at
once would duplicate it unmarked at the peer."""

from __future__ import annotations

import logging
import uuid
from typing import Callable, Iterable

from twisted.internet import defer, task
from twisted.internet import reactor as default_reactor

from gateway.broker.broker import Broker
from gateway.broker.message import QUEUE, TOPIC, Message
from gateway.broker.queue import CLIENT_INDIVIDUAL, Queue, Subscription
from gateway.broker.session import Session
from mesh.codec import FrameType, encode_message
from mesh.link import PROTOCOL_VERSION, LinkClientFactory, LinkProtocol, LinkServerFactory

log = logging.getLogger(__name__)

LINK_WINDOW = 10_000  # messages in flight per link subscription before the peer confirms
_RECENT_WINDOW = 100_000
_TOPIC_MARKER_GRACE = 60.0  # seconds a released topic marker is kept for copies by other paths
_MARKER = "S:"
_PEER = "P:"  # one record per node this node has linked with: who may hold its messages after a restart


class _Peer:
    """What this node keeps per established link."""

    def __init__(self, link: LinkProtocol, session: Session) -> None:
        self.link = link
        self.session = session
        self.demand: list[dict] = []
        self.advertised: list[dict] | None = None
        self.queue_subs: dict[str, Subscription] = {}
        self.topic_sub: Subscription | None = None
        self.forwarded: dict[str, Subscription] = {}  # message id -> link subscription holding it
        self.retiring: set[Subscription] = set()  # no demand any more; waiting for confirmations
        self.to_confirm: list[str] = []


class _RecentWindow:
    """Keys seen lately: the last ``size / 2`` at least, ``size`` at most. Two
    generations of sets cost a set insert per key, where an ordered window would
    pay an ordered insert and an eviction."""

    __slots__ = ("_current", "_previous", "_half")

    def __init__(self, size: int) -> None:
        self._current: set[str] = set()
        self._previous: set[str] = set()
        self._half = size // 2

    def add(self, key: str) -> None:
        current = self._current
        current.add(key)
        if len(current) >= self._half:
            self._previous = current
            self._current = set()

    def __contains__(self, key: str) -> bool:
        return key in self._current or key in self._previous

    def clear(self) -> None:
        self._current.clear()
        self._previous.clear()


class _InDoubt:
    """A queue message out of its queue while some peers may hold it."""

    __slots__ = ("queue", "message", "waiting")

    def __init__(self, queue: Queue, message: Message, waiting: set[str]) -> None:
        self.queue = queue
        self.message = message
        self.waiting = waiting


class _Forwarder:
    """The link session's sink: writes each message onto the link."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.peer: _Peer | None = None  # set once the peer is known, cleared when its link goes

    def deliver(self, sub: Subscription, message: Message) -> None:
        peer = self.peer
        if peer is None:
            return
        path = message.path
        if sub.id.startswith("d:"):
            # A scale-down subscription (d:NAME) hands a durable subscription's backlog over.
            target = sub.id[2:]
            peer.forwarded[_entry(target, message.id)] = sub
        else:
            target = ""
            peer.forwarded[message.id] = sub
        peer.link.send_message(encode_message(message, path[0] if path else self.node_id,
                                              (*path, self.node_id), target))


class _Connector:
    """Dials one peer address and keeps dialling, with backoff, while not linked."""

    def __init__(self, mesh: MeshNode, address: tuple[str, int]) -> None:
        self.mesh = mesh
        self.address = address
        self.peer_id: str | None = None
        self.attempts = 0
        self.stopped = False
        self._timer = None

    def start(self) -> None:
        self._dial()

    def stop(self) -> None:
        self.stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()

    def _dial(self) -> None:
        self._timer = None
        if self.stopped:
            return
        if self.peer_id is not None and self.peer_id in self.mesh.peers:
            self._schedule(self.mesh.config.retry_interval_ms / 1000.0)  # linked already, perhaps the other way
            return
        host, port = self.address
        self.mesh.reactor.connectTCP(host, port, LinkClientFactory(self.mesh, self), timeout=5)

    def connected(self, peer_id: str) -> None:
        self.peer_id = peer_id
        self.attempts = 0

    def failed(self) -> None:
        if self.stopped or self._timer is not None:
            return
        config = self.mesh.config
        self.attempts += 1
        if 0 <= config.reconnect_attempts < self.attempts:
            log.warning("mesh: giving up on %s:%d after %d attempts", *self.address, self.attempts - 1)
            return
        delay = min(config.retry_interval_ms * config.retry_interval_multiplier ** (self.attempts - 1),
                    config.max_retry_interval_ms)
        self._schedule(delay / 1000.0)

    def _schedule(self, delay: float) -> None:
        self._timer = self.mesh.reactor.callLater(delay, self._dial)


class MeshNode:
    def __init__(self, config, *, node_id: str, name: str, broker: Broker, started_at: float,
                 stomp_address: tuple[str, int], reactor=default_reactor,
                 on_fatal: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.node_id = node_id
        self.name = name
        self.broker = broker
        self.reactor = reactor
        self.started_at = started_at
        self.stomp_address = stomp_address
        self.on_fatal = on_fatal or (lambda reason: log.error("mesh: %s", reason))
        self.peers: dict[str, _Peer] = {}
        self.store = broker.store
        self.connectors: list[_Connector] = []
        self.port = None
        self.link_address: tuple[str, int] = config.bind
        # peer id -> {"origin/id": marker}: persistent messages received from it
        # and not yet released; they survive restarts in the store.
        self.markers: dict[str, dict[str, Message]] = {}
        self._recent = _RecentWindow(_RECENT_WINDOW)  # every message received lately, in memory
        self._advertise_scheduled = False
        self.topology: dict[str, dict] = {}
        self._topology_seq = 0
        self._gossip_loop = None
        broker.foreign_records[_MARKER] = self._recover_marker
        self.known_peers: dict[str, Message] = {}  # peer id -> its durable record under _PEER
        broker.foreign_records[_PEER] = self._recover_peer
        self._doubt: dict[str, _InDoubt] = {}  # message id -> where it waits
        self._doubt_timers: dict[str, object] = {}  # peer id -> when to stop waiting for it
        # STRICT: each new message goes round-robin to this node or a node with the
        # queue, consumers or not; a backlog never moves.
        broker.strict_routing = config.message_load_balancing == "STRICT"
        broker.watch_consumers(self._consumers_changed)
        self._had_consumers: set[str] = set()
        self._holds: dict[str, object] = {}
        self._released: set[str] = set()  # queues whose hold ran out: their backlog may follow consumers
        self.scaling_down = False
        self._link_ids = 0
        self._forget_requests: set[str] = set()

    # -- start and stop -------------------------------------------------------------------

    @defer.inlineCallbacks
    def start(self):
        host, port = self.config.bind
        self.port = yield self._listen(host, port)
        address = self.port.getHost()
        self.link_address = (address.host, address.port)
        for peer in self.config.static:
            self.add_connector(peer)
        self._gossip_loop = task.LoopingCall(self.gossip)
        self._gossip_loop.clock = self.reactor
        self._gossip_loop.start(self.config.check_period_ms / 1000.0)
        return self

    def _listen(self, host: str, port: int):
        from twisted.internet import endpoints

        return endpoints.TCP4ServerEndpoint(self.reactor, port, interface=host).listen(LinkServerFactory(self))

    def add_connector(self, address: tuple[str, int]) -> None:
        if tuple(address) == tuple(self.link_address) or any(c.address == tuple(address) for c in self.connectors):
            return
        connector = _Connector(self, tuple(address))
        self.connectors.append(connector)
        connector.start()

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
        # This node is going: what a peer may hold is handed over too, marked
        # redelivered, rather than left where no one would ever deliver it.
        self.release_doubts()
        for name, queue in list(self.broker.queues.items()):
            if not len(queue) or name in target.queue_subs:
                continue
            self._link_ids += 1
            target.queue_subs[name] = target.session.subscribe(
                f"q{self._link_ids}:{name}", QUEUE, name, CLIENT_INDIVIDUAL, LINK_WINDOW, None, peer=peer_id)
        for name, binding in list(self.broker.bindings.items()):
            if not binding.durable or not len(binding.queue) or binding.peer == peer_id:
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
        if left:
            log.warning("mesh: scale-down left %d message(s) in this node's store", left)
            return
        log.info("mesh: scaled down: every message handed to %s", target.link.peer_name)
        # Peers would otherwise wait for this node after their next restart, and
        # keep duplicate markers for messages it will never resend.
        for peer in self.peers.values():
            peer.link.send_control(FrameType.LEAVING)

    def _holding(self) -> bool:
        durable = (b.queue for b in self.broker.bindings.values() if b.durable)
        return any(len(q) or q.inflight or q.in_doubt for q in (*self.broker.queues.values(), *durable))

    def remove_connector(self, address: tuple[str, int]) -> None:
        for connector in [c for c in self.connectors if c.address == tuple(address)]:
            connector.stop()
            self.connectors.remove(connector)

    @defer.inlineCallbacks
    def stop(self):
        if self._gossip_loop is not None and self._gossip_loop.running:
            self._gossip_loop.stop()
        for connector in self.connectors:
            connector.stop()
        if self.port is not None:
            yield self.port.stopListening()
        for peer in list(self.peers.values()):
            peer.link.closing = True
            peer.link.transport.loseConnection()

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
        }

    def check_peer(self, hello: dict) -> str | None:
        if hello["node_id"] != self.node_id:
            return None
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
        log.warning("mesh: %s refused the link: %s", link.peer_name, reason)

    # -- links ----------------------------------------------------------------------------

    def link_up(self, link: LinkProtocol) -> None:
        peer_id = link.peer_id
        for connector in self.connectors:
            if link.dialled and connector.address == _address_of(link):
                connector.connected(peer_id)
        existing = self.peers.get(peer_id)
        if existing is not None:
            # Both sides dialled: keep the link the lower node id dialled.
            keep_new = link.dialled == (self.node_id < peer_id)
            loser = existing.link if keep_new else link
            if not keep_new:
                link.established = False
                link.refuse("duplicate link")
                return
            loser.established = False
            loser.refuse("duplicate link")
            self._drop_peer(peer_id)
        forwarder = _Forwarder(self.node_id)
        session = self.broker.open_session(forwarder, f"link-{link.peer_name}-{peer_id[:8]}")
        self.peers[peer_id] = forwarder.peer = _Peer(link, session)
        log.info("mesh: linked with %s", link.peer_name)
        if peer_id not in self.known_peers:
            record = self.known_peers[peer_id] = Message(peer_id, QUEUE, "", {}, b"", True)
            self.store.add(_PEER, record)
        link.send_control(FrameType.MARKERS, sorted(self.markers.get(peer_id, {})))
        asked = _asked(peer_id)
        keys = [self._key(entry.message) for entry in self._doubt.values() if asked in entry.waiting]
        if keys:
            link.send_control(FrameType.ASK, keys)
        self.schedule_advertise()
        self.gossip()

    def link_down(self, link: LinkProtocol) -> None:
        peer = self.peers.get(link.peer_id)
        if peer is None or peer.link is not link:
            return
        log.info("mesh: link with %s lost", link.peer_name)
        self._drop_peer(link.peer_id)
        self.schedule_advertise()
        self.gossip()

    def _drop_peer(self, peer_id: str) -> None:
        peer = self.peers.pop(peer_id)
        peer.session.sink.peer = None
        stored: list[tuple[Queue, Message]] = []
        recent: list[tuple[Queue, Message]] = []
        for sub in peer.session.subscriptions.values():
            if sub.queue.key.startswith("Q:"):
                # Another node could take these now: hold them until the peer says whether it has them.
                for message in sub.inflight.values():
                    (stored if message.persistent else recent).append((sub.queue, message))
                sub.inflight.clear()
            for message in sub.inflight.values():
                message.recovered = True  # the peer may have delivered it before the link went
        peer.session.close()
        if stored:
            self._doubt_about(stored, {peer_id})
        if recent:
            self._doubt_about(recent, {_asked(peer_id)})

    # -- custody in doubt -----------------------------------------------------------------

    def hold_recovered(self) -> None:
        """After a restart any recovered queue message may have been in flight to
        a peer: hold each until every peer this node has linked with has said."""
        if not self.known_peers:
            return
        doubtful = []
        for queue in self.broker.queues.values():
            doubtful.extend((queue, message) for message in queue.take_all())
        self._doubt_about(doubtful, set(self.known_peers))

    def _doubt_about(self, doubtful: list[tuple[Queue, Message]], peers: set[str]) -> None:
        for queue, message in doubtful:
            message.recovered = True
            queue.in_doubt += 1
            self._doubt[message.id] = _InDoubt(queue, message, set(peers))
        timeout = self.config.in_doubt_timeout_ms / 1000.0
        for peer_id in peers:
            if peer_id not in self._doubt_timers:
                self._doubt_timers[peer_id] = self.reactor.callLater(timeout, self._peer_answered, peer_id, ())

    def _peer_answered(self, peer_id: str, held: Iterable[str]) -> list[str]:
        """The peer listed the message ids it holds from us (or stopped being
        waited for): forget those, and dispatch again what no one else may hold.
        Returns the ids forgotten. ``peer_id`` is ``_asked(peer)`` for the
        peer's answer about non-persistent messages."""
        timer = self._doubt_timers.pop(peer_id, None)
        if timer is not None and timer.active():
            timer.cancel()
        forgotten = []
        for message_id in held:
            entry = self._doubt.pop(message_id, None)
            if entry is not None:
                entry.queue.in_doubt -= 1
                self.broker.consumed(entry.queue, entry.message)
                forgotten.append(message_id)
        released: dict[Queue, list[Message]] = {}
        for message_id, entry in list(self._doubt.items()):
            entry.waiting.discard(peer_id)
            if not entry.waiting:
                del self._doubt[message_id]
                entry.queue.in_doubt -= 1
                released.setdefault(entry.queue, []).append(entry.message)
        for queue, messages in released.items():
            self.broker.requeue(queue, messages)
        return forgotten

    def release_doubts(self) -> None:
        """Stop waiting for anyone (scale-down hands everything over)."""
        for peer_id in list(self._doubt_timers):
            self._peer_answered(peer_id, ())

    # -- redistribution -------------------------------------------------------------------

    def _consumers_changed(self) -> None:
        self.schedule_advertise()
        mode = self.config.message_load_balancing
        for name, queue in self.broker.queues.items():
            has = bool(queue.consumers)
            if mode == "OFF_WITH_REDISTRIBUTION":
                # Nothing leaves while local consumers exist; once they are gone the
                # backlog follows consumers elsewhere, after a fresh delay.
                if has:
                    queue.remote_dispatch = False
                    self._cancel_hold(name)
                    self._released.discard(name)
                    self._had_consumers.add(name)
                elif name in self._had_consumers:
                    self._had_consumers.discard(name)
                    self._hold(name, queue)
            elif has:
                self._had_consumers.add(name)
                queue.remote_dispatch = mode != "STRICT"
                self._cancel_hold(name)
            elif name in self._had_consumers and mode != "STRICT":
                self._had_consumers.discard(name)
                self._hold(name, queue)

    def _hold(self, name: str, queue) -> None:
        """The last local consumer left: keep the backlog for redistribution_delay_ms
        (-1: keep it) before letting it follow consumers on other nodes."""
        delay = self.config.redistribution_delay_for("/queue/" + name)
        if delay == 0:
            queue.remote_dispatch = True
            queue.dispatch()
            return
        queue.remote_dispatch = False
        if delay > 0:
            self._holds[name] = self.reactor.callLater(delay / 1000.0, self._release_hold, name)

    def _release_hold(self, name: str) -> None:
        self._holds.pop(name, None)
        self._released.add(name)
        queue = self.broker.queues.get(name)
        if queue is not None and not queue.consumers:
            queue.remote_dispatch = True
            queue.dispatch()

    def _cancel_hold(self, name: str) -> None:
        call = self._holds.pop(name, None)
        if call is not None and call.active():
            call.cancel()

    # -- demand ---------------------------------------------------------------------------

    def schedule_advertise(self) -> None:
        if not self._advertise_scheduled:
            self._advertise_scheduled = True
            self.reactor.callLater(0, self._advertise)

    def local_demand(self) -> list[dict]:
        carries = self.config.carries
        records = []
        strict = self.config.message_load_balancing == "STRICT"
        for name, queue in self.broker.queues.items():
            if (queue.consumers or strict) and carries("/queue/" + name):
                records.append({"kind": QUEUE, "address": name, "selector": _any_of(queue.consumers),
                                "consumers": len(queue.consumers), "path": [self.node_id]})
        patterns: dict[str, int] = {}
        for binding in self.broker.bindings.values():
            # A durable subscription wants messages while its subscriber is away too.
            wanted = binding.active is not None or binding.durable
            if binding.peer is None and wanted and carries("/topic/" + binding.pattern):
                patterns[binding.pattern] = patterns.get(binding.pattern, 0) + 1
        for pattern, count in patterns.items():
            records.append({"kind": TOPIC, "address": pattern, "selector": None, "consumers": count,
                            "path": [self.node_id]})
        return records

    def _advertise(self) -> None:
        self._advertise_scheduled = False
        local = self.local_demand()
        max_hops = self.config.max_hops
        for peer_id, peer in self.peers.items():
            records = list(local)
            if not self.config.allow_direct_connections_only:
                for other_id, other in self.peers.items():
                    if other_id == peer_id:
                        continue
                    for record in other.demand:
                        path = record["path"]
                        if peer_id in path or self.node_id in path or len(path) >= max_hops:
                            continue
                        records.append({**record, "path": [*path, self.node_id]})
            if records != peer.advertised:  # unchanged demand is not news: no ping-pong between nodes
                peer.advertised = records
                peer.link.send_control(FrameType.DEMAND, records)

    def demand_received(self, link: LinkProtocol, records: list[dict]) -> None:
        peer = self.peers.get(link.peer_id)
        if peer is None or peer.link is not link:
            return
        demand = [r for r in records if self.node_id not in r.get("path", ())]
        if demand == peer.demand:
            return
        peer.demand = demand
        self._reconcile(link.peer_id, peer)
        self.schedule_advertise()

    def _reconcile(self, peer_id: str, peer: _Peer) -> None:
        """Make the link's subscriptions match the demand learned over it."""
        wanted: dict[str, list[str | None]] = {}
        patterns = []
        for record in peer.demand:
            if record["kind"] == QUEUE:
                wanted.setdefault(record["address"], []).append(record.get("selector"))
            elif record["kind"] == TOPIC:
                patterns.append(record["address"])
        session = peer.session
        # Without duplex, traffic flows only over links this node dialled.
        forwarding = self.config.message_load_balancing != "OFF" and (self.config.duplex or peer.link.dialled)
        for address, sub in list(peer.queue_subs.items()):
            selector = _combine(wanted.get(address, []))
            if self.scaling_down:
                break
            if address not in wanted or sub.selector_text != selector:
                del peer.queue_subs[address]
                self._retire(peer, sub)
        direct = {r["address"] for r in peer.demand if r["kind"] == QUEUE and r.get("path") == [peer_id]}
        weights: dict[str, int] = {}
        for record in peer.demand:
            if record["kind"] == QUEUE:
                weights[record["address"]] = weights.get(record["address"], 0) + max(1, int(record.get("consumers", 1)))
        for address, selectors in wanted.items():
            if address in peer.queue_subs:
                sub = peer.queue_subs[address]
                if sub.tag != (address in direct):
                    sub.tag = address in direct
                    sub.queue.dispatch()
            elif forwarding:
                if self.config.message_load_balancing == "OFF_WITH_REDISTRIBUTION":
                    # Nothing is forwarded on send: a backlog moves only by redistribution.
                    queue = self.broker.queue(address)
                    if queue.consumers:
                        queue.remote_dispatch = False
                    elif queue.remote_dispatch and address not in self._holds and address not in self._released:
                        self._hold(address, queue)
                self._link_ids += 1
                peer.queue_subs[address] = session.subscribe(
                    f"q{self._link_ids}:{address}", QUEUE, address, CLIENT_INDIVIDUAL, LINK_WINDOW,
                    _combine(selectors), tag=address in direct, peer=peer_id,
                )
            if address in peer.queue_subs:
                peer.queue_subs[address].weight = weights.get(address, 1)
        patterns = sorted(set(patterns))
        if patterns and forwarding:
            if self.broker.link_patterns.get(peer_id) != patterns or ("link/" + peer_id) not in self.broker.bindings:
                binding = self.broker.link_binding(peer_id, patterns)
            else:
                binding = self.broker.bindings["link/" + peer_id]
            if peer.topic_sub is None:
                peer.topic_sub = self.broker.attach_link(session, binding, LINK_WINDOW)
                session.subscriptions[peer.topic_sub.id] = peer.topic_sub
        elif not patterns:
            if peer.topic_sub is not None:
                session.subscriptions.pop(peer.topic_sub.id, None)
                peer.topic_sub = None
            self.broker.unbind_link(peer_id)

    def _retire(self, peer: _Peer, sub: Subscription) -> None:
        """Demand over the link went away: take nothing new, but let what is in
        flight be confirmed there rather than come back and go out twice."""
        if not sub.inflight:
            peer.session.unsubscribe(sub.id)
            return
        sub.prefetch = 0
        peer.retiring.add(sub)

    # -- receiving ------------------------------------------------------------------------

    def message_received(self, link: LinkProtocol, message: Message, origin: str, target: str = "") -> None:
        peer = self.peers.get(link.peer_id)
        if peer is None:
            return
        entry = _entry(target, message.id)
        key = f"{origin}/{entry}"
        if self.node_id in message.path:
            # It left this node and comes back to follow consumers here: no copy of it
            # is here, whatever the recent window says; only this sender's resend is,
            # and it has as many hops as the marker (a later visit has more).
            marker = self.markers.get(link.peer_id, {}).get(key) if message.persistent else None
            duplicate = marker is not None and marker.address == str(len(message.path))
        else:
            # A copy may come round another way (rings), even after the first one's
            # marker is released: the recent window catches those; markers catch
            # resends across restarts (only persistent messages have markers).
            duplicate = key in self._recent or (
                message.persistent and any(key in held for held in self.markers.values()))
        if not duplicate:
            if message.persistent:
                markers = self.markers.setdefault(link.peer_id, {})
                stale = markers.get(key)
                if stale is not None:  # an earlier visit's, not yet released
                    self.store.remove(_MARKER + link.peer_id, stale)
                # The kind says how long to keep it once released (topics: a while);
                # the address holds the hop count, to tell a resend from a later visit.
                markers[key] = marker = Message(key, message.kind, str(len(message.path)), {}, b"", True)
                self.store.add(_MARKER + link.peer_id, marker)
            self._recent.add(key)
            if not target or not self.broker.put_in_subscription(target, message):
                self.broker.route(message)
        peer.to_confirm.append(entry)
        if len(peer.to_confirm) == 1:
            self.reactor.callLater(0, self._confirm, link.peer_id, peer)

    def _confirm(self, peer_id: str, peer: _Peer) -> None:
        ids, peer.to_confirm = peer.to_confirm, []

        def send(_: object) -> None:
            if self.peers.get(peer_id) is peer:
                peer.link.send_control(FrameType.STORED, ids)

        self.store.when_durable().addCallback(send)

    def stored(self, link: LinkProtocol, ids: list[str]) -> None:
        """The peer has custody: forget our copies, then tell it so."""
        peer = self.peers.get(link.peer_id)
        if peer is None:
            return
        released = []
        forwarded = peer.forwarded
        consumed = self.broker.consumed
        settled: set[Subscription] = set()
        for entry in ids:
            sub = forwarded.pop(entry, None)
            message = None if sub is None else sub.inflight.pop(entry.rpartition("/")[2], None)
            if message is None:
                continue
            if message.persistent:
                origin = message.path[0] if message.path else self.node_id
                released.append(f"{origin}/{entry}")
            consumed(sub.queue, message)
            settled.add(sub)
        # One dispatch per subscription for the whole batch: the window refills in one go.
        for sub in settled:
            if sub in peer.retiring and not sub.inflight:
                peer.retiring.discard(sub)
                peer.session.unsubscribe(sub.id)
            else:
                sub.queue.dispatch()
        if released:
            self._release_when_durable(link.peer_id, released)

    def released(self, link: LinkProtocol, keys: list[str]) -> None:
        self._release_markers(link.peer_id, keys)

    def _release_markers(self, peer_id: str, keys: list[str]) -> None:
        markers = self.markers.get(peer_id, {})
        for key in keys:
            marker = markers.get(key)
            if marker is None:
                continue
            if marker.kind == TOPIC:
                # Another copy of a topic message may still be coming round a ring:
                # keep the marker a while, durably, before letting it go.
                self.reactor.callLater(_TOPIC_MARKER_GRACE, self._forget_marker, peer_id, key)
            else:
                self._forget_marker(peer_id, key)

    def _forget_marker(self, peer_id: str, key: str) -> None:
        marker = self.markers.get(peer_id, {}).pop(key, None)
        if marker is not None:
            self.store.remove(_MARKER + peer_id, marker)

    def markers_received(self, link: LinkProtocol, keys: list[str]) -> None:
        """The peer lists what it holds from us, on every new link: those in doubt
        are its now; release what we no longer hold."""
        by_id = {key.rpartition("/")[2]: key for key in keys}
        taken = self._peer_answered(link.peer_id, by_id)
        gone = [key for message_id, key in by_id.items() if not self.store.holds(message_id)]
        if taken:
            self._release_when_durable(link.peer_id, gone)  # our copies must be durably gone first
        elif gone:
            link.send_control(FrameType.RELEASED, gone)

    def leaving_received(self, link: LinkProtocol) -> None:
        """The peer scaled down and holds nothing: it will not resend, nor hold
        anything of ours after this node restarts."""
        log.info("mesh: %s scaled down and left the mesh", link.peer_name)
        self._stop_counting_on(link.peer_id)

    def forget(self, node_id: str) -> str | None:
        """An administrator says a node crashed and will not come back: stop
        waiting for it, release its duplicate markers, drop the topic messages kept
        for it, and tell every node. Returns why not, if it cannot be forgotten."""
        if node_id == self.node_id:
            return "a node cannot forget itself"
        if node_id in self.peers:
            return f"node {node_id} is linked with this node; stop it before forgetting it"
        if node_id in self.topology:
            ago = self.reactor.seconds() - self.topology[node_id]["heard"]
            return (f"node {node_id} is still in the mesh (heard of {ago:.0f} s ago); a node is dropped "
                    f"{self._topology_expiry():.0f} s after it was last heard of")
        self._forget_received(node_id, str(uuid.uuid4()), None)
        return None

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
        self._stop_counting_on(node_id)
        self.broker.unbind_link(node_id)
        self.topology.pop(node_id, None)

    def _stop_counting_on(self, node_id: str) -> None:
        """The node is gone for good: it will not resend, nor hold anything of ours."""
        record = self.known_peers.pop(node_id, None)
        if record is not None:
            self.store.remove(_PEER, record)
        self._release_markers(node_id, list(self.markers.get(node_id, ())))
        for waiting_for in (node_id, _asked(node_id)):
            if waiting_for in self._doubt_timers:
                self._peer_answered(waiting_for, ())

    def ask_received(self, link: LinkProtocol, keys: list[str]) -> None:
        """The peer asks which of its non-persistent messages reached us before the
        last link went: the recent window knows (after a restart it is empty, and
        so is what we held of them)."""
        link.send_control(FrameType.HAVE, [key for key in keys if key in self._recent])

    def have_received(self, link: LinkProtocol, keys: list[str]) -> None:
        self._peer_answered(_asked(link.peer_id), [key.rpartition("/")[2] for key in keys])

    def _key(self, message: Message) -> str:
        """How the receiver knows a queue message from this node: origin and id."""
        return f"{message.path[0] if message.path else self.node_id}/{message.id}"

    def _release_when_durable(self, peer_id: str, keys: list[str]) -> None:
        """Tell the peer it may drop these markers once our removals are on disk."""

        def send(_: object) -> None:
            current = self.peers.get(peer_id)
            if current is not None:
                current.link.send_control(FrameType.RELEASED, keys)

        self.store.when_durable().addCallback(send)

    def durable_received(self, link: LinkProtocol, spec: dict) -> None:
        if "link" in spec:
            self.broker.link_binding(spec["link"], spec["patterns"])
        else:
            self.broker.ensure_durable(spec["name"], spec["topic"], spec.get("selector"))

    def _recover_marker(self, key: str, marker: Message) -> None:
        self.markers.setdefault(key[len(_MARKER):], {})[marker.id] = marker

    def _recover_peer(self, key: str, record: Message) -> None:
        self.known_peers[record.id] = record

    # -- topology -------------------------------------------------------------------------

    def own_view(self) -> dict:
        self._topology_seq += 1
        return {
            "name": self.name,
            "stomp": list(self.stomp_address),
            "link": list(self.link_address),
            "links": sorted(self.peers),
            "queues": {name: [len(q), len(q.consumers), q.inflight, q.in_doubt]
                       for name, q in self.broker.queues.items()},
            "version": [self.started_at, self._topology_seq],
        }

    def gossip(self) -> None:
        """Tell every neighbour what this node knows of the mesh, itself refreshed."""
        now = self.reactor.seconds()
        self.topology[self.node_id] = {**self.own_view(), "heard": now}
        stale = self._topology_expiry()
        for node_id in [n for n, info in self.topology.items() if now - info["heard"] > stale]:
            del self.topology[node_id]
        # Each entry goes with how long ago it was fresh, not when this node got it:
        # otherwise two nodes would keep handing a dead node's entry back to each
        # other, each time as new, and it would never drop out.
        nodes = {node_id: {**{k: v for k, v in info.items() if k != "heard"}, "age": now - info["heard"]}
                 for node_id, info in self.topology.items()}
        for peer in self.peers.values():
            peer.link.send_control(FrameType.TOPOLOGY, nodes)

    def _topology_expiry(self) -> float:
        """Seconds after which a node not heard of drops out of the view of the mesh."""
        return 3 * self.config.connection_ttl_ms / 1000.0

    def topology_received(self, link: LinkProtocol, nodes: dict) -> None:
        now = self.reactor.seconds()
        stale = self._topology_expiry()
        for node_id, info in nodes.items():
            if node_id == self.node_id or not isinstance(info, dict):
                continue
            info = dict(info)
            age = info.pop("age", 0.0)
            if age > stale:
                continue
            known = self.topology.get(node_id)
            if known is None or list(info.get("version", ())) > list(known["version"]):
                self.topology[node_id] = {**info, "heard": now - age}

    def view(self) -> dict:
        """The mesh as this node sees it: nodes, their links and partial queues."""
        self.topology[self.node_id] = {**self.own_view(), "heard": self.reactor.seconds()}
        return {node_id: {k: v for k, v in info.items() if k not in ("heard", "version")}
                for node_id, info in self.topology.items()}


def _asked(peer_id: str) -> str:
    """Whom non-persistent messages in doubt wait for: the peer's HAVE, not its MARKERS."""
    return "asked:" + peer_id


def _entry(target: str, message_id: str) -> str:
    """How a forwarded copy is named in STORED/RELEASED: by id, and by the durable
    subscription it goes to when handed over (copies of one message share its id)."""
    return f"{target}/{message_id}" if target else message_id


def _address_of(link: LinkProtocol) -> tuple[str, int]:
    address = link.transport.getPeer()
    return (address.host, address.port)


def _any_of(subscriptions: list[Subscription]) -> str | None:
    return _combine([sub.selector_text for sub in subscriptions])


def _combine(selectors: list[str | None]) -> str | None:
    """A link subscription takes what any consumer beyond it would take."""
    if not selectors or any(not s for s in selectors):
        return None
    unique = sorted(set(selectors))
    return unique[0] if len(unique) == 1 else " OR ".join(f"({s})" for s in unique)
