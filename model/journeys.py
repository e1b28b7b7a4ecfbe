"""Message journeys (docs/journeys.md): one record per step a traced message takes on
a node, made by gateway.broker.tracing.Tracer and kept by management.journeys.JourneyStore.

A journey is keyed by the message's *root* id: the id a node gave the message when it
was received, without the ``.N`` / ``.q`` suffixes that fan-out copies add
(gateway.broker.routing). A dead-lettered copy gets a new id: its ``received`` record
names the message it was made from (``from_id``), and the ``dead_lettered`` record of
that message names it (``next_id``) when it is known."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from model.names import DEFAULT_VHOST

# Every step a journey may hold.
Step = Literal[
    "received",  # a producer's message became a Message here (STOMP SEND, AMQP publish, a dead-letter)
    "queued",  # put in a queue (or a topic subscription's queue) in memory
    "stored",  # put in a durable queue and written to the journal (persistent)
    "delivered",  # given to a consumer (a subscription, or an AMQP basic.get)
    "acked",  # the consumer acknowledged it (or it went out in auto-ack): done here
    "requeued",  # returned to its queue unacked (``reason``: nack, consumer gone, rollback, ...)
    "dead_lettered",  # to the dead-letter queue or exchange, or the expiry queue (``next_id``: its new id)
    "expired",  # its time to live ran out in a queue
    "dropped",  # gone for good: purged, its queue deleted, refused without a dead-letter exchange
    "moved",  # moved to another queue by an administrator (same id)
    "forwarded",  # sent over a link to ``peer`` (``reason``: demand, redistribution, topics, durable, handed over)
    "link_received",  # taken from ``peer``'s link, before it is queued here
    "duplicate_dropped",  # taken from a link, but this node had that copy already (a resend)
    "peer_busy",  # ``peer`` had no room to store it: back in its queue here, tried again later
    "peer_stored",  # ``peer`` has it: the sender's copy is done
    "in_doubt",  # in flight to ``peer`` (several: comma-separated) when the link went: held until it answers
    "doubt_settled",  # ``peer`` answered: ``reason`` "peer has it" (done here) or "requeued" (delivered again)
]


# Who made a record: (node id, node name, vhost), the tracer's of one vhost
# (gateway.broker.tracing.Tracer). Text only, so that a record holding it is a tuple the
# garbage collector stops following (management.journeys).
RecordOrigin = tuple[str, str, str]

# The client a ``received`` or ``delivered`` record names: (protocol, connection id, remote
# address, user), each cut to MAX_FIELD; protocol, remote and user None for a session no
# client holds (a mesh link's). Made once a session (gateway.broker.tracing), shared by
# its records.
RecordClient = tuple[str | None, str, str | None, str | None]


# Longest text kept in a record field: destinations, users, connection ids and reasons
# come from clients, and a record's size must not follow what they chose.
MAX_FIELD = 200

# What a record's fields cost beyond their text, in the bytes a JourneyStore counts
# against its bound (an estimate: a flood of small records must still meet it).
FIELD_OVERHEAD = 60  # a field's dictionary entry
HEADER_OVERHEAD = 100  # a kept header's dictionary entry and string objects


def fields_size(fields: dict[str, Any]) -> int:
    """The bytes a record's ``fields`` hold, as counted against a store's bound (their texts
    are bounded: ``short``, [journeys] max_header_bytes and body_preview). The tracer's
    frequent steps count theirs as they make them, to the same sum."""
    size = FIELD_OVERHEAD * len(fields)
    for value in fields.values():
        if type(value) is str:
            size += len(value)
        elif type(value) is dict:  # a received record's headers: text (``kept_headers``)
            size += HEADER_OVERHEAD * len(value) + sum(map(len, value)) + sum(map(len, value.values()))
    return size


def short(text: str) -> str:
    """``text``, cut to MAX_FIELD characters (with a mark saying it was cut)."""
    return text if len(text) <= MAX_FIELD else text[:MAX_FIELD - 1] + "…"


# Headers a received record keeps at most, whatever [journeys] max_header_bytes allows:
# each costs a dictionary entry beyond its text.
MAX_HEADERS = 64


def kept_headers(headers: dict, max_bytes: int) -> tuple[dict[str, str], int]:
    """What a received record keeps of a message's headers for search, and the bytes that
    holds (as ``fields_size`` counts a dictionary of headers): each name and value cut to
    MAX_FIELD characters (a value that is not text as its text), in order until their
    characters reach ``max_bytes`` (the last value cut to fit), MAX_HEADERS at most.
    Headers that already fit are kept as they are, not copied: a message's headers are
    never changed in place (gateway.broker.message), and this runs for every traced one."""
    if len(headers) <= MAX_HEADERS:
        size = 0
        for name, value in headers.items():
            if type(name) is not str or type(value) is not str or len(name) > MAX_FIELD or len(value) > MAX_FIELD:
                break
            size += len(name) + len(value)
        else:
            if size <= max_bytes:
                return headers, size + HEADER_OVERHEAD * len(headers)
    kept: dict[str, str] = {}
    left = max_bytes
    for name, value in headers.items():
        if len(kept) == MAX_HEADERS or left <= 0:
            break
        name = short(name if type(name) is str else str(name))
        text = short(value if type(value) is str else str(value))
        if len(name) >= left:
            break
        text = text[:left - len(name)]
        kept[name] = text
        left -= len(name) + len(text)
    return kept, max_bytes - left + HEADER_OVERHEAD * len(kept)


def root_of(message_id: str) -> str:
    """The journey key of a message id: fan-out copies ``ID.N`` and ``ID.q`` share ID's."""
    return message_id.partition(".")[0]


class JourneyStep(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One step of one message on one node. ``seq`` orders a node's steps whatever its
    clock does; ``time`` is wall time (epoch seconds), for people and across nodes."""

    root: str
    id: str
    node: str  # the node's id
    node_name: str
    seq: int
    time: float
    step: Step
    vhost: str = DEFAULT_VHOST
    queue: str | None = None
    destination: str | None = None  # as the producer named it: /queue/X, /topic/X, /exchange/X
    exchange: str | None = None  # AMQP: the exchange it was published to ("" the default one)
    routing_key: str | None = None
    protocol: str | None = None  # "stomp", "amqp"; None: made by the node (management, a dead-letter)
    connection: str | None = None  # the connection id the ``connections`` view lists
    user: str | None = None
    remote: str | None = None  # the client's host:port
    persistent: bool = False
    priority: int = 4
    size: int = 0  # body bytes
    consumer: str | None = None  # the subscription id (STOMP) or consumer tag (AMQP), "get" for a basic.get
    ack_mode: str | None = None
    deliveries: int = 0
    redelivered: bool = False
    reason: str | None = None
    next_id: str | None = None  # dead_lettered: the id of the copy it became
    from_id: str | None = None  # received: the message this one was dead-lettered from
    latency_ms: float | None = None  # acked: since the message was received
    peer: str | None = None  # steps between nodes: the node it went to or came from
    entry: str | None = None
    visit: int = 0
    detail: str = ""
    # received: what a search looks in (management.journeys.JourneyStore.search), bounded by
    # [journeys] max_header_bytes and body_preview: the message's headers, its body's first bytes.
    headers: dict[str, str] | None = None
    body_preview: str | None = None


class JourneySummary(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One journey a search found (``journey_search``): where and when it was first recorded,
    where it was going, and how far it got on the node(s) where it matched."""

    root: str  # the journey's key: ``meshgate trace ROOT`` shows all of it
    id: str  # the id of the record that matched (a copy's ``ID.1`` when a queue matched a copy)
    node: str  # the node of its earliest record found
    node_name: str
    time: float  # its earliest record found (epoch seconds)
    destination: str = ""  # as received (/queue/X, /topic/X, /exchange/E/KEY), else the queue it was in
    last_step: Step
    last_time: float
    steps: int  # records on the node(s) where it matched
    # What it was received with (the received record's, where it matched on that node): to
    # tell hits apart.
    headers: dict[str, str] | None = None
    body_preview: str | None = None


def merge_summaries(hits: list[JourneySummary], limit: int) -> list[JourneySummary]:
    """Every node's hits as one list: one per journey (the earliest record found names it,
    the latest its last step; steps summed), newest first, ``limit`` at most."""
    by_root: dict[str, JourneySummary] = {}
    for hit in hits:
        seen = by_root.get(hit.root)
        if seen is None:
            by_root[hit.root] = msgspec.structs.replace(hit)
            continue
        first, other = (hit, seen) if hit.time < seen.time else (seen, hit)
        last = hit if hit.last_time > seen.last_time else seen
        by_root[hit.root] = msgspec.structs.replace(first, destination=first.destination or other.destination,
                                                    headers=first.headers or other.headers,
                                                    body_preview=first.body_preview or other.body_preview,
                                                    last_step=last.last_step, last_time=last.last_time,
                                                    steps=seen.steps + hit.steps)
    return sorted(by_root.values(), key=lambda hit: hit.time, reverse=True)[:limit]
