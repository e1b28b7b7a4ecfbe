"""The peer table: the neighbours this node has a link with, what it has seen of
every node id (epochs, last frames, link totals, when links went), and the
fencing rules a proven link must pass before it is up. Parts of the mesh learn
of links through it: each subscribes to ``peer_up`` and ``peer_down``."""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from gateway.broker.events import EventSink
from gateway.broker.queue import Subscription
from gateway.broker.session import Session
from mesh.identity import PROTOCOL_VERSION, VHOSTS_PROTOCOL
from mesh.large import ChunkAssembler
from mesh.settings import Clock
from mesh.wire import DemandRecord, Hello, LinkSender
from model.events import LinkDown, LinkUp
from model.names import DEFAULT_VHOST

if TYPE_CHECKING:
    from mesh.identity import Identity

log = logging.getLogger("mesh.node")
LINK_WINDOW = 10_000  # messages in flight per link subscription before the peer confirms
DUPLICATE_LINK = "duplicate link"  # the refusal of the second of two links dialled both ways


class PeerLink(LinkSender, Protocol):
    """A proven link, as the peer table sees it."""

    @property
    def hello(self) -> Hello: ...

    @property
    def last_received(self) -> float: ...

    @property
    def down_reason(self) -> str: ...

    @property
    def protocol(self) -> int:
        """The link protocol both sides speak (mesh.identity)."""

    def refuse(self, reason: str, expected: bool = False, fenced: int | None = None) -> None: ...

    def refuse_stale(self, newer: int) -> None: ...

    def close(self) -> None: ...


class PeerVhost:
    """What a linked peer has in one vhost: the session its link subscriptions live
    on, in that vhost's broker, and those subscriptions."""

    __slots__ = ("name", "session", "queue_subs", "topic_sub", "durable_subs")

    def __init__(self, name: str, session: Session) -> None:
        self.name = name
        self.session = session
        self.queue_subs: dict[str, Subscription] = {}
        self.topic_sub: Subscription | None = None
        # Durable subscription name -> the link subscription that takes this node's part
        # of it to the peer, whose demand says its subscriber is there (or beyond).
        self.durable_subs: dict[str, Subscription] = {}


class Peer:
    """One linked neighbour: its link, its link subscriptions in each vhost it is
    linked in ("/" from the start; another once the peer wants something of it), the
    demand it advertised and what is in flight to it."""

    def __init__(self, link: PeerLink, session: Session, since: float) -> None:
        self.link = link
        self.hello = link.hello
        self.default = PeerVhost(DEFAULT_VHOST, session)
        self.channels: dict[str, PeerVhost] = {DEFAULT_VHOST: self.default}  # by vhost name
        self.since = since
        self.demand: list[DemandRecord] = []
        self.advertised: list[DemandRecord] | None = None
        # Message id (entry_name: unique across vhosts) -> the link subscription holding it, in any vhost.
        self.forwarded: dict[str, Subscription] = {}
        self.retiring: set[Subscription] = set()  # no demand any more; waiting for confirmations
        self.to_confirm: list[str] = []
        # Ids of messages in flight that move a backlog (redistribution), not a fresh send.
        self.redistributing: set[str] = set()
        self.forwarded_out = 0  # messages whose custody passed to the peer
        self.forwarded_in = 0  # messages received from the peer
        self.busy = False  # it said its store has no room: nothing goes to it until BUSY_RETRY_S passed
        self.busy_since = 0.0  # when it first said so, until it stores something again
        self.assembler = ChunkAssembler()  # a large message on its way in, in pieces
        self._subscription_ids = 0

    def sessions(self) -> list[Session]:
        """Its sessions, one per vhost it is linked in."""
        return [channel.session for channel in self.channels.values()]

    @property
    def vhosts(self) -> bool:
        """Whether the link carries vhosts other than "/" (a peer of an older release: never)."""
        return self.link.protocol >= VHOSTS_PROTOCOL

    def subscription_id(self, address: str) -> str:
        """A name for a new link subscription on this peer's session."""
        self._subscription_ids += 1
        return f"q{self._subscription_ids}:{address}"


PeerUp = Callable[[Peer], None]
PeerDown = Callable[[Peer, bool], None]  # (the peer, whether its link was lost rather than replaced)


class PeerTable:
    """Linked peers by node id, and what is known of every node id."""

    def __init__(self, identity: Identity, clock: Clock, events: EventSink,
                 new_peer: Callable[[PeerLink, float], Peer]) -> None:
        self.identity = identity
        self.clock = clock
        self.events = events
        self.new_peer = new_peer  # the data path's: opens the session that forwards to it
        self.linked: dict[str, Peer] = {}  # changed only here; others read it (a read view: ``view``)
        self.view: Mapping[str, Peer] = MappingProxyType(self.linked)
        self.epochs: dict[str, int] = {}  # node id -> the highest epoch seen of it (kept in its peer record)
        self.granted_epochs: dict[str, int] = {}  # node id -> the epoch a quorum vote granted a backup of it
        self.last_frame: dict[str, float] = {}  # node id -> when its last link's last frame came (quorum votes)
        self.link_totals: dict[str, list[int]] = {}  # node id -> [forwarded out, in] over links that went
        self.link_down_since: dict[str, float] = {}
        self._up: list[PeerUp] = []
        self._down: list[PeerDown] = []
        self._epoch_raised: list[Callable[[str], None]] = []

    # -- listeners --------------------------------------------------------------------------

    def watch(self, up: PeerUp | None = None, down: PeerDown | None = None) -> None:
        """Call ``up`` when a link comes up and ``down`` when it goes, in the order watched."""
        if up is not None:
            self._up.append(up)
        if down is not None:
            self._down.append(down)

    def watch_epochs(self, raised: Callable[[str], None]) -> None:
        """Call ``raised`` with a node id whose epoch a quorum vote raised."""
        self._epoch_raised.append(raised)

    # -- fencing ----------------------------------------------------------------------------

    def newer_epoch(self, hello: Hello) -> int | None:
        """A higher epoch of the HELLO's node id than it presents, if this node has seen
        one (or is that node id itself, at a higher epoch): the sender was replaced."""
        identity = self.identity
        known = identity.epoch if hello.node_id == identity.node_id else self.epochs.get(hello.node_id, 0)
        return known if hello.epoch < known else None

    def grant_epoch(self, node_id: str, epoch: int) -> None:
        """A quorum vote granted a backup of ``node_id`` this epoch: links below it are refused."""
        self.granted_epochs[node_id] = epoch
        if epoch > self.epochs.get(node_id, 0):
            self.epochs[node_id] = epoch
            for raised in self._epoch_raised:
                raised(node_id)

    def remember_epoch(self, node_id: str, epoch: int) -> None:
        """An epoch of ``node_id`` read back from the store."""
        if epoch > self.epochs.get(node_id, 0):
            self.epochs[node_id] = epoch

    # -- links ------------------------------------------------------------------------------

    def admit(self, link: PeerLink) -> None:
        """A proven link: it replaces a link of an older epoch of its node id; of two
        links between the same nodes (both dialled) it keeps the one the lower node id
        dialled; then its peer is up."""
        peer_id = link.peer_id
        epoch = link.hello.epoch
        existing = self.linked.get(peer_id)
        if existing is not None and existing.hello.epoch < epoch:
            # The peer's data dir was taken over while its old process still held a link
            # (a partition, or a hung process): that link goes, and the old process is told.
            old = existing.link
            log.warning("mesh: %s is back at epoch %d; dropping its link of epoch %d (a replaced process)",
                        link.peer_name, epoch, existing.hello.epoch)
            old.refuse_stale(epoch)
            self.events.emit(LinkDown(peer=peer_id, peer_name=old.peer_name,
                                      reason=f"replaced: the node took over its data dir at epoch {epoch}"))
            self._drop(peer_id, lost=False)
            existing = None
        if epoch > self.epochs.get(peer_id, 0):
            self.epochs[peer_id] = epoch  # only now: the peer has proven the cluster password
        if existing is not None:
            if link.dialled != (self.identity.node_id < peer_id):
                link.refuse(DUPLICATE_LINK, expected=True)
                return
            existing.link.refuse(DUPLICATE_LINK, expected=True)
            self._drop(peer_id, lost=False)
        now = self.clock.seconds()
        peer = self.linked[peer_id] = self.new_peer(link, now)
        self.link_down_since.pop(peer_id, None)
        log.info("mesh: linked with %s", link.peer_name)
        if link.protocol < PROTOCOL_VERSION:  # a rolling upgrade under way: say who holds it back
            log.info("mesh: %s speaks link protocol %d (an older release); this node speaks %d", link.peer_name,
                     link.protocol, PROTOCOL_VERSION)
        self.events.emit(LinkUp(peer=peer_id, peer_name=link.peer_name, dialled=link.dialled))
        for up in self._up:
            up(peer)

    def link_lost(self, link: PeerLink) -> None:
        """A link closed: if it was the peer's link, the peer is down."""
        peer = self.linked.get(link.peer_id)
        if peer is None or peer.link is not link:
            return
        duplicate = link.down_reason == DUPLICATE_LINK
        if duplicate:  # both dialled and the peer kept the other link, which comes up next
            log.debug("mesh: link with %s given up for the one %s dialled", link.peer_name, link.peer_name)
        else:
            log.info("mesh: link with %s lost", link.peer_name)
        self.events.emit(LinkDown(peer=link.peer_id, peer_name=link.peer_name,
                                  reason=link.down_reason or "connection lost"))
        self.last_frame[link.peer_id] = link.last_received
        self._drop(link.peer_id, lost=True)

    def _drop(self, peer_id: str, lost: bool) -> None:
        peer = self.linked.pop(peer_id)
        totals = self.link_totals.setdefault(peer_id, [0, 0])
        totals[0] += peer.forwarded_out
        totals[1] += peer.forwarded_in
        self.link_down_since[peer_id] = self.clock.seconds()
        for down in self._down:
            down(peer, lost)

    def forget(self, node_id: str) -> None:
        """The node is gone for good: it may come back at any epoch."""
        self.epochs.pop(node_id, None)
        self.granted_epochs.pop(node_id, None)
        self.last_frame.pop(node_id, None)
