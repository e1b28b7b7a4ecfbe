"""The broker's side of mesh links: what a link subscription is (whom it forwards
to, and why), and the topic queues kept for mesh peers. The mesh (mesh/) decides
which link subscriptions there are; the core only dispatches to them. Part of the
core: it changes the broker's bindings through the steps gateway.broker.core declares."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Callable

from gateway.broker.message import Message
from gateway.broker.queue import CLIENT_INDIVIDUAL, Queue, Subscription, TopicBinding
from gateway.wildcard import compile_pattern
from model.definitions import DURABLE_SUBSCRIPTION, DurableSpec

if TYPE_CHECKING:
    from gateway.broker.core import BrokerCore
    from gateway.broker.session import Session

LINK_BINDING = "link/"  # + peer id: the name of a peer's topic queue among the bindings
TOPICS = "topics"  # the id of the subscription that takes a peer's topic queue over its link


class LinkRole(enum.Enum):
    DEMAND = "demand"  # follows consumers of a queue beyond the link
    TOPICS = "topics"  # takes the peer's topic queue: what subscribers beyond it want
    DURABLE = "durable"  # takes this node's part of a durable subscription to its subscriber's side
    HANDED_OVER = "handed over"  # moved by an administrator, or by this node's scale-down


class LinkSubscription:
    """What makes a subscription a mesh link's."""

    __slots__ = ("peer", "role", "weight", "may_revisit", "durable")

    def __init__(self, peer: str, role: LinkRole, *, may_revisit: bool = False, durable: str = "") -> None:
        self.peer = peer  # the node id it forwards to
        self.role = role
        self.weight = 1  # consumers beyond the link: it gets this many messages per round-robin turn
        # A message may go back to the peer although it crossed it: the peer has
        # consumers of its own (or an administrator, or a scale-down, sends it there).
        self.may_revisit = may_revisit
        # The durable subscription (or peer topic queue) its messages go into there, by name.
        self.durable = durable

    def __repr__(self) -> str:
        return f"<LinkSubscription to {self.peer} ({self.role.value})>"


def _any_of(patterns: list[str]) -> Callable[[str], bool]:
    matchers = [compile_pattern(p) for p in patterns]
    return lambda address: any(match(address) for match in matchers)


class BrokerLinks:
    """The topic queues kept for mesh peers (``broker.links``), and the link
    subscriptions that take a topic queue or a durable subscription over a link."""

    def __init__(self, broker: BrokerCore) -> None:
        self.broker = broker
        self.patterns: dict[str, list[str]] = {}  # peer id -> topic patterns subscribed beyond it

    def binding(self, peer: str) -> TopicBinding | None:
        """The peer's topic queue, if it has one."""
        return self.broker.bindings.get(LINK_BINDING + peer)

    def bind(self, peer: str, patterns: list[str], save: bool = True) -> TopicBinding:
        """The store-and-forward queue of topic messages for one mesh peer: one copy
        of each message whose address some subscriber beyond it wants (never two to
        one node). It is durable and outlives the link, so persistent messages wait
        for the peer to come back."""
        broker = self.broker
        name = LINK_BINDING + peer
        matcher = _any_of(patterns)
        binding = broker.bindings.get(name)
        if binding is None:
            queue = Queue(broker, name, "L:" + peer, durable=True)
            binding = TopicBinding(">", None, None, queue, True, matches=matcher, peer=peer)
            broker.bindings[name] = binding
        else:
            binding.matches = matcher
        self.patterns[peer] = sorted(patterns)
        broker.bindings_changed()
        if save:
            broker.save_catalog(required=False)
        return binding

    def unbind(self, peer: str) -> None:
        """Nobody beyond the peer subscribes any more: drop its topic queue."""
        binding = self.binding(peer)
        if binding is None:
            return
        if binding.active is not None:
            binding.queue.remove_consumer(binding.active)
            binding.active = None
        self.broker.unbind_topic(binding)
        self.patterns.pop(peer, None)
        self.broker.save_catalog(required=False)

    def attach_topics(self, session: Session, binding: TopicBinding, prefetch: int) -> Subscription:
        """The link subscription that takes a peer's topic queue to it."""
        assert binding.peer is not None, "not a peer's topic queue"
        sub = Subscription(session, TOPICS, binding.queue, CLIENT_INDIVIDUAL, prefetch, None, topic=">")
        sub.link = LinkSubscription(binding.peer, LinkRole.TOPICS)
        binding.active = sub
        binding.queue.add_consumer(sub)
        session.subscriptions[sub.id] = sub
        return sub

    def attach_durable(self, session: Session, sub_id: str, binding: TopicBinding, prefetch: int, peer: str,
                       role: LinkRole) -> Subscription:
        """A link subscription taking a durable subscription's messages (or a peer's
        topic queue's, at scale-down) away to ``peer``, into the subscription of that
        name there."""
        sub = Subscription(session, sub_id, binding.queue, CLIENT_INDIVIDUAL, prefetch, None, topic=binding.pattern)
        # May go back to a node it crossed: the subscriber is there, or this node is leaving.
        sub.link = LinkSubscription(peer, role, may_revisit=True, durable=binding.queue.name)
        binding.queue.add_consumer(sub)
        session.subscriptions[sub.id] = sub
        return sub

    def ensure_durable(self, name: str, pattern: str, selector: str | None) -> None:
        """Create a durable subscription with no subscriber, if it does not exist."""
        broker = self.broker
        if name not in broker.bindings:
            broker.bind_topic(name, pattern, selector, durable=True)
            broker.define(DURABLE_SUBSCRIPTION, name, durable=DurableSpec(topic=pattern, selector=selector or None))

    def put_in_subscription(self, name: str, message: Message) -> bool:
        """Put a handed-over message straight into a durable subscription (or a
        mesh peer's topic queue), not routing it again."""
        binding = self.broker.bindings.get(name)
        if binding is None or not binding.durable:
            return False
        self.broker.enqueue(binding.queue, message)
        return True
