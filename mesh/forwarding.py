"""The data path over links: each link's session writes forwarded messages onto
it (Forwarder); a received MESSAGE (or its CHUNKs) is taken into custody here and
confirmed STORED once durable; a STORED from the peer settles what was in flight
to it, a BUSY puts it back to wait.

Forwarding rides on the broker core: each link has a session, and each queue
with demand beyond that link gets a *link subscription* on it. Queues serve
local consumers first and hand links only what those cannot take; a link
subscription never takes a message that already crossed its peer. A forwarded
message stays in the sender's store, in flight on the link subscription, until
the receiver says it is STORED (durably, for persistent ones); a lost link
returns what was in flight, *in doubt* (see :mod:`mesh.custody`)."""

from __future__ import annotations

import logging
from typing import Callable

from gateway.broker.broker import Broker
from gateway.broker.message import QUEUE, Message
from gateway.broker.queue import Subscription
from gateway.broker.vhosts import VirtualHosts
from mesh.codec import decode_message, encode_message
from mesh.custody import Custody, not_durable
from mesh.peers import Peer, PeerLink, PeerTable, PeerVhost
from mesh.settings import Clock
from mesh.wire import IDS, FrameTable, FrameType, LinkSender
from model.events import Redistribution

log = logging.getLogger("mesh.node")
BUSY_RETRY_S = 1.0  # how long a peer that said BUSY gets nothing
_STORED = FrameType.STORED


class Forwarder:
    """A link session's sink: writes each message onto the link, naming its vhost
    unless it is "/" (then the frame is what protocol 4 peers read)."""

    __slots__ = ("node_id", "peer", "vhost")

    def __init__(self, node_id: str, vhost: str = "") -> None:
        self.node_id = node_id
        self.peer: Peer | None = None  # set once the peer is known, cleared when its link goes
        self.vhost = vhost

    def deliver(self, sub: Subscription, message: Message) -> None:
        peer = self.peer
        if peer is None:
            return
        path = message.path
        link = sub.link
        if link is not None and link.durable:
            # A durable subscription's part (or a peer's topic queue) goes into that subscription there.
            target = link.durable
            peer.forwarded[entry_name(target, message.id)] = sub
        else:
            target = ""
            peer.forwarded[message.id] = sub
            counters = sub.queue.mesh
            if counters.backlog and sub.prefetch:
                # The first messages out after redistribution began are the backlog that waited
                # (not what an administrator moves by hand: that subscription has no window).
                counters.backlog -= 1
                peer.redistributing.add(message.id)
                peer.link.send_message(encode_message(message, path[0] if path else self.node_id,
                                                      (*path, self.node_id), target, True, self.vhost),
                                       message.address)
                return
        peer.link.send_message(encode_message(message, path[0] if path else self.node_id,
                                              (*path, self.node_id), target, False, self.vhost), message.address)


def entry_name(target: str, message_id: str) -> str:
    """How a forwarded copy is named in STORED/RELEASED: by id, and by the durable
    subscription it goes to when handed over (copies of one message share its id)."""
    return f"{target}/{message_id}" if target else message_id


def peer_opener(broker: Broker, node_id: str) -> Callable[[PeerLink, float], Peer]:
    """What makes a linked peer's record: a session on the "/" broker whose sink forwards to it."""

    def open_peer(link: PeerLink, since: float) -> Peer:
        forwarder = Forwarder(node_id)
        session = broker.open_session(forwarder, f"link-{link.peer_name}-{link.peer_id[:8]}")
        forwarder.peer = peer = Peer(link, session, since)
        return peer

    return open_peer


def open_vhost(peer: Peer, name: str, broker: Broker, node_id: str) -> PeerVhost:
    """The peer's session in another vhost (made when it first wants something there),
    whose sink forwards to it naming the vhost."""
    forwarder = Forwarder(node_id, name)
    forwarder.peer = peer
    link = peer.link
    channel = peer.channels[name] = PeerVhost(name, broker.open_session(
        forwarder, f"link-{link.peer_name}-{link.peer_id[:8]}"))
    return channel


def close_vhost(peer: Peer, name: str) -> None:
    """The peer no longer has a session in vhost ``name`` (the vhost went here)."""
    channel = peer.channels.pop(name, None)
    if channel is not None:
        forwarder = channel.session.sink
        if isinstance(forwarder, Forwarder):
            forwarder.peer = None
        channel.session.close()


class Forwarding:
    def __init__(self, node_id: str, vhosts: VirtualHosts, peers: PeerTable, custody: Custody, clock: Clock,
                 frames: FrameTable) -> None:
        self.node_id = node_id
        self.broker = vhosts.default
        self.vhosts = vhosts.brokers
        self.store = vhosts.store
        self.linked = peers.linked
        self.custody = custody
        self.clock = clock
        frames.on_raw(FrameType.MESSAGE, self.message_received)
        frames.on_raw(FrameType.CHUNK, self.chunk_received)
        frames.on(FrameType.STORED, IDS, self.stored)
        frames.on(FrameType.BUSY, IDS, self.busy)
        peers.watch(down=self.peer_down)

    def peer_down(self, peer: Peer, lost: bool) -> None:
        for session in peer.sessions():
            forwarder = session.sink
            if isinstance(forwarder, Forwarder):
                forwarder.peer = None
        for message_id in peer.redistributing:
            sub = peer.forwarded.get(message_id)
            if sub is not None:
                sub.queue.mesh.backlog += 1  # it comes back and waits again

    # -- receiving ------------------------------------------------------------------------

    def message_received(self, link: LinkSender, payload: bytes) -> None:
        message, origin, target, redistributed, vhost = decode_message(payload)
        peer = self.linked.get(link.peer_id)
        if peer is None:
            return
        entry = entry_name(target, message.id)
        store = self.store
        broker = self.vhosts.get(vhost) if vhost else self.broker
        if broker is None or (message.persistent and (store.blocked or store.failure) and peer.hello.busy):
            # No room to store it, or its vhost is not here (deleted meanwhile): the sender keeps
            # custody and tries again later, when the demand that sent it here has gone.
            link.send_control(FrameType.BUSY, [entry])
            return
        taken = self.custody.take(link.peer_id, message, f"{origin}/{entry}")
        if message.traced and broker.tracer is not None:
            broker.tracer.link_received(message, link.peer_id, redistributed, duplicate=not taken)
        if taken:
            peer.forwarded_in += 1
            if not target or not broker.links.put_in_subscription(target, message):
                broker.route(message)
                if message.kind == QUEUE:
                    queue = broker.queues.get(message.address)
                    if queue is not None:
                        if redistributed:
                            queue.mesh.redistributed_in += 1
                        else:
                            queue.mesh.forwarded_in += 1
        to_confirm = peer.to_confirm
        to_confirm.append(entry)
        if len(to_confirm) == 1:
            self.clock.callLater(0, self._confirm, link.peer_id, peer)

    def chunk_received(self, link: LinkSender, payload: bytes) -> None:
        peer = self.linked.get(link.peer_id)
        if peer is not None:
            whole = peer.assembler.add(payload)
            if whole is not None:
                self.message_received(link, whole)

    def _confirm(self, peer_id: str, peer: Peer) -> None:
        ids, peer.to_confirm = peer.to_confirm, []

        def send(_: object) -> None:
            if self.linked.get(peer_id) is peer:
                peer.link.send_control(_STORED, ids)

        self.store.when_durable().addCallbacks(send, not_durable)

    # -- what the peer says of what went to it ----------------------------------------------

    def busy(self, link: LinkSender, ids: list[str]) -> None:
        """The peer's store has no room for these: they go back to the head of their
        queues here, and nothing goes to that peer for BUSY_RETRY_S; then dispatch
        tries again (and the peer says BUSY again while it is still full)."""
        peer = self.linked.get(link.peer_id)
        if peer is None:
            return
        back: dict[Subscription, list[Message]] = {}
        for entry in ids:
            sub = peer.forwarded.pop(entry, None)
            message = None if sub is None else sub.inflight.pop(entry.rpartition("/")[2], None)
            if sub is None or message is None:
                continue
            if entry in peer.redistributing:
                peer.redistributing.discard(entry)
                sub.queue.mesh.backlog += 1  # it waits again, as a backlog
            if message.traced and sub.queue.broker.tracer is not None:
                sub.queue.broker.tracer.peer_busy(sub.queue, message, link.peer_id)
            back.setdefault(sub, []).append(message)
        for sub, messages in back.items():
            sub.queue.put_back(messages)
        if back and not peer.busy:
            if not peer.busy_since:  # once per episode, not every retry
                peer.busy_since = self.clock.seconds()
                log.info("mesh: %s has no room to store messages; they wait here, tried again every %.0f s",
                         link.peer_name, BUSY_RETRY_S)
            peer.busy = True
            for session in peer.sessions():
                session.writable = False
            self.clock.callLater(BUSY_RETRY_S, self._try_busy_peer, link.peer_id, peer)

    def _try_busy_peer(self, peer_id: str, peer: Peer) -> None:
        if self.linked.get(peer_id) is peer and peer.busy:
            peer.busy = False
            for session in peer.sessions():
                session.set_writable(True)

    def stored(self, link: LinkSender, ids: list[str]) -> None:
        """The peer has custody: forget our copies, then tell it so."""
        peer = self.linked.get(link.peer_id)
        if peer is None:
            return
        if peer.busy_since:
            log.info("mesh: %s has room again after %.0f s", link.peer_name, self.clock.seconds() - peer.busy_since)
            peer.busy_since = 0.0
        released = []
        forwarded = peer.forwarded
        redistributing = peer.redistributing
        settled: set[Subscription] = set()
        handed_over = 0
        for entry in ids:
            sub = forwarded.pop(entry, None)
            message = None if sub is None else sub.inflight.pop(entry.rpartition("/")[2], None)
            if sub is None or message is None:
                continue
            if message.persistent:
                origin = message.path[0] if message.path else self.node_id
                released.append(f"{origin}/{entry}")
            queue = sub.queue
            if message.traced and queue.broker.tracer is not None:
                queue.broker.tracer.peer_stored(queue, message, link.peer_id)
            if redistributing and entry in redistributing:
                redistributing.discard(entry)
                queue.mesh.redistributed_out += 1
                queue.broker.events.count(Redistribution(queue=queue.name, source=self.node_id, target=link.peer_id,
                                                         count=0))
            else:
                queue.mesh.forwarded_out += 1
            queue.broker.consumed(queue, message)
            settled.add(sub)
            handed_over += 1
        peer.forwarded_out += handed_over
        # One dispatch per subscription for the whole batch: the window refills in one go.
        for sub in settled:
            if sub in peer.retiring and not sub.inflight:
                peer.retiring.discard(sub)
                sub.session.unsubscribe(sub.id)
            else:
                sub.queue.dispatch()
        if released:
            self.custody.release_when_durable(link.peer_id, released)
