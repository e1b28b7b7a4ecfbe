"""The broker core: routes messages to queues and topic subscriptions, settles
deliveries against the store, dead-letters, expires and meters memory."""

from __future__ import annotations

import itertools
import logging
import time
from typing import Callable, Iterable, Iterator, Protocol

from gateway.broker.dead_letters import DeadLetters
from gateway.broker.definitions import DefiningMixin, Definitions
from gateway.broker.errors import BrokerError
from gateway.broker.events import EventSink, NullEvents
from gateway.broker.exchanges import TOPIC_EXCHANGE, Exchanges
from gateway.broker.links import BrokerLinks, LinkSubscription
from gateway.broker.memory import MemoryBudget
from gateway.broker.message import EXCHANGE_HEADER, QUEUE, ROUTING_KEY_HEADER, TOPIC, Message, SelectorHeaders
from gateway.broker.names import check_name
from gateway.broker.queue import ACK_MODES, Queue, Subscription, TopicBinding
from gateway.broker.session import DeliverySink, Session
from gateway.broker.vhost_limits import StoredMessages
from gateway.store.base import Store
from model.definitions import (
    DURABLE_SUBSCRIPTION,
    Definition,
    DurableSpec,
    QueueSettings,
)
from model.events import ConsumerAttached, ConsumerDetached
from model.names import quoted

log = logging.getLogger(__name__)

TEMP = "temp"
_TOPIC_CACHE_LIMIT = 10_000


class Clock(Protocol):
    def seconds(self) -> float: ...


class _WallClock:
    seconds = staticmethod(time.time)


class Broker(DefiningMixin):
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
    ) -> None:
        self.store = store
        self.events: EventSink = events or NullEvents()
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
        self._compile_selector = compile_selector
        self._id_prefix = message_id_prefix
        self._ids = message_ids or itertools.count(1)
        self.queues: dict[str, Queue] = {}
        self.queues_version = 0  # goes up whenever a queue is created or deleted
        self.temp_queues: dict[str, Queue] = {}
        self.bindings: dict[str, TopicBinding] = {}  # by subscription queue name
        self._topic_cache: dict[str, list[TopicBinding]] = {}
        self._temp_ids = itertools.count(1)
        self.expired = 0
        self.dropped = 0
        self._consumer_watchers: list[Callable[[], None]] = []
        self.queue_deleted_watchers: list[Callable[[str], None]] = []  # the mesh lets go of what held the queue
        self.strict_routing = False  # the mesh's STRICT load balancing, see Queue.put
        # Addresses answered by the node itself (management), never queued: the
        # handler gets the request and the sender's session (None if it came over a link).
        self.services: dict[str, Callable[[Message, Session | None], None]] = {}
        self.sessions: dict[str, Session] = {}  # open sessions by name (clients and mesh links)
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

    # -- start-up -------------------------------------------------------------------------

    def recover(self, stored: Iterable[tuple[str, Message]] | None = None) -> int:
        """Rebuild queues, durable subscriptions and persistent messages from the store
        (or from ``stored``, this broker's share of what a store shared by vhosts recovered)."""
        catalog = self.store.load_catalog()
        for name in catalog.get("queues", []):
            self.create_queue(name, save=False)
        self.definitions.load_catalog(catalog.get("definitions", []))
        for name, spec in catalog.get("durable", {}).items():  # written before definitions were
            if self.definitions.get(DURABLE_SUBSCRIPTION, name) is None:
                self.definitions.change(DURABLE_SUBSCRIPTION, name, self.seconds(),
                                        durable=DurableSpec(topic=spec["topic"], selector=spec.get("selector")))
        for record in self.definitions.records():
            if not record.deleted:
                self.apply_definition(record, save=False)
        for peer, patterns in catalog.get("links", {}).items():
            self.links.bind(peer, patterns, save=False)
        by_key = {q.key: q for q in self.queues.values()}
        by_key.update((b.queue.key, b.queue) for b in self.bindings.values())
        count = 0
        for key, message in self.store.recover() if stored is None else stored:
            foreign = self.foreign_records.get(key[:2])
            if foreign is not None:
                foreign(key, message)
                continue
            queue = by_key.get(key)
            if queue is None:
                if key.startswith("D:"):
                    # Its subscription was deleted (on another node, say) while this one was on its way.
                    log.warning("recovery: a message for deleted durable subscription %r dropped", key[2:])
                    self.store.remove(key, message)
                    continue
                queue = self._queue_for_key(key)
                by_key[key] = queue
            # It may have been delivered before the restart: say so, without
            # spending one of its delivery attempts.
            message.recovered = True
            self.memory.used += message.size
            queue.put(message)
            count += 1
        for queue in by_key.values():
            # Counters count what happened since start; a recovered message entered before it.
            queue.enqueued = 0
        return count

    def _queue_for_key(self, key: str) -> Queue:
        return self.create_queue(key.partition(":")[2])

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
        if save:
            self.save_catalog(required=False)  # a queue works without it: recovery finds its messages' queue
        return queue

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

    def drop_queue(self, queue: Queue, save: bool = True) -> None:
        """This node's copy of a queue goes, with what waits in it (its definition, if
        any, stays: a queue used again is made again)."""
        for message in queue.take_all():
            self.consumed(queue, message)
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

    # -- producing ------------------------------------------------------------------------

    def send(self, kind: str, address: str, headers: dict[str, str], body: bytes, persistent: bool = False,
             priority: int = 4, expires: int = 0, session: Session | None = None) -> Message | None:
        if expires and expires <= self.now_ms():
            self.expired += 1
            return None
        if persistent and self.store.failure is not None:
            self._refuse_persistent()
        if kind == TOPIC:
            check_name("topic", address)
        elif kind == QUEUE and address not in self.queues:
            check_name("queue name", address)
        if not expires and kind == QUEUE and self.queue_settings:
            expires = self._queue_expiry(address)
            if expires:
                headers = {**headers, "expires": str(expires)}  # as if sent with it: consumers see it
        message = Message(self.next_message_id(), kind, address, headers, body, persistent, priority, expires)
        message.created = (session.received_at if session is not None else 0.0) or self.seconds()
        return message if self.route(message, session) else None

    def _refuse_persistent(self) -> None:
        raise BrokerError(f"persistent messages are refused for now: the store cannot write ({self.store.failure})")

    def _queue_expiry(self, name: str) -> int:
        settings = self.queue_settings.get(name)
        return self.now_ms() + settings.message_ttl_ms if settings is not None and settings.message_ttl_ms else 0

    def publish(self, exchange: str, routing_key: str, headers: dict[str, str], body: bytes, persistent: bool = False,
                priority: int = 4, expires: int = 0, session: Session | None = None,
                match: dict | None = None, encoded: dict | None = None) -> int:
        """Publish through an exchange (AMQP): a copy to each queue its bindings
        lead to — the default exchange ``""`` to the queue named ``routing_key`` if
        there is one — and, for amq.topic, to the topic ``routing_key`` as a STOMP
        SEND to ``/topic/`` would. Returns how many took it (0: unroutable);
        ``match`` is what a headers exchange matches (typed AMQP headers);
        ``encoded`` what the publishing protocol already has encoded (Message.encoded)."""
        if persistent and self.store.failure is not None:
            self._refuse_persistent()
        created = (session.received_at if session is not None else 0.0) or self.seconds()
        if exchange == TOPIC_EXCHANGE:
            check_name("topic (the routing key on amq.topic)", routing_key)
            message = Message(self.next_message_id(), TOPIC, routing_key, headers, body, persistent, priority, expires)
            message.created = created
            takers = len(self._topic_cache.get(routing_key) or self._match_bindings(routing_key))
            takers += len(self.exchanges.queues_for(TOPIC_EXCHANGE, routing_key, match or {}))
            self.route(message, session)  # which puts it in amq.topic's queues too
            return takers
        if exchange == "":
            names = [routing_key] if routing_key in self.queues else []
        else:
            names = sorted(self.exchanges.queues_for(exchange, routing_key, match or {}))
        if expires and expires <= self.now_ms():
            self.expired += 1
            return len(names)
        message = Message(self.next_message_id(), QUEUE, "", headers, body, persistent, priority, expires)
        message.created = created
        if encoded is not None:
            message.encoded = encoded
        self._into_queues(message, names)
        return len(names)

    def _into_queues(self, message: Message, names: list[str]) -> None:
        """A copy of ``message`` in each named queue, each with an id of its own (the
        mesh tells queue messages apart by id)."""
        for index, name in enumerate(names):
            copy = message if index == 0 else message.copy()
            if index:
                copy.id = f"{message.id}.{index}"
            copy.kind, copy.address = QUEUE, name
            if not message.expires and self.queue_settings:
                copy.expires = self._queue_expiry(name)
            queue = self.queues.get(name)
            self.enqueue(queue if queue is not None else self.create_queue(name), copy)

    def route(self, message: Message, session: Session | None = None) -> bool:
        """Put a message (new, or arriving from another node) where it belongs."""
        kind = message.kind
        address = message.address
        if kind == QUEUE:
            queue = self.queues.get(address)
            if queue is None:
                service = self.services.get(address)
                if service is not None:
                    service(message, session)
                    return True
                queue = self.create_queue(address)
            self.enqueue(queue, message)
        elif kind == TOPIC:
            bindings = self._topic_cache.get(address)
            if bindings is None:
                bindings = self._match_bindings(address)
            first = True
            path = message.path
            for binding in bindings:
                if binding.selector is not None and not binding.selector(SelectorHeaders(message)):
                    continue
                if binding.peer is not None and (binding.peer in path or
                                                 (binding.active is None and not message.persistent)):
                    # A link never takes a message back to a node it crossed; while
                    # it is down only persistent messages wait for it.
                    continue
                if path and binding.durable and binding.peer is None:
                    # Every node holds each durable subscription and keeps what is published
                    # on it there, until the subscriber draws it: one copy in the mesh.
                    continue
                self.enqueue(binding.queue, message if first else message.copy())
                first = False
            if self.topic_queues and not path:
                # Queues bound to amq.topic take it too, on the node where it was published.
                names = sorted(self.exchanges.queues_for(TOPIC_EXCHANGE, address, message.headers))
                if names:
                    copy = message.copy()
                    copy.id = message.id + ".q"
                    copy.headers = {**message.headers, EXCHANGE_HEADER: TOPIC_EXCHANGE, ROUTING_KEY_HEADER: address}
                    copy.encoded = {}
                    self._into_queues(copy, names)
        elif kind == TEMP:
            queue = self.temp_queues.get(address)
            if queue is None:
                self.dropped += 1  # its owner has gone; nobody can ever read it
                return False
            self.enqueue(queue, message)
        else:
            raise BrokerError(f"unknown destination kind {kind!r}")
        return True

    def enqueue(self, queue: Queue, message: Message) -> None:
        if message.persistent and queue.durable:
            self.store.add(queue.key, message)
        self.memory.used += message.size
        queue.put(message)
        if self.queue_settings:
            settings = self.queue_settings.get(queue.name)
            if settings is not None and settings.max_length is not None and len(queue) > settings.max_length:
                self._drop_head(queue, len(queue) - settings.max_length)

    def _drop_head(self, queue: Queue, count: int) -> None:
        """Past max_length the oldest waiting messages go, as AMQP's x-max-length
        (drop-head) has it: to the dead-letter exchange if the queue has one."""
        for message in queue.take(count):
            self.dead_letter(queue, message, "maxlen")

    def bindings_changed(self) -> None:
        """A topic binding came, went or changed what it matches."""
        self._topic_cache.clear()

    def _match_bindings(self, address: str) -> list[TopicBinding]:
        bindings = [b for b in self.bindings.values() if b.matches(address)]
        if len(self._topic_cache) >= _TOPIC_CACHE_LIMIT:
            self._topic_cache.clear()
        self._topic_cache[address] = bindings
        return bindings

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

    # -- consuming ------------------------------------------------------------------------

    def subscribe(self, session: Session, subscription_id: str, kind: str, address: str, ack_mode: str,
                  prefetch: int | None, selector: str | None, durable_name: str | None,
                  tag: object = None, link: LinkSubscription | None = None) -> Subscription:
        if ack_mode not in ACK_MODES:
            raise BrokerError(f"unknown ack mode {quoted(ack_mode)}; use one of {', '.join(ACK_MODES)}")
        if kind == TOPIC:
            check_name("topic", address)
        elif kind == QUEUE and address not in self.queues:
            check_name("queue name", address)
        predicate = self._selector(selector)
        prefetch = prefetch or self.default_prefetch
        if kind == TOPIC:
            binding = self._topic_binding(session, subscription_id, address, predicate, selector, durable_name)
            sub = Subscription(session, subscription_id, binding.queue, ack_mode, prefetch, None, selector,
                               topic=address, durable=binding.durable)
            binding.active = sub
        else:
            if kind == QUEUE:
                queue = self.queue(address)
            elif kind == TEMP:
                temporary = self.temp_queues.get(address)
                if temporary is None:
                    raise BrokerError(f"temporary queue {quoted(address)} no longer exists")
                if temporary.owner is not session:
                    raise BrokerError(f"temporary queue {quoted(address)} belongs to another connection")
                queue = temporary
            else:
                raise BrokerError(f"unknown destination kind {kind!r}")
            sub = Subscription(session, subscription_id, queue, ack_mode, prefetch, predicate, selector)
        sub.tag = tag
        sub.link = link
        sub.queue.add_consumer(sub)
        if link is None:
            self._consumers_changed()
            if not sub.queue.temporary:  # a reply channel, not a consumer anyone watches
                self.events.emit(ConsumerAttached(destination=_destination_of(sub), connection=session.name,
                                                  consumers=len(sub.queue.consumers)))
        return sub

    # -- the mesh's view ------------------------------------------------------------------

    def watch_consumers(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a client consumer comes or goes (the mesh's demand)."""
        self._consumer_watchers.append(callback)

    def _consumers_changed(self) -> None:
        for callback in self._consumer_watchers:
            callback()

    def _selector(self, text: str | None) -> Callable | None:
        if not text:
            return None
        if self._compile_selector is None:
            raise BrokerError("selectors are not supported by this broker")
        try:
            return self._compile_selector(text)
        except ValueError as error:
            raise BrokerError(str(error)) from None

    def _topic_binding(self, session: Session, subscription_id: str, pattern: str, predicate: Callable | None,
                       selector: str | None, durable_name: str | None) -> TopicBinding:
        if durable_name is None:
            name = f"{session.name}/{subscription_id}"
            return self.bind_topic(name, pattern, selector, durable=False, predicate=predicate)
        binding = self.bindings.get(durable_name)
        if binding is None:
            check_name("durable subscription name", durable_name)
        if binding is not None and binding.durable:
            if binding.active is not None:
                raise BrokerError(f"durable subscription {quoted(durable_name)} is already active on another "
                                  "connection")
            if binding.pattern == pattern and binding.selector_text == (selector or None):
                return binding
            # A changed topic or selector makes a new subscription, as in JMS.
            self.unbind_topic(binding)
        binding = self.bind_topic(durable_name, pattern, selector, durable=True, predicate=predicate)
        self.define(DURABLE_SUBSCRIPTION, durable_name, durable=DurableSpec(topic=pattern, selector=selector or None))
        return binding

    def bind_topic(self, name: str, pattern: str, selector: str | None, durable: bool,
              predicate: Callable | None = None) -> TopicBinding:
        if predicate is None and selector:
            predicate = self._selector(selector)
        prefix = "D:" if durable else "S:"
        queue = Queue(self, name, prefix + name, durable=durable)
        binding = TopicBinding(pattern, predicate, selector or None, queue, durable)
        self.bindings[name] = binding
        self.bindings_changed()
        return binding

    def unsubscribe(self, sub: Subscription, unacked: list[Message]) -> None:
        """Detach a consumer; its unacked messages go back to its queue, which
        for a non-durable topic subscription is then dropped with them."""
        queue = sub.queue
        queue.remove_consumer(sub)
        if sub.link is None:
            self._consumers_changed()
            if not queue.temporary:
                self.events.emit(ConsumerDetached(destination=_destination_of(sub), connection=sub.session.name,
                                                  consumers=len(queue.consumers)))
        if unacked:
            self.requeue(queue, unacked)
        binding = self.bindings.get(queue.name) if sub.topic is not None else None
        if binding is None or binding.queue is not queue:
            return
        if binding.active is sub or binding.active is None:
            binding.active = None
        else:
            return  # a mesh link that took the subscription's messages to its subscriber elsewhere
        if not binding.durable:
            self.unbind_topic(binding)

    def remove_durable(self, name: str) -> None:
        """Delete a durable subscription here and, by its definition, on every node."""
        binding = self.bindings.get(name)
        here = binding if binding is not None and binding.durable and binding.peer is None else None
        record = self.definitions.get(DURABLE_SUBSCRIPTION, name)
        if here is None and (record is None or record.deleted):
            raise BrokerError(f"no durable subscription named {quoted(name)}")
        if here is not None:
            self.drop_durable(here)
        self.define(DURABLE_SUBSCRIPTION, name)

    def drop_durable(self, binding: TopicBinding) -> None:
        if binding.active is not None:
            binding.active.queue.remove_consumer(binding.active)
            binding.active = None
        self.unbind_topic(binding)

    def unbind_topic(self, binding: TopicBinding) -> None:
        del self.bindings[binding.queue.name]
        self.bindings_changed()
        for message in binding.queue.take_all():
            self.consumed(binding.queue, message)

    def consumed(self, queue: Queue, message: Message) -> None:
        if message.persistent and queue.durable:
            self.store.remove(queue.key, message)
        self.release_memory(message.size)

    # -- sessions -------------------------------------------------------------------------

    def open_session(self, sink: DeliverySink, name: str, client_id: str | None = None) -> Session:
        if client_id is not None:
            check_name("client-id", client_id)
        session = Session(self, sink, name, client_id)
        self.sessions[name] = session
        return session


def _destination_of(sub: Subscription) -> str:
    return f"/topic/{sub.topic}" if sub.topic is not None else f"/queue/{sub.queue.name}"
