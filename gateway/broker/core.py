"""What the broker's parts (queues, mesh-wide definitions, the mesh peers' topic
queues, dead letters, subscriptions) and its mixins (routing, recovery, definitions)
use of the Broker: its state and its own steps, declared once, so that each part is
typed against this contract and not against the class that assembles them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from gateway.broker.definitions import Definitions
    from gateway.broker.events import EventSink
    from gateway.broker.exchanges import Exchanges
    from gateway.broker.links import BrokerLinks
    from gateway.broker.memory import MemoryBudget
    from gateway.broker.message import Message
    from gateway.broker.queue import Queue, TopicBinding
    from gateway.broker.session import Session
    from gateway.broker.tracing import Tracer
    from gateway.store.base import Store
    from model.definitions import BindingSpec, Definition, DefinitionKind, QueueSettings


class BrokerCore(Protocol):
    store: Store
    events: EventSink
    tracer: Tracer | None  # None: journeys off
    seconds: Callable[[], float]
    memory: MemoryBudget
    queues: dict[str, Queue]
    temp_queues: dict[str, Queue]
    bindings: dict[str, TopicBinding]  # topic subscriptions' queues, by name
    topic_cache: dict[str, list[TopicBinding]]  # the bindings a topic address matches, by address
    links: BrokerLinks
    foreign_records: dict[str, Callable[[str, Message], None]]  # store records others own, by key prefix
    services: dict[str, Callable[[Message, Session | None], None]]
    definitions: Definitions
    queue_settings: dict[str, QueueSettings]
    exchanges: Exchanges
    topic_queues: bool  # some queue is bound to amq.topic
    on_definition: Callable[[Definition], None] | None
    default_prefetch: int
    max_delivery_attempts: int
    dead_letter_queue: str
    expiry_queue: str
    expired: int
    dropped: int
    strict_routing: bool  # the mesh's STRICT load balancing (Queue.put)

    def now_ms(self) -> int: ...

    def next_message_id(self) -> str: ...

    def save_catalog(self, required: bool = True) -> None: ...

    def queue(self, name: str) -> Queue: ...

    def create_queue(self, name: str, save: bool = True) -> Queue: ...

    def drop_queue(self, queue: Queue, save: bool = True) -> None: ...

    def purge(self, queue: Queue, reason: str = "purge") -> int: ...

    def route(self, message: Message, session: Session | None = None) -> bool: ...

    def enqueue(self, queue: Queue, message: Message) -> None: ...

    def consumed(self, queue: Queue, message: Message) -> None: ...

    def requeue(self, queue: Queue, messages: list[Message], reason: str = "returned") -> None: ...

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None: ...

    def expire(self, queue: Queue, message: Message) -> None: ...

    def send(self, kind: str, address: str, headers: dict[str, str], body: bytes, persistent: bool = False,
             priority: int = 4, expires: int = 0, session: Session | None = None,
             from_id: str | None = None) -> Message | None: ...

    def publish(self, exchange: str, routing_key: str, headers: dict[str, str], body: bytes,
                persistent: bool = False, priority: int = 4, expires: int = 0, session: Session | None = None,
                match: dict | None = None, encoded: dict | None = None, from_id: str | None = None) -> int: ...

    def bind_topic(self, name: str, pattern: str, selector: str | None, durable: bool,
                   predicate: Callable | None = None) -> TopicBinding: ...

    def unbind_topic(self, binding: TopicBinding) -> None: ...

    def drop_durable(self, binding: TopicBinding) -> None: ...

    def bindings_changed(self) -> None: ...

    def define(self, kind: DefinitionKind, name: str, **spec: Any) -> Definition: ...

    def apply_definition(self, record: Definition, save: bool = True) -> None: ...

    def arm_trace(self, record: Definition) -> None: ...

    def trace_next(self, kind: str, address: str, every: int, count: int | None, seconds: float) -> None: ...

    def unbind(self, binding: BindingSpec) -> None: ...
