"""Consumers attaching to and detaching from queues, temporary queues and topics,
and the topic subscriptions' own queues (plain and durable) they make and drop:
what a SUBSCRIBE, an UNSUBSCRIBE or a deleted durable subscription changes. A
part of the broker core (``Broker.subscribe`` and its kin are this part's bound
methods), typed against what it uses of the broker (gateway.broker.core.BrokerCore).
Not on the per-message path: these run once per consumer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from gateway.broker.errors import BrokerError
from gateway.broker.message import QUEUE, TOPIC, Message
from gateway.broker.names import check_name
from gateway.broker.queue import ACK_MODES, Queue, Subscription, TopicBinding
from gateway.broker.routing import TEMP
from model.definitions import DURABLE_SUBSCRIPTION, DurableSpec
from model.events import ConsumerAttached, ConsumerDetached
from model.names import quoted

if TYPE_CHECKING:
    from gateway.broker.core import BrokerCore
    from gateway.broker.links import LinkSubscription
    from gateway.broker.session import Session


class Subscriptions:
    """The broker's consumers: who watches them come and go, and how their selectors compile."""

    def __init__(self, core: BrokerCore, compile_selector: Callable[[str], Callable] | None) -> None:
        self.core = core
        self._compile_selector = compile_selector
        self._consumer_watchers: list[Callable[[], None]] = []

    def subscribe(self, session: Session, subscription_id: str, kind: str, address: str, ack_mode: str,
                  prefetch: int | None, selector: str | None, durable_name: str | None,
                  tag: object = None, link: LinkSubscription | None = None) -> Subscription:
        core = self.core
        if ack_mode not in ACK_MODES:
            raise BrokerError(f"unknown ack mode {quoted(ack_mode)}; use one of {', '.join(ACK_MODES)}")
        if kind == TOPIC:
            check_name("topic", address)
        elif kind == QUEUE and address not in core.queues:
            check_name("queue name", address)
        predicate = self._selector(selector)
        prefetch = prefetch or core.default_prefetch
        if kind == TOPIC:
            binding = self._topic_binding(session, subscription_id, address, predicate, selector, durable_name)
            sub = Subscription(session, subscription_id, binding.queue, ack_mode, prefetch, None, selector,
                               topic=address, durable=binding.durable)
            binding.active = sub
        else:
            if kind == QUEUE:
                queue = core.queue(address)
            elif kind == TEMP:
                temporary = core.temp_queues.get(address)
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
                core.events.emit(ConsumerAttached(destination=_destination_of(sub), connection=session.name,
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
        binding = self.core.bindings.get(durable_name)
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
        self.core.define(DURABLE_SUBSCRIPTION, durable_name,
                         durable=DurableSpec(topic=pattern, selector=selector or None))
        return binding

    # -- topic subscriptions' queues ------------------------------------------------------

    def bind_topic(self, name: str, pattern: str, selector: str | None, durable: bool,
                   predicate: Callable | None = None) -> TopicBinding:
        if predicate is None and selector:
            predicate = self._selector(selector)
        prefix = "D:" if durable else "S:"
        queue = Queue(self.core, name, prefix + name, durable=durable)
        binding = TopicBinding(pattern, predicate, selector or None, queue, durable)
        self.core.bindings[name] = binding
        self.core.bindings_changed()
        return binding

    def unsubscribe(self, sub: Subscription, unacked: list[Message]) -> None:
        """Detach a consumer; its unacked messages go back to its queue, which
        for a non-durable topic subscription is then dropped with them."""
        core = self.core
        queue = sub.queue
        queue.remove_consumer(sub)
        if sub.link is None:
            self._consumers_changed()
            if not queue.temporary:
                core.events.emit(ConsumerDetached(destination=_destination_of(sub), connection=sub.session.name,
                                                  consumers=len(queue.consumers)))
        if unacked:
            core.requeue(queue, unacked, "consumer gone")
        binding = core.bindings.get(queue.name) if sub.topic is not None else None
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
        core = self.core
        binding = core.bindings.get(name)
        here = binding if binding is not None and binding.durable and binding.peer is None else None
        record = core.definitions.get(DURABLE_SUBSCRIPTION, name)
        if here is None and (record is None or record.deleted):
            raise BrokerError(f"no durable subscription named {quoted(name)}")
        if here is not None:
            self.drop_durable(here)
        core.define(DURABLE_SUBSCRIPTION, name)

    def drop_durable(self, binding: TopicBinding) -> None:
        if binding.active is not None:
            binding.active.queue.remove_consumer(binding.active)
            binding.active = None
        self.unbind_topic(binding)

    def unbind_topic(self, binding: TopicBinding) -> None:
        core = self.core
        del core.bindings[binding.queue.name]
        core.bindings_changed()
        core.purge(binding.queue, "subscription removed")  # the broker's consumed: a vhost's message count may wrap it


def _destination_of(sub: Subscription) -> str:
    return f"/topic/{sub.topic}" if sub.topic is not None else f"/queue/{sub.queue.name}"
