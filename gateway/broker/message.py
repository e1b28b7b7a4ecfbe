"""A message as the broker core holds it."""

from __future__ import annotations

import json
from typing import Final

# Final: mesh.wire's DemandKind is checked against them (a demand record's kind).
QUEUE: Final = "queue"
TOPIC: Final = "topic"
DEFAULT_PRIORITY = 4
# Where a message was published when it went through an exchange (AMQP); a queue
# copy made by a fan-out carries them, as its consumers are told them.
EXCHANGE_HEADER, ROUTING_KEY_HEADER = "amqp-exchange", "amqp-routing-key"
# JSON {name: tag}: the AMQP field types of header values that were not UTF-8 strings
# when published ("int", "bool", "float", "json", a type code, or the tags inside a
# table or array: gateway/amqp/properties.py). Only the AMQP gateway writes it; a STOMP
# or management sender cannot.
TYPES_HEADER = "amqp-types"
# What a protocol writes on a delivery (a STOMP MESSAGE's own headers): never taken from
# the message's headers, whoever published it.
DELIVERY_HEADERS = frozenset({"destination", "message-id", "content-length", "subscription", "ack", "redelivered"})
# Headers no sender sets (a STOMP SEND, a management send): the delivery's own and those
# the AMQP gateway alone writes.
NOT_FROM_SENDERS = DELIVERY_HEADERS | {TYPES_HEADER, EXCHANGE_HEADER, ROUTING_KEY_HEADER}
# What a queued message costs beyond its body and headers (object, dict, deque
# slot); counted so a flood of tiny messages still meets the memory limit.
MESSAGE_OVERHEAD = 400


class SelectorHeaders:
    """What a selector reads of a message: its headers, and the two a protocol
    carries beside them — ``message-id`` (JMSMessageID) and ``destination``
    (JMSDestination, as ``/queue/NAME`` or ``/topic/NAME``)."""

    __slots__ = ("_message",)

    def __init__(self, message: Message) -> None:
        self._message = message

    def get(self, key: str, default: str | None = None) -> str | None:
        message = self._message
        if key == "message-id":
            return message.id
        if key == "destination":
            return f"/{message.kind}/{message.address}"
        return message.headers.get(key, default)


class Message:
    """One message in one queue. Fan-out makes per-queue copies that share the
    immutable parts (headers, body, encodings) and keep their own delivery count."""

    __slots__ = (
        "id",
        "kind",
        "address",
        "headers",
        "body",
        "persistent",
        "priority",
        "expires",
        "deliveries",
        "size",
        "encoded",
        "segment",
        "sequence",
        "position",
        "recovered",
        "path",
        "created",
        "traced",
    )

    def __init__(
        self,
        message_id: str,
        kind: str,
        address: str,
        headers: dict[str, str],
        body: bytes,
        persistent: bool = False,
        priority: int = DEFAULT_PRIORITY,
        expires: int = 0,
        deliveries: int = 0,
    ) -> None:
        self.id = message_id
        self.kind = kind
        self.address = address
        self.headers = headers
        self.body = body
        self.persistent = persistent
        self.priority = priority
        self.expires = expires
        self.deliveries = deliveries
        self.size = len(body) + MESSAGE_OVERHEAD
        # Protocol adapters cache their serialised header block here, keyed by
        # whatever they need (e.g. STOMP version); shared between fan-out copies.
        self.encoded: dict = {}
        # Where the store holds it, and its place in the store's enqueue order.
        self.segment = 0
        self.sequence = 0
        # Its place in the enqueue order of the queue it was last put in (Queue.put): where a
        # requeue returns it. 0 until then: a message never queued would go back to the head.
        self.position = 0
        self.recovered = False
        # Ids of the mesh nodes the message has crossed, so it never goes back to one.
        self.path: tuple[str, ...] = ()
        # When a node accepted it from its producer (epoch seconds; 0 = unknown),
        # for the end-to-end latency histograms. It travels with the message.
        self.created = 0.0
        # Whether its journey is recorded (gateway.broker.tracing): a slot, not a subclass
        # (a message changing class makes every specialised attribute access it meets
        # miss: bench/journeys_cost.py measured 60 µs a swap, against 5 ns for this store).
        self.traced = False

    def copy(self) -> Message:
        twin = Message.__new__(Message)
        twin.id = self.id
        twin.kind = self.kind
        twin.address = self.address
        twin.headers = self.headers
        twin.body = self.body
        twin.persistent = self.persistent
        twin.priority = self.priority
        twin.expires = self.expires
        twin.deliveries = 0
        twin.size = self.size
        twin.encoded = self.encoded
        twin.segment = 0
        twin.sequence = 0
        twin.position = 0
        twin.recovered = False
        twin.path = self.path
        twin.created = self.created
        twin.traced = self.traced  # a traced message's copies are traced too
        return twin

    @property
    def redelivered(self) -> bool:
        """True once a delivery may have happened before the current one."""
        return self.deliveries > 1 or self.recovered

    def __repr__(self) -> str:
        return f"<Message {self.id} {self.kind}:{self.address} p={self.priority} d={self.deliveries}>"


def encode_headers(headers: dict[str, str]) -> tuple[bytes, int]:
    """Headers as NUL-separated text (fast both ways), or JSON when a header
    itself holds a NUL; the second value says which (0 text, 1 JSON)."""
    if not headers:
        return b"", 0
    text = "\0".join([f"{k}\0{v}" for k, v in headers.items()])
    if text.count("\0") == 2 * len(headers) - 1:
        return text.encode(), 0
    return json.dumps(headers).encode(), 1


def decode_headers(blob: bytes, encoding: int) -> dict[str, str]:
    if not blob:
        return {}
    if encoding == 1:
        return json.loads(blob)
    parts = blob.decode().split("\0")
    return dict(zip(parts[::2], parts[1::2], strict=True))
