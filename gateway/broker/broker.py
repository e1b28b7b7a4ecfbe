"""The broker core, assembled: its state, its queues and sessions, settling
deliveries against the store and the node's memory budget. Routing, recovery,
subscriptions, definitions and dead letters are in modules of their own beside it."""

from __future__ import annotations

import itertools
import logging
import time
from typing import Callable, Iterator, Protocol

from gateway.broker.dead_letters import DeadLetters
from gateway.broker.definitions import DefiningMixin, Definitions
from gateway.broker.errors import BrokerError
from gateway.broker.events import EventSink, NullEvents
from gateway.broker.exchanges import Exchanges
from gateway.broker.links import BrokerLinks
from gateway.broker.memory import MemoryBudget
from gateway.broker.message import QUEUE, Message
from gateway.broker.names import check_name
from gateway.broker.producer_pauses import ProducerPause
from gateway.broker.queue import Queue, TopicBinding
from gateway.broker.recovery import RecoveringMixin
from gateway.broker.routing import TEMP, RoutingMixin
from gateway.broker.session import CancelsConsumers, DeliverySink, Session
from gateway.broker.subscriptions import Subscriptions
from gateway.broker.tracing import Tracer
from gateway.broker.vhost_limits import StoredMessages
from gateway.store.base import Store
from model.definitions import Definition, QueueSettings

__all__ = ["TEMP", "Broker", "Clock"]  # TEMP: where the protocols have always imported it from

log = logging.getLogger(__name__)


class Clock(Protocol):
    def seconds(self) -> float: ...


class _WallClock:
    seconds = staticmethod(time.time)


class Broker(RoutingMixin, RecoveringMixin, DefiningMixin):
    """A broker core, assembled: its state here, the per-message path in
    gateway.broker.routing, start-up in gateway.broker.recovery, consumers and topic
    subscriptions in gateway.broker.subscriptions, definitions, dead letters and the
    mesh peers' topic queues in parts of their own."""

    def __init__(
        self,
        store: Store,
        *,
        message_id_prefix: str = "m-",
        clock: Clock | None = None,
        memory_limit: int = 256 * 1024 * 1024,
        default_prefetch: int = 1000,
        max_delivery_attempts: int = 10,
        dead_letter_queue: str = "DLQ",
        expiry_queue: str = "",
        compile_selector: Callable[[str], Callable] | None = None,
        events: EventSink | None = None,
        node_id: str = "",
        memory: MemoryBudget | None = None,  # shared by a node's vhosts; else one of memory_limit
        message_ids: Iterator[int] | None = None,  # shared by a node's vhosts: ids unique across them
        tracer: Tracer | None = None,  # [journeys] on: which messages are traced, and their records
    ) -> None:
        self.store = store
        self.events: EventSink = events or NullEvents()
        # None: journeys off, no message is ever traced (every hook is `if message.traced:`).
        self.tracer = tracer
        self.clock = clock or _WallClock()
        self.seconds = self.clock.seconds  # bound once: read on every SEND and every ack
        self.memory = memory or MemoryBudget(memory_limit)
        # Bound once, as they were when the broker kept the budget itself: no new step per message.
        self.reserve_memory = self.memory.reserve
        self.release_memory = self.memory.release
        self.when_memory_available = self.memory.when_available
        self.default_prefetch = default_prefetch
        self.max_delivery_attempts = max_delivery_attempts
        self.dead_letter_queue = dead_letter_queue
        self.expiry_queue = expiry_queue
        self._id_prefix = message_id_prefix
        self._ids = message_ids or itertools.count(1)
        self.queues: dict[str, Queue] = {}
        self.queues_version = 0  # goes up whenever a queue is created or deleted
        self.temp_queues: dict[str, Queue] = {}
        self.bindings: dict[str, TopicBinding] = {}  # by subscription queue name
        self.topic_cache: dict[str, list[TopicBinding]] = {}  # a topic's bindings, by address (routing)
        self._temp_ids = itertools.count(1)
        self.expired = 0
        self.dropped = 0
        self.queue_deleted_watchers: list[Callable[[str], None]] = []  # the mesh lets go of what held the queue
        self.strict_routing = False  # the mesh's STRICT load balancing, see Queue.put
        # Addresses answered by the node itself (management), never queued: the
        # handler gets the request and the sender's session (None if it came over a link).
        self.services: dict[str, Callable[[Message, Session | None], None]] = {}
        self.sessions: dict[str, Session] = {}  # open sessions by name (clients and mesh links)
        # Producers' connections not read now, by connection object, with the limit that
        # paused them (set and cleared by the protocol adapters at pause and resume only).
        self.paused_producers: dict[object, ProducerPause] = {}
        # Store records under keys the core does not own (the mesh's duplicate
        # markers), handed over at recovery: key prefix -> handler.
        self.foreign_records: dict[str, Callable[[str, Message], None]] = {}
        # Queue settings and durable subscriptions as the whole mesh holds them (model.definitions).
        self.definitions = Definitions(node_id)
        self.queue_settings: dict[str, QueueSettings] = {}
        self.exchanges = Exchanges()
        self.topic_queues = False  # some queue is bound to amq.topic: STOMP topic messages reach it too
        self.on_definition: Callable[[Definition], None] | None = None  # the mesh ships changes made here
        self.links = BrokerLinks(self)  # mesh peers' topic queues
        dead_letters = DeadLetters(self)
        self.requeue = dead_letters.requeue
        self.dead_letter = dead_letters.dead_letter
        self.expire = dead_letters.expire
        self.sweep_expired = dead_letters.sweep_expired
        subscriptions = Subscriptions(self, compile_selector)
        self.subscribe = subscriptions.subscribe
        self.unsubscribe = subscriptions.unsubscribe
        self.watch_consumers = subscriptions.watch_consumers
        self.bind_topic = subscriptions.bind_topic
        self.unbind_topic = subscriptions.unbind_topic
        self.remove_durable = subscriptions.remove_durable
        self.drop_durable = subscriptions.drop_durable

    # -- time and ids ---------------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def next_message_id(self) -> str:
        return self._id_prefix + str(next(self._ids))

    # -- destinations ---------------------------------------------------------------------

    def queue(self, name: str) -> Queue:
        queue = self.queues.get(name)
        return queue if queue is not None else self.create_queue(name)

    def create_queue(self, name: str, save: bool = True) -> Queue:
        if name in self.services:
            raise BrokerError(f"/queue/{name} is a service address: SEND requests to it with a reply-to header; "
                              "it holds no messages and cannot be subscribed to")
        queue = Queue(self, name, "Q:" + name)
        self.queues[name] = queue
        self.queues_version += 1
        if self.tracer is not None:
            self.tracer.queue_made(queue)
        if save:
            self.save_catalog(required=False)  # a queue works without it: recovery finds its messages' queue
        return queue

    def trace_next(self, kind: str, address: str, every: int, count: int | None, seconds: float) -> None:
        """Arm the tracer ([journeys] on; Tracer.arm): every ``every``-th message of ``kind``
        sent to ``address``, ``count`` at most (0: stop), for ``seconds``."""
        assert self.tracer is not None, "no tracer: [journeys] is off"
        self.tracer.arm(kind, address, every, count, seconds, self.queues.get(address) if kind == QUEUE else None)

    def create_temp_queue(self, session: Session, name: str) -> Queue:
        check_name("temporary queue name", name)
        global_name = f"{session.name}.{next(self._temp_ids)}.{name}"
        queue = Queue(self, global_name, "T:" + global_name, durable=False, temporary=True)
        queue.owner = session
        self.temp_queues[global_name] = queue
        return queue

    def register_service(self, address: str, handler: Callable[[Message, Session | None], None]) -> None:
        """Answer SENDs to ``/queue/<address>`` with ``handler``. A queue of that name
        (left by a version that let clients create one) would hide the service: it goes."""
        queue = self.queues.get(address)
        if queue is not None:
            self.drop_queue(queue)
        self.services[address] = handler

    def delete_queue(self, name: str) -> int:
        """Delete a queue: on every node its exchange bindings and its definition, and
        here what waits in it (the queue itself stays while a consumer holds it here).
        What AMQP's queue.delete, x-expires, auto-delete and exclusive queues mean;
        returns how many messages were dropped here."""
        for binding in self.exchanges.bound_to(name):
            self.unbind(binding)
        if name in self.queue_settings:
            self.define_queue(name, None)
        queue = self.queues.get(name)
        if queue is None or queue.consumers:
            return 0
        count = len(queue)
        self.drop_queue(queue)
        return count

    def cancel_consumers(self, queue: Queue) -> None:
        """The queue is being deleted: the consumers whose protocol can be told so are
        cancelled, as RabbitMQ does; the others (STOMP's) keep the queue (delete_queue)."""
        for sub in list(queue.consumers):
            sink = sub.session.sink
            if isinstance(sink, CancelsConsumers):
                sink.cancel_from_server(sub)

    def purge(self, queue: Queue, reason: str = "purge") -> int:
        """Drop what waits in ``queue`` (not what is delivered and unacked); how many went.
        ``reason``: why, for the journeys of traced messages."""
        messages = queue.take_all()
        for message in messages:
            if message.traced and self.tracer is not None:
                self.tracer.dropped(queue, message, reason)
            self.consumed(queue, message)
        return len(messages)

    def drop_queue(self, queue: Queue, save: bool = True) -> None:
        """This node's copy of a queue goes, with what waits in it (its definition, if
        any, stays: a queue used again is made again)."""
        self.purge(queue, "queue deleted")
        if queue.temporary:
            self.temp_queues.pop(queue.name, None)
        elif self.queues.pop(queue.name, None) is not None:
            self.queues_version += 1
            if save:
                self.save_catalog(required=False)
            for watcher in self.queue_deleted_watchers:
                watcher(queue.name)

    def save_catalog(self, required: bool = True) -> None:
        """Write the catalog. When the store cannot (a full disk), the client request
        that changed it gets a BrokerError naming why (``required``); a change the
        mesh made is logged: the catalog is written whole at the next change."""
        try:
            self.store.save_catalog({"queues": sorted(self.queues), "definitions": self.definitions.to_catalog(),
                                     "links": self.links.patterns})
        except OSError as error:
            reason = f"the queue catalog could not be saved ({error.strerror or error}); it is until the next restart"
            if required:
                raise BrokerError(reason) from None
            log.warning("%s", reason)

    # -- memory: the node's budget (gateway.broker.memory), shared by its vhosts' brokers --

    @property
    def memory_full(self) -> bool:
        memory = self.memory
        return memory.used >= memory.limit

    @property
    def memory_used(self) -> int:
        return self.memory.used

    @property
    def memory_limit(self) -> int:
        return self.memory.limit

    # -- settling -------------------------------------------------------------------------

    def consumed(self, queue: Queue, message: Message) -> None:
        if message.persistent and queue.durable:
            self.store.remove(queue.key, message)
        self.release_memory(message.size)

    # -- a vhost's message limit ----------------------------------------------------------

    def count_stored(self, stored: StoredMessages) -> None:
        """Count the messages this broker holds against its vhost's ``max_messages``
        (gateway.broker.vhost_limits), from those it holds now on. ``enqueue`` and
        ``consumed`` are wrapped on this broker alone, so a broker without the limit
        runs the code it ran before, with no new step per message."""
        queues = [*self.queues.values(), *self.temp_queues.values(), *(b.queue for b in self.bindings.values())]
        stored.count = sum(len(queue) + queue.inflight for queue in queues)
        enqueue, consumed = self.enqueue, self.consumed

        def counted_enqueue(queue: Queue, message: Message) -> None:
            enqueue(queue, message)
            stored.added()

        def counted_consumed(queue: Queue, message: Message) -> None:
            consumed(queue, message)
            stored.removed()

        self.enqueue = counted_enqueue  # type: ignore[method-assign]
        self.consumed = counted_consumed  # type: ignore[method-assign]

    # -- sessions -------------------------------------------------------------------------

    def open_session(self, sink: DeliverySink, name: str, client_id: str | None = None) -> Session:
        if client_id is not None:
            check_name("client-id", client_id)
        session = Session(self, sink, name, client_id)
        self.sessions[name] = session
        return session

