"""A queue: priority-ordered messages and competing subscriptions with credit;
and a topic binding, the queue of one topic subscription."""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict, deque
from contextlib import contextmanager
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from gateway.broker.message import Message, SelectorHeaders
from gateway.wildcard import compile_pattern
from model.latency import TOP as _LATENCY_TOP
from model.latency import empty_histogram

if TYPE_CHECKING:
    from gateway.broker.core import BrokerCore
    from gateway.broker.links import LinkSubscription
    from gateway.broker.session import Session
    from gateway.broker.tracing import Arm

AUTO = "auto"
CLIENT = "client"
CLIENT_INDIVIDUAL = "client-individual"
ACK_MODES = (AUTO, CLIENT, CLIENT_INDIVIDUAL)

Selector = Callable[[SelectorHeaders], bool]

_position = attrgetter("position")


class Subscription:
    """A consumer attached to one queue on behalf of a session."""

    __slots__ = (
        "session",
        "id",
        "queue",
        "ack_mode",
        "prefetch",
        "selector",
        "selector_text",
        "inflight",
        "topic",
        "durable",
        "tag",
        "link",
    )

    def __init__(
        self,
        session: Session,
        subscription_id: str,
        queue: Queue,
        ack_mode: str,
        prefetch: int,
        selector: Selector | None,
        selector_text: str | None = None,
        topic: str | None = None,
        durable: bool = False,
    ) -> None:
        self.session = session
        self.id = subscription_id
        self.queue = queue
        self.ack_mode = ack_mode
        self.prefetch = prefetch
        self.selector = selector
        self.selector_text = selector_text
        # message id -> message, in delivery order (client mode acks are cumulative)
        self.inflight: OrderedDict[str, Message] = OrderedDict()
        self.topic = topic
        self.durable = durable
        # Whatever the protocol adapter wants to keep per subscription
        # (STOMP: its number and pre-encoded MESSAGE prefix; AMQP: the consumer tag).
        self.tag: Any = None
        # A mesh link's subscription: whom it forwards to, and why; None for a client's.
        self.link: LinkSubscription | None = None

    def ready(self) -> bool:
        if not self.session.writable:
            return False
        return self.ack_mode == AUTO or len(self.inflight) < self.prefetch

    def __repr__(self) -> str:
        return f"<Subscription {self.id} on {self.queue.name} {self.ack_mode}>"


class QueueMesh:
    """What the mesh keeps on a queue: whether a backlog may follow consumers on other
    nodes, and its counters (see model.mesh.PartialQueue)."""

    __slots__ = ("remote_dispatch", "backlog", "in_doubt", "forwarded_out", "forwarded_in", "redistributed_out",
                 "redistributed_in")

    def __init__(self, remote_dispatch: bool) -> None:
        # Off while the mesh holds a backlog back (redistribution delay, load-balancing mode).
        self.remote_dispatch = remote_dispatch
        # Set when a backlog starts to follow consumers on other nodes: the next
        # this-many messages forwarded are redistributed, not fresh sends.
        self.backlog = 0
        self.in_doubt = 0  # messages held out of the queue while a peer may have them (mesh.custody)
        self.forwarded_out = 0
        self.forwarded_in = 0
        self.redistributed_out = 0
        self.redistributed_in = 0


class Queue:
    """Messages by priority (0-9, FIFO within one), dispatched round-robin to
    subscriptions that have credit and whose selector matches."""

    def __init__(self, broker: BrokerCore, name: str, key: str, durable: bool = True, temporary: bool = False) -> None:
        self.broker = broker
        self.name = name
        # The store's name for the queue; distinct namespaces for queues and
        # durable topic subscriptions that share a name.
        self.key = key
        self.durable = durable
        self.temporary = temporary
        self.owner: object = None  # the session a temporary queue belongs to
        self.consumers: list[Subscription] = []
        self.remotes: list[Subscription] = []  # mesh links towards nodes with consumers
        self._next_remote = 0
        self._remote_burst = 0
        self.mesh = QueueMesh(not broker.strict_routing)
        self._next_strict = 0
        self._levels: list[deque[Message]] = [deque() for _ in range(10)]
        self._high = 0  # no level above this one holds a message
        self._count = 0
        self._last_position = 0  # the last Message.position given here: each level is in this order
        self.depth_max = 0  # the deepest since the metrics' 10-second window began (management.state rolls it)
        self._next = 0
        self._dispatching = False
        self._has_selectors = False
        # Cumulative counters for the management model (see model.mesh.PartialQueue).
        self.enqueued = 0
        self.acked = 0
        self.expired = 0
        self.dead_lettered = 0
        self.latency = empty_histogram()  # model.latency buckets, counted on each ack
        self.latency_sum = 0.0  # µs: the counted latencies added up (for means)
        # Its tracer's arm, if armed (gateway.broker.tracing.Tracer.arm): a SEND to it reads it here.
        self.arm: Arm | None = None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Message]:
        for level in reversed(self._levels):
            yield from level

    @property
    def inflight(self) -> int:
        return sum(len(sub.inflight) for sub in self.consumers) + sum(len(sub.inflight) for sub in self.remotes)

    def put(self, message: Message) -> None:
        priority = message.priority
        position = self._last_position + 1
        self._last_position = message.position = position
        self._levels[priority].append(message)
        if priority > self._high:
            self._high = priority
        self._count += 1
        if self._count > self.depth_max:
            self.depth_max = self._count
        self.enqueued += 1
        if self.remotes and self.broker.strict_routing and not message.path and self._strict_forward(message):
            return
        if self.consumers or self.remotes:
            self.dispatch()

    def _strict_forward(self, message: Message) -> bool:
        """STRICT: this node and every node with the queue take turns, consumers or not."""
        turn = self._next_strict % (len(self.remotes) + 1)
        self._next_strict += 1
        if turn == 0:
            return False
        sub = self.remotes[turn - 1]
        if not sub.ready() or (sub.selector is not None and not sub.selector(SelectorHeaders(message))):
            return False
        self._levels[message.priority].pop()
        self._count -= 1
        sub.session.deliver(sub, message)
        return True

    def acknowledged(self, messages: Sequence[Message], now: float) -> None:
        """Count acks and their end-to-end latency (one bucket increment each)."""
        latency = self.latency
        total = 0.0
        for message in messages:
            if message.traced and self.broker.tracer is not None:
                self.broker.tracer.acked(self, message, now)
            created = message.created
            if created:
                micros = (now - created) * 1e6
                index = int(micros).bit_length() if micros >= 1 else 0
                latency[index if index < _LATENCY_TOP else _LATENCY_TOP] += 1
                total += micros
        self.latency_sum += total
        self.acked += len(messages)

    def oldest_created(self) -> float:
        """When the oldest waiting message was accepted (0 if none or unknown)."""
        oldest = 0.0
        if not self._count:
            return oldest
        for level in self._levels[:self._high + 1]:
            if level:
                created = level[0].created
                if created and (not oldest or created < oldest):
                    oldest = created
        return oldest

    def put_back(self, messages: list[Message]) -> None:
        """Return messages to the places they had: by their enqueue order here
        (Message.position), each ahead of everything that came after it, as RabbitMQ
        requeues. Whatever order they come back in (one nack at a time, sessions
        closing one after another, a peer refusing a few) the queue then reads as it
        did, and a priority queue still serves by priority."""
        levels = self._levels
        for message in sorted(messages, key=_position, reverse=True):  # newest first: the rest go in front
            priority = message.priority
            level = levels[priority]
            if not level or level[0].position > message.position:
                level.appendleft(message)  # the usual case: it was the head when taken
            else:  # taken from behind older ones (a selector, a peer), or these came back first
                level.insert(bisect_left(level, message.position, key=_position), message)
            if priority > self._high:
                self._high = priority
        self._count += len(messages)
        if self._count > self.depth_max:
            self.depth_max = self._count

    def take(self, count: int | None = None) -> list[Message]:
        """Remove up to ``count`` waiting messages (all with None), head first."""
        if count is None or count >= self._count:
            return self.take_all()
        taken: list[Message] = []
        for level in reversed(self._levels):
            while level and len(taken) < count:
                taken.append(level.popleft())
        self._count -= len(taken)
        return taken

    def take_all(self) -> list[Message]:
        messages = list(self)
        for level in self._levels:
            level.clear()
        self._count = 0
        return messages

    def add_consumer(self, subscription: Subscription) -> None:
        if subscription.link is None:
            self.consumers.append(subscription)
            self._has_selectors = any(sub.selector for sub in self.consumers)
        else:
            self.remotes.append(subscription)
        self.dispatch()

    def remove_consumer(self, subscription: Subscription) -> None:
        if subscription.link is None:
            self.consumers.remove(subscription)
            self._has_selectors = any(sub.selector for sub in self.consumers)
        else:
            self.remotes.remove(subscription)

    def dispatch(self) -> None:
        if self._dispatching or not self._count:
            return
        self._dispatching = True
        try:
            if self.consumers:
                self._dispatch_loop()
            # Local consumers with capacity come first; what they cannot take
            # goes to mesh links towards nodes with consumers.
            if self._count and self.remotes and self.mesh.remote_dispatch:
                self._dispatch_remote()
        finally:
            self._dispatching = False

    def _dispatch_remote(self) -> None:
        """Round-robin over the links, each taking as many messages per turn as
        it has consumers beyond it."""
        remotes = self.remotes
        index = self._next_remote
        burst = self._remote_burst
        idle = 0
        while self._count and idle < len(remotes):
            sub = remotes[index % len(remotes)]
            link = sub.link
            weight = link.weight if link is not None else 1
            while True:
                message = self._take_for_peer(sub) if sub.ready() else None
                if message is None:
                    idle += 1
                    index += 1
                    burst = 0
                    break
                idle = 0
                sub.session.deliver(sub, message)
                burst += 1
                if burst >= weight:
                    index += 1
                    burst = 0
                    break
                if not self._count:
                    break
        self._next_remote = index % len(remotes) if remotes else 0
        self._remote_burst = burst

    def _take_for_peer(self, sub: Subscription) -> Message | None:
        """The first message the peer may have. One that crossed the peer already
        may go back only to follow its consumers: when the peer itself has
        consumers (``may_revisit``) and this node has none, else it would strand here."""
        link = sub.link
        if link is None:
            return None
        peer = link.peer
        selector = sub.selector
        revisit = link.may_revisit and not self.consumers
        for priority in range(self._high, -1, -1):
            level = self._levels[priority]
            for position, message in enumerate(level):
                if peer in message.path and not revisit:
                    continue
                if selector is not None and not selector(SelectorHeaders(message)):
                    continue
                del level[position]
                self._count -= 1
                return message
        return None

    def _dispatch_loop(self) -> None:
        consumers = self.consumers
        broker = self.broker
        index = self._next
        idle = 0
        while self._count and consumers and idle < len(consumers):
            sub = consumers[index % len(consumers)]
            index += 1
            if not sub.ready():
                idle += 1
                continue
            message = self._take_for(sub) if self._has_selectors else self._take()
            if message is None:
                idle += 1
                continue
            if message.expires and message.expires <= broker.now_ms():
                broker.expire(self, message)
                continue
            idle = 0
            sub.session.deliver(sub, message)
        self._next = index % len(consumers) if consumers else 0

    def _take(self) -> Message | None:
        levels = self._levels
        high = self._high
        while not levels[high]:
            high -= 1
        self._high = high
        self._count -= 1
        return levels[high].popleft()

    def _take_for(self, sub: Subscription) -> Message | None:
        selector = sub.selector
        if selector is None:
            return self._take()
        for priority in range(self._high, -1, -1):
            level = self._levels[priority]
            for position, message in enumerate(level):
                if selector(SelectorHeaders(message)):
                    del level[position]
                    self._count -= 1
                    return message
        return None

    def remove_expired(self, now_ms: int) -> list[Message]:
        expired: list[Message] = []
        for level in self._levels:
            keep = [m for m in level if not (m.expires and m.expires <= now_ms)]
            if len(keep) != len(level):
                expired.extend(m for m in level if m.expires and m.expires <= now_ms)
                level.clear()
                level.extend(keep)
        self._count -= len(expired)
        return expired


@contextmanager
def dispatch_held(queues: Iterable[Queue]) -> Iterator[None]:
    """Nothing goes out of these queues until the block ends: what several requeues
    inside it return (a closing session's consumers, its transactions, a channel's
    gets) is all back in place before any of it is given to a consumer again, who
    then gets it in the queue's order. Queues already dispatching are left to that."""
    held = [queue for queue in queues if not queue._dispatching]
    for queue in held:
        queue._dispatching = True
    try:
        yield
    finally:
        for queue in held:
            queue._dispatching = False
            queue.dispatch()


class TopicBinding:
    """A topic subscription's queue and what it receives. ``peer``: the queue is a
    mesh peer's topic queue (gateway.broker.links), not a subscriber's."""

    __slots__ = ("pattern", "matches", "selector", "selector_text", "queue", "durable", "active", "peer")

    def __init__(self, pattern: str, selector: Callable | None, selector_text: str | None, queue: Queue,
                 durable: bool, matches: Callable[[str], bool] | None = None, peer: str | None = None) -> None:
        self.pattern = pattern
        self.matches = matches or compile_pattern(pattern)
        self.peer = peer
        self.selector = selector
        self.selector_text = selector_text
        self.queue = queue
        self.durable = durable
        self.active: Subscription | None = None
