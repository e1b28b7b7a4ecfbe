"""The per-message path into the broker: a STOMP SEND (``send``), an AMQP publish
through an exchange (``publish``) and a message arriving from another node
(``route``) put in their queues, topic subscriptions and temporary queues
(``enqueue``), with the topic-address cache that spares matching every binding on
every message. Mixed into gateway.broker.broker.Broker, not a part it calls
through: a method call on the broker costs no more than it did before the split.
What it uses of the broker is declared in gateway.broker.core.BrokerCore."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.broker.errors import BrokerError
from gateway.broker.exchanges import TOPIC_EXCHANGE
from gateway.broker.message import EXCHANGE_HEADER, QUEUE, ROUTING_KEY_HEADER, TOPIC, Message, SelectorHeaders
from gateway.broker.names import check_name
from gateway.broker.queue import Queue, TopicBinding

if TYPE_CHECKING:
    from gateway.broker.core import BrokerCore
    from gateway.broker.session import Session
    from gateway.broker.tracing import Arm

TEMP = "temp"
_TOPIC_CACHE_LIMIT = 10_000


class RoutingMixin:
    """The broker's producing side: where each message goes."""

    def send(self: BrokerCore, kind: str, address: str, headers: dict[str, str], body: bytes,
             persistent: bool = False, priority: int = 4, expires: int = 0,
             session: Session | None = None, from_id: str | None = None) -> Message | None:
        """``from_id``: the traced message this one is made from (a dead-letter): traced too."""
        if expires and expires <= self.now_ms():
            self.expired += 1
            return None
        if persistent and self.store.failure is not None:
            _refuse_persistent(self)
        queue = None
        if kind == QUEUE:
            queue = self.queues.get(address)
            if queue is None:
                check_name("queue name", address)
        elif kind == TOPIC:
            check_name("topic", address)
        if not expires and kind == QUEUE and self.queue_settings:
            expires = _queue_expiry(self, address)
            if expires:
                headers = {**headers, "expires": str(expires)}  # as if sent with it: consumers see it
        message = Message(self.next_message_id(), kind, address, headers, body, persistent, priority, expires)
        message.created = (session.received_at if session is not None else 0.0) or self.seconds()
        tracer = self.tracer
        if tracer is not None:  # the decision, once (gateway.broker.tracing)
            if from_id is not None or "trace" in headers:
                tracer.sent(message, session, from_id)
            elif tracer.armed:  # an arm counts down here, not in a call: most messages skip it
                if queue is not None:
                    arm = queue.arm
                else:
                    arm = (tracer.queue_arms if kind == QUEUE else tracer.topic_arms if kind == TOPIC
                           else _NO_ARMS).get(address)
                if arm is not None:
                    arm.countdown -= 1
                    if not arm.countdown and tracer.take(arm, kind, address):
                        tracer.sampled(message, session)
        if queue is not None:  # what route would do first, the queue at hand
            self.enqueue(queue, message)
            return message
        return message if self.route(message, session) else None

    def publish(self: BrokerCore, exchange: str, routing_key: str, headers: dict[str, str], body: bytes,
                persistent: bool = False, priority: int = 4, expires: int = 0, session: Session | None = None,
                match: dict | None = None, encoded: dict | None = None, from_id: str | None = None) -> int:
        """Publish through an exchange (AMQP): a copy to each queue its bindings
        lead to — the default exchange ``""`` to the queue named ``routing_key`` if
        there is one — and, for amq.topic, to the topic ``routing_key`` as a STOMP
        SEND to ``/topic/`` would. Returns how many took it (0: unroutable);
        ``match`` is what a headers exchange matches (typed AMQP headers);
        ``encoded`` what the publishing protocol already has encoded (Message.encoded);
        ``from_id`` the traced message this one is made from (a dead-letter): traced too."""
        if persistent and self.store.failure is not None:
            _refuse_persistent(self)
        created = (session.received_at if session is not None else 0.0) or self.seconds()
        if exchange == TOPIC_EXCHANGE:
            check_name("topic (the routing key on amq.topic)", routing_key)
            message = Message(self.next_message_id(), TOPIC, routing_key, headers, body, persistent, priority, expires)
            message.created = created
            tracer = self.tracer
            if tracer is not None:  # the decision, as in send
                if from_id is not None or "x-trace" in headers:
                    tracer.published(message, session, from_id, exchange, routing_key)
                elif tracer.topic_arms:
                    arm = tracer.topic_arms.get(routing_key)
                    if arm is not None:
                        arm.countdown -= 1
                        if not arm.countdown and tracer.take(arm, TOPIC, routing_key):
                            tracer.published(message, session, None, exchange, routing_key, sampled=True)
            takers = len(self.topic_cache.get(routing_key) or _match_bindings(self, routing_key))
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
        tracer = self.tracer
        if tracer is not None:  # the decision, as in send; an arm names a queue: the default exchange's
            if from_id is not None or "x-trace" in headers:
                tracer.published(message, session, from_id, exchange, routing_key)
            elif tracer.queue_arms and not exchange:
                arm = tracer.queue_arms.get(routing_key)
                if arm is not None:
                    arm.countdown -= 1
                    if not arm.countdown and tracer.take(arm, QUEUE, routing_key):
                        tracer.published(message, session, None, exchange, routing_key, sampled=True)
        _into_queues(self, message, names)
        return len(names)

    def route(self: BrokerCore, message: Message, session: Session | None = None) -> bool:
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
            bindings = self.topic_cache.get(address)
            if bindings is None:
                bindings = _match_bindings(self, address)
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
                    _into_queues(self, copy, names)
        elif kind == TEMP:
            queue = self.temp_queues.get(address)
            if queue is None:
                self.dropped += 1  # its owner has gone; nobody can ever read it
                if message.traced and self.tracer is not None:
                    self.tracer.dropped(None, message, "no owner")
                return False
            self.enqueue(queue, message)
        else:
            raise BrokerError(f"unknown destination kind {kind!r}")
        return True

    def enqueue(self: BrokerCore, queue: Queue, message: Message) -> None:
        if message.persistent and queue.durable:
            self.store.add(queue.key, message)
        self.memory.used += message.size
        if message.traced and self.tracer is not None:  # before put: it may be delivered at once
            self.tracer.queued(queue, message)
        queue.put(message)
        if self.queue_settings:
            settings = self.queue_settings.get(queue.name)
            if settings is not None and settings.max_length is not None and len(queue) > settings.max_length:
                _drop_head(self, queue, len(queue) - settings.max_length)

    def bindings_changed(self: BrokerCore) -> None:
        """A topic binding came, went or changed what it matches."""
        self.topic_cache.clear()


_NO_ARMS: dict[str, Arm] = {}  # a temporary queue's: never armed


def _refuse_persistent(core: BrokerCore) -> None:
    raise BrokerError(f"persistent messages are refused for now: the store cannot write ({core.store.failure})")


def _queue_expiry(core: BrokerCore, name: str) -> int:
    settings = core.queue_settings.get(name)
    return core.now_ms() + settings.message_ttl_ms if settings is not None and settings.message_ttl_ms else 0


def _into_queues(core: BrokerCore, message: Message, names: list[str]) -> None:
    """A copy of ``message`` in each named queue, each with an id of its own (the
    mesh tells queue messages apart by id)."""
    for index, name in enumerate(names):
        copy = message if index == 0 else message.copy()
        if index:
            copy.id = f"{message.id}.{index}"
        copy.kind, copy.address = QUEUE, name
        if not message.expires and core.queue_settings:
            copy.expires = _queue_expiry(core, name)
        queue = core.queues.get(name)
        core.enqueue(queue if queue is not None else core.create_queue(name), copy)


def _drop_head(core: BrokerCore, queue: Queue, count: int) -> None:
    """Past max_length the oldest waiting messages go, as AMQP's x-max-length
    (drop-head) has it: to the dead-letter exchange if the queue has one."""
    for message in queue.take(count):
        core.dead_letter(queue, message, "maxlen")


def _match_bindings(core: BrokerCore, address: str) -> list[TopicBinding]:
    bindings = [b for b in core.bindings.values() if b.matches(address)]
    topic_cache = core.topic_cache
    if len(topic_cache) >= _TOPIC_CACHE_LIMIT:
        topic_cache.clear()
    topic_cache[address] = bindings
    return bindings
