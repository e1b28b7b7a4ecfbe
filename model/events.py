"""What happens in the mesh, as each node saw it: one struct per kind, tagged by
``kind`` in JSON. ``time`` (epoch seconds) and ``node`` (the reporting node's id)
are filled in by the node's event log when the event is recorded.

Frequent happenings are counted, not listed: a dead-letter, expiry or
redistribution event covers what happened to one queue within about a second
(``count``).

An event that names a queue or a destination names its vhost too (``vhost``;
left out of the JSON for the default vhost ``/``, so what older readers see of
``/`` is unchanged)."""

from __future__ import annotations

from typing import cast

import msgspec

from model.names import DEFAULT_VHOST


class Event(msgspec.Struct, kw_only=True, tag_field="kind"):
    time: float = 0.0
    node: str = ""


class _InVhost(Event, kw_only=True, omit_defaults=True):
    """An event about a queue or destination of one vhost. Only ``vhost`` has a
    default a node leaves in place (``time`` and ``node`` are stamped), so it alone
    is left out of the JSON when it is ``/``."""

    vhost: str = DEFAULT_VHOST


class NodeJoined(Event, kw_only=True, tag="node_joined"):
    """A node appeared in this node's view of the mesh."""

    subject: str  # the node's id
    name: str


class NodeLeft(Event, kw_only=True, tag="node_left"):
    """A node dropped out of the view (not heard of for 3 × connection_ttl_ms), or was forgotten."""

    subject: str
    name: str
    reason: str


class NodeLeaving(Event, kw_only=True, tag="node_leaving"):
    """A node scaled down and leaves the mesh for good."""

    subject: str
    name: str


class LinkUp(Event, kw_only=True, tag="link_up"):
    peer: str
    peer_name: str
    dialled: bool


class LinkDown(Event, kw_only=True, tag="link_down"):
    peer: str
    peer_name: str
    reason: str


class Redistribution(_InVhost, kw_only=True, tag="redistribution"):
    """A backlog moved to a node with consumers (``count`` messages, custody passed)."""

    queue: str
    source: str  # node ids
    target: str
    count: int


class ScaleDown(Event, kw_only=True, tag="scale_down"):
    """This node handed its messages to ``target`` before leaving (``left``: what stayed behind)."""

    target: str | None
    left: int


class DeadLetter(_InVhost, kw_only=True, tag="dead_letter"):
    queue: str
    reason: str  # max-delivery-attempts | expired
    dead_letter_queue: str
    count: int


class Expired(_InVhost, kw_only=True, tag="expiry"):
    queue: str
    count: int


class ConsumerAttached(_InVhost, kw_only=True, tag="consumer_attached"):
    destination: str  # "/queue/NAME" or "/topic/PATTERN"
    connection: str
    consumers: int  # local consumers of the destination now


class ConsumerDetached(_InVhost, kw_only=True, tag="consumer_detached"):
    destination: str
    connection: str
    consumers: int


# Characters of a refused login kept in the event: what a client sent as its user name
# may be kilobytes long, and every event goes to the event log and the metrics stream.
USER_LIMIT = 128


class AuthenticationFailed(Event, kw_only=True, tag="authentication_failed"):
    user: str | None  # at most USER_LIMIT characters of what the client sent
    remote: str


class ProducersBlocked(Event, kw_only=True, tag="producers_blocked"):
    """The store reached store.limit or store.max_disk_usage: producers of persistent
    messages are not read until there is room again."""

    reason: str


class ProducersResumed(Event, kw_only=True, tag="producers_resumed"):
    """The store has room again: producers of persistent messages are read again."""

    blocked_s: float  # how long they waited


class AdminAction(Event, kw_only=True, tag="admin_action"):
    """A management request that changes something, done (or refused) on this node."""

    user: str
    action: str
    target: str  # what it acted on, e.g. "/queue/orders" or a connection id
    ok: bool
    result: str  # what it did, or why not


class CertificateExpiring(Event, kw_only=True, tag="certificate_expiring"):
    """A certificate in use expires within 14 days (fired once per certificate and
    day while it does; again after a reload that still leaves it short)."""

    listener: str  # as ListenerCertificate.listener
    subject: str
    not_after: float  # epoch seconds


EVENT_TYPES: tuple[type[Event], ...] = (
    NodeJoined, NodeLeft, NodeLeaving, LinkUp, LinkDown, Redistribution, ScaleDown, DeadLetter, Expired,
    ConsumerAttached, ConsumerDetached, AuthenticationFailed, ProducersBlocked, ProducersResumed, AdminAction,
    CertificateExpiring,
)
KINDS: tuple[str, ...] = tuple(cast(str, t.__struct_config__.tag) for t in EVENT_TYPES)  # each class sets tag="…"
AnyEvent = NodeJoined | NodeLeft | NodeLeaving | LinkUp | LinkDown | Redistribution | ScaleDown | DeadLetter | \
    Expired | ConsumerAttached | ConsumerDetached | AuthenticationFailed | ProducersBlocked | ProducersResumed | \
    AdminAction | CertificateExpiring
