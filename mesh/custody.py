"""Custody of forwarded messages: duplicate markers on the receiving side, and
messages *in doubt* on the sending side.

The receiver keeps a durable duplicate marker per persistent message until the
sender has durably forgotten the message (RELEASED), so a resend after a
reconnect or a crash is dropped; a recent-message window catches copies that come
round another way.

A queue message (or a durable subscription's, on its way to the subscriber's
node) whose link went before it was confirmed, or that this node recovered
after a stop, may already be in a peer's custody: it is *in doubt*,
held out of every queue until that peer (every peer this node has linked with,
after a restart) has said on reconnect whether it has it, or until
``in_doubt_timeout_ms``. For persistent messages the peer lists its markers; for
non-persistent ones this node asks (ASK) and the peer answers from its recent
window (HAVE). If the peer has it, the peer keeps it and this node forgets it;
otherwise it is dispatched again, marked redelivered. Sending it elsewhere at
once would duplicate it unmarked at the peer."""

from __future__ import annotations

import logging
from typing import Any, Iterable, Protocol

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gateway.broker.broker import Broker
from gateway.broker.message import QUEUE, TOPIC, Message
from gateway.broker.queue import Queue
from gateway.broker.vhosts import VirtualHosts
from mesh.peers import Peer, PeerTable
from mesh.settings import Clock
from mesh.wire import IDS, FrameTable, FrameType, LinkSender

log = logging.getLogger(__name__)
_RECENT_WINDOW = 100_000
_TOPIC_MARKER_GRACE = 60.0  # seconds a released topic marker is kept for copies by other paths
MARKER = "S:"
PEER_RECORD = "P:"  # one record per node this node has linked with: who may hold its messages after a restart


class MarkerStore(Protocol):
    """What custody uses of the store: records, durability, and whether it holds a message."""

    def add(self, queue_key: str, message: Message) -> None: ...

    def remove(self, queue_key: str, message: Message) -> None: ...

    def when_durable(self, told_of_failed_writes: bool = False) -> Deferred: ...

    def holds(self, message_id: str) -> bool: ...


class RecentWindow:
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


class Custody:
    def __init__(self, node_id: str, vhosts: VirtualHosts, peers: PeerTable, clock: Clock, in_doubt_timeout_ms: int,
                 frames: FrameTable) -> None:
        self.node_id = node_id
        self.vhosts = vhosts
        broker = vhosts.default  # markers and peer records are the node's, kept with "/"
        self.store: MarkerStore = broker.store
        self.peers = peers
        self.clock = clock
        self.in_doubt_timeout_ms = in_doubt_timeout_ms
        # peer id -> {"origin/id": marker}: persistent messages received from it
        # and not yet released; they survive restarts in the store.
        self.markers: dict[str, dict[str, Message]] = {}
        self.recent = RecentWindow(_RECENT_WINDOW)  # every message received lately, in memory
        self.known_peers: dict[str, Message] = {}  # peer id -> its durable record under PEER_RECORD
        self._doubt: dict[str, _InDoubt] = {}  # entry (see entry_of) -> where it waits
        self._doubt_timers: dict[str, Any] = {}  # peer id -> when to stop waiting for it
        # Peer id (or asked(peer)) -> when this node began waiting for it: set once per batch
        # of doubts with the timer, not per message, so the doctor can say how long it has waited.
        self.doubt_since: dict[str, float] = {}
        self._releasing: set[tuple[str, str]] = set()  # (peer id, key) of topic markers with a release timer
        broker.foreign_records[MARKER] = self._recover_marker
        broker.foreign_records[PEER_RECORD] = self._recover_peer
        frames.on(FrameType.MARKERS, IDS, self.markers_received)
        frames.on(FrameType.ASK, IDS, self.ask_received)
        frames.on(FrameType.HAVE, IDS, self.have_received)
        frames.on(FrameType.RELEASED, IDS, self.released)
        peers.watch(up=self.peer_up, down=self.peer_down)
        peers.watch_epochs(self.remember_epoch)
        vhosts.watch(removed=self.vhost_removed)

    # -- receiving ------------------------------------------------------------------------

    def take(self, peer_id: str, message: Message, key: str) -> bool:
        """Whether a message received from ``peer_id`` is new here (not a copy or a
        resend); a new persistent one gets its duplicate marker."""
        if self.node_id in message.path:
            # It left this node and comes back to follow consumers here: no copy of it
            # is here, whatever the recent window says; only this sender's resend is,
            # and it has as many hops as the marker (a later visit has more).
            marker = self.markers.get(peer_id, {}).get(key) if message.persistent else None
            if marker is not None and marker.address == str(len(message.path)):
                return False
        elif key in self.recent or (message.persistent and any(key in held for held in self.markers.values())):
            # A copy may come round another way (rings), even after the first one's
            # marker is released: the recent window catches those; markers catch
            # resends across restarts (only persistent messages have markers).
            return False
        if message.persistent:
            markers = self.markers.setdefault(peer_id, {})
            stale = markers.get(key)
            if stale is not None:  # an earlier visit's, not yet released
                self.store.remove(MARKER + peer_id, stale)
            # The kind says how long to keep it once released (topics: a while);
            # the address holds the hop count, to tell a resend from a later visit.
            markers[key] = marker = Message(key, message.kind, str(len(message.path)), {}, b"", True)
            self.store.add(MARKER + peer_id, marker)
        self.recent.add(key)
        return True

    def release_markers(self, peer_id: str, keys: list[str]) -> None:
        markers = self.markers.get(peer_id, {})
        for key in keys:
            marker = markers.get(key)
            if marker is None:
                continue
            if marker.kind == TOPIC:
                # Another copy of a topic message may still be coming round a ring:
                # keep the marker a while, durably, before letting it go. One timer
                # a marker, however often the peer says it released it.
                if (peer_id, key) not in self._releasing:
                    self._releasing.add((peer_id, key))
                    self.clock.callLater(_TOPIC_MARKER_GRACE, self._forget_marker, peer_id, key)
            else:
                self._forget_marker(peer_id, key)

    def _forget_marker(self, peer_id: str, key: str) -> None:
        self._releasing.discard((peer_id, key))
        marker = self.markers.get(peer_id, {}).pop(key, None)
        if marker is not None:
            self.store.remove(MARKER + peer_id, marker)

    def released(self, link: LinkSender, keys: list[str]) -> None:
        self.release_markers(link.peer_id, keys)

    def markers_received(self, link: LinkSender, keys: list[str]) -> None:
        """The peer lists what it holds from us, on every new link: those in doubt
        are its now; release what we no longer hold."""
        by_entry = {key.partition("/")[2]: key for key in keys}  # the origin (a node id) comes first
        taken = self.peer_answered(link.peer_id, by_entry)
        gone = [key for entry, key in by_entry.items() if not self.store.holds(entry.rpartition("/")[2])]
        if taken:
            self.release_when_durable(link.peer_id, gone)  # our copies must be durably gone first
        elif gone:
            link.send_control(FrameType.RELEASED, gone)

    def ask_received(self, link: LinkSender, keys: list[str]) -> None:
        """The peer asks which of its non-persistent messages reached us before the
        last link went: the recent window knows (after a restart it is empty, and
        so is what we held of them)."""
        link.send_control(FrameType.HAVE, [key for key in keys if key in self.recent])

    def have_received(self, link: LinkSender, keys: list[str]) -> None:
        self.peer_answered(asked(link.peer_id), [key.partition("/")[2] for key in keys])

    def release_when_durable(self, peer_id: str, keys: list[str]) -> None:
        """Tell the peer it may drop these markers once our removals are on disk."""

        def send(_: object) -> None:
            current = self.peers.linked.get(peer_id)
            if current is not None:
                current.link.send_control(FrameType.RELEASED, keys)

        self.store.when_durable().addCallbacks(send, not_durable)

    # -- links ----------------------------------------------------------------------------

    def peer_up(self, peer: Peer) -> None:
        """Remember the peer durably, list its markers, ask about what is in doubt."""
        peer_id, link = peer.link.peer_id, peer.link
        record = self.known_peers.get(peer_id)
        epoch = self.peers.epochs.get(peer_id, 0)
        # Linked now: no "last linked" time holds; and the record keeps the highest epoch seen (fencing).
        if record is None or "last_linked" in record.headers or record.headers.get("epoch", "0") != str(epoch):
            self._record_peer(peer_id, {})
        link.send_control(FrameType.MARKERS, sorted(self.markers.get(peer_id, {})))
        waiting_for = asked(peer_id)
        keys = [self.key(entry.message, name) for name, entry in self._doubt.items() if waiting_for in entry.waiting]
        if keys:
            link.send_control(FrameType.ASK, keys)

    def peer_down(self, peer: Peer, lost: bool) -> None:
        """What was in flight on the link may be the peer's now: in doubt. A lost link
        (not one replaced) is recorded as gone, for peer retention."""
        peer_id = peer.link.peer_id
        stored: list[tuple[Queue, Message]] = []
        recent: list[tuple[Queue, Message]] = []
        for session in peer.sessions():
            for sub in session.subscriptions.values():
                if sub.queue.key[:2] in ("Q:", "D:"):  # a topic's link queue keeps each node's copy apart
                    # Another node could take these now: hold them until the peer says whether it has them.
                    for message in sub.inflight.values():
                        (stored if message.persistent else recent).append((sub.queue, message))
                    sub.inflight.clear()
                for message in sub.inflight.values():
                    message.recovered = True  # the peer may have delivered it before the link went
            session.close()
        if stored:
            self._doubt_about(stored, {peer_id})
        if recent:
            self._doubt_about(recent, {asked(peer_id)})
        if lost:
            self.unlinked(peer_id, self.clock.seconds())

    def last_linked(self, peer_id: str) -> float:
        """When this node last had a link with the peer, as its durable record says
        (0: unknown, or linked when this node stopped)."""
        record = self.known_peers.get(peer_id)
        return float(record.headers.get("last_linked", 0)) if record is not None else 0.0

    def unlinked(self, peer_id: str, now: float) -> None:
        """The link with the peer went: record when, so peer retention counts from
        there across restarts of this node."""
        if peer_id in self.known_peers:
            self._record_peer(peer_id, {"last_linked": repr(now)})

    def _record_peer(self, peer_id: str, headers: dict[str, str]) -> None:
        """Write the peer's durable record anew (replacing the one there was)."""
        old = self.known_peers.get(peer_id)
        if old is not None:
            self.store.remove(PEER_RECORD, old)
        epoch = self.peers.epochs.get(peer_id, 0)
        if epoch:
            headers = {**headers, "epoch": str(epoch)}
        record = self.known_peers[peer_id] = Message(peer_id, QUEUE, "", headers, b"", True)
        self.store.add(PEER_RECORD, record)

    def remember_epoch(self, peer_id: str) -> None:
        """Keep the epoch seen of a peer durably (a quorum vote granted a higher one),
        if this node keeps a record of that peer; other fields of the record stay."""
        record = self.known_peers.get(peer_id)
        if record is not None:
            self._record_peer(peer_id, {k: v for k, v in record.headers.items() if k != "epoch"})

    def stop_counting_on(self, node_id: str) -> None:
        """The node is gone for good: it will not resend, nor hold anything of ours."""
        record = self.known_peers.pop(node_id, None)
        if record is not None:
            self.store.remove(PEER_RECORD, record)
        self.release_markers(node_id, list(self.markers.get(node_id, ())))
        for waiting_for in (node_id, asked(node_id)):
            if waiting_for in self._doubt_timers:
                self.peer_answered(waiting_for, ())

    # -- in doubt -------------------------------------------------------------------------

    def hold_recovered(self) -> None:
        """After a restart any recovered queue message may have been in flight to
        a peer: hold each until every peer this node has linked with has said."""
        if not self.known_peers:
            return
        doubtful: list[tuple[Queue, Message]] = []
        for broker in self.vhosts:
            durable = [b.queue for b in broker.bindings.values() if b.durable and b.peer is None]
            for queue in (*broker.queues.values(), *durable):
                doubtful.extend((queue, message) for message in queue.take_all())
        self._doubt_about(doubtful, set(self.known_peers))

    def _doubt_about(self, doubtful: list[tuple[Queue, Message]], peers: set[str]) -> None:
        for queue, message in doubtful:
            message.recovered = True
            queue.mesh.in_doubt += 1
            self._doubt[entry_of(queue, message)] = _InDoubt(queue, message, set(peers))
            if message.traced and queue.broker.tracer is not None:
                queue.broker.tracer.in_doubt(queue, message, ",".join(sorted(peers)))
        timeout = self.in_doubt_timeout_ms / 1000.0
        for peer_id in peers:
            if peer_id not in self._doubt_timers:
                self._doubt_timers[peer_id] = self.clock.callLater(timeout, self.peer_answered, peer_id, ())
                self.doubt_since.setdefault(peer_id, self.clock.seconds())

    def peer_answered(self, peer_id: str, held: Iterable[str]) -> list[str]:
        """The peer listed the message ids it holds from us (or stopped being
        waited for): forget those, and dispatch again what no one else may hold.
        Returns the entries forgotten (see entry_of). ``peer_id`` is ``asked(peer)``
        for the peer's answer about non-persistent messages."""
        timer = self._doubt_timers.pop(peer_id, None)
        if timer is not None and timer.active():
            timer.cancel()
        self.doubt_since.pop(peer_id, None)
        forgotten = []
        for name in held:
            entry = self._doubt.pop(name, None)
            if entry is not None:
                entry.queue.mesh.in_doubt -= 1
                if entry.message.traced and entry.queue.broker.tracer is not None:
                    entry.queue.broker.tracer.doubt_settled(entry.queue, entry.message, peer_id, "peer has it")
                entry.queue.broker.consumed(entry.queue, entry.message)
                forgotten.append(name)
        released: dict[Queue, list[Message]] = {}
        for message_id, entry in list(self._doubt.items()):
            entry.waiting.discard(peer_id)
            if not entry.waiting:
                del self._doubt[message_id]
                entry.queue.mesh.in_doubt -= 1
                released.setdefault(entry.queue, []).append(entry.message)
                if entry.message.traced and entry.queue.broker.tracer is not None:
                    entry.queue.broker.tracer.doubt_settled(entry.queue, entry.message, peer_id, "requeued")
        for queue, messages in released.items():
            queue.broker.requeue(queue, messages, "in doubt released")
        return forgotten

    def vhost_removed(self, name: str, broker: Broker) -> None:
        """Its messages held in doubt go with its queues (no peer is asked about them again)."""
        for entry_name, entry in list(self._doubt.items()):
            if entry.queue.broker is broker:
                del self._doubt[entry_name]

    def release_doubts(self) -> None:
        """Stop waiting for anyone (scale-down hands everything over)."""
        for peer_id in list(self._doubt_timers):
            self.peer_answered(peer_id, ())

    def in_doubt_for(self, peer_id: str) -> int:
        """Messages held until ``peer_id`` says whether it has them."""
        waiting_for = (peer_id, asked(peer_id))
        return sum(1 for entry in self._doubt.values() if not entry.waiting.isdisjoint(waiting_for))

    def waiting_since(self, peer_id: str) -> float | None:
        """When this node began holding messages until ``peer_id`` answers (None: it holds none)."""
        times = [since for waiting_for in (peer_id, asked(peer_id))
                 if (since := self.doubt_since.get(waiting_for)) is not None]
        return min(times) if times else None

    def key(self, message: Message, entry: str) -> str:
        """How the receiver knows a message from this node: origin and entry."""
        return f"{message.path[0] if message.path else self.node_id}/{entry}"

    # -- recovery -------------------------------------------------------------------------

    def _recover_marker(self, key: str, marker: Message) -> None:
        self.markers.setdefault(key[len(MARKER):], {})[marker.id] = marker

    def _recover_peer(self, key: str, record: Message) -> None:
        self.known_peers[record.id] = record
        epoch = record.headers.get("epoch", "0")
        if epoch.isdigit():
            self.peers.remember_epoch(record.id, int(epoch))


def entry_of(queue: Queue, message: Message) -> str:
    """How a forwarded message is named between two nodes (mesh.forwarding.entry_name): by
    its id, and a durable subscription's copy also by the subscription, as copies
    of one topic message share the id."""
    return message.id if queue.key.startswith("Q:") else f"{queue.name}/{message.id}"


def not_durable(failure: Failure) -> None:
    """The store could not make the records durable: the peer is not told STORED or
    RELEASED, so it keeps custody (and resends) as after a lost link."""
    log.warning("mesh: %s; the peer keeps custody", failure.getErrorMessage())


def asked(peer_id: str) -> str:
    """Whom non-persistent messages in doubt wait for: the peer's HAVE, not its MARKERS."""
    return "asked:" + peer_id
