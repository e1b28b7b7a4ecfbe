"""AMQP content properties to the core's message headers and back, as RabbitMQ's
STOMP plugin maps them, so that STOMP and AMQP clients read each other's messages:

| AMQP property | STOMP header |
|---|---|
| content_type, content_encoding, correlation_id, reply_to, type, app_id | the same, with dashes |
| message_id | ``amqp-message-id`` (``message-id`` is the broker's own id) |
| user_id | ``user-id`` |
| timestamp | ``timestamp`` (seconds) |
| expiration (ms from now) | ``expires`` (ms since the epoch), as the message's expiry |
| delivery_mode 2 / priority | ``persistent:true`` / the priority (0-9) |
| headers | one header each; values that are not strings keep their AMQP type in ``amqp-types`` |

A ``headers`` entry named like a header of the table above or one the broker sets
(``content-length``, ``destination``, ``amqp-types``, …) is not copied: those say what
the properties and the broker say, and never go back into an AMQP ``headers`` table.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from gateway.broker.exchanges import TOPIC_EXCHANGE
from gateway.broker.message import EXCHANGE_HEADER, QUEUE, ROUTING_KEY_HEADER, TYPES_HEADER, Message
from gateway.numbers import whole_number

_TO_HEADER = {
    "content_type": "content-type", "content_encoding": "content-encoding", "correlation_id": "correlation-id",
    "reply_to": "reply-to", "message_id": "amqp-message-id", "type": "type", "user_id": "user-id",
    "app_id": "app-id",
}
_TO_PROPERTY = {header: name for name, header in _TO_HEADER.items()}
TYPES = TYPES_HEADER
MAX_EXPIRATION = 2 ** 32 - 1  # ms, as RabbitMQ bounds a message's TTL
EXCHANGE, ROUTING_KEY = EXCHANGE_HEADER, ROUTING_KEY_HEADER
# Headers a protocol or the broker sets, never copied into an AMQP headers table.
_NOT_APPLICATION = frozenset({
    "destination", "message-id", "subscription", "ack", "receipt", "content-length", "expires", "persistent",
    "priority", "timestamp", TYPES, EXCHANGE, ROUTING_KEY, "transaction", "redelivered",
    *_TO_PROPERTY,
})


class Publish:
    """What a basic.publish carries, in the core's terms."""

    __slots__ = ("headers", "persistent", "priority", "expires", "match")

    def __init__(self, headers: dict[str, str], persistent: bool, priority: int, expires: int, match: dict) -> None:
        self.headers = headers
        self.persistent = persistent
        self.priority = priority
        self.expires = expires
        self.match = match  # the typed headers table, for headers exchanges


def from_properties(properties: dict, now_ms: Callable[[], int]) -> Publish:
    """Raises ValueError for a property that makes no sense (an expiration that is not a number)."""
    if not properties or (len(properties) == 1 and "delivery_mode" in properties):  # what most publishers set
        if properties.get("delivery_mode") == 2:
            return Publish({"persistent": "true"}, True, 4, 0, {})
        return Publish({}, False, 4, 0, {})
    headers: dict[str, str] = {}
    table = properties.get("headers") or {}
    if table:
        types = {}
        entries = table if _NOT_APPLICATION.isdisjoint(table) else {
            key: value for key, value in table.items() if key not in _NOT_APPLICATION}
        for key, value in entries.items():
            if isinstance(value, str):
                headers[key] = value
            elif isinstance(value, bool):
                headers[key], types[key] = ("true" if value else "false"), "bool"
            elif isinstance(value, int):
                headers[key], types[key] = str(value), "int"
            elif isinstance(value, float):
                headers[key], types[key] = repr(value), "float"
            else:
                headers[key], types[key] = json.dumps(_plain(value)), "json"
        if types:
            headers[TYPES] = json.dumps(types)
    for name, header in _TO_HEADER.items():
        value = properties.get(name)
        if value is not None:
            headers[header] = value
    timestamp = properties.get("timestamp")
    if timestamp is not None:
        headers["timestamp"] = str(timestamp)
    expires = 0
    expiration = properties.get("expiration")
    if expiration is not None:
        milliseconds = whole_number(expiration, MAX_EXPIRATION)
        if milliseconds < 0:
            raise ValueError(f"expiration {expiration[:40]!r} is not a whole number of milliseconds from 0 to "
                             f"{MAX_EXPIRATION}")
        expires = now_ms() + milliseconds
        headers["expires"] = str(expires)
    persistent = properties.get("delivery_mode") == 2
    if persistent:
        headers["persistent"] = "true"  # what a STOMP consumer reads
    priority = properties.get("priority")
    priority = 4 if priority is None else min(priority, 9)
    if "priority" in properties:
        headers["priority"] = str(priority)
    return Publish(headers, persistent, priority, expires, table)


def to_properties(headers: dict[str, str], persistent: bool, priority: int) -> dict[str, Any]:
    """The AMQP properties of a message the core holds, whoever published it."""
    properties: dict[str, Any] = {"delivery_mode": 2 if persistent else 1, "priority": priority}
    if not headers:
        return properties
    types = _types(headers[TYPES]) if TYPES in headers else {}
    table = {}
    for key, value in headers.items():
        prop = _TO_PROPERTY.get(key)
        if prop is not None:
            properties[prop] = value
        elif key == "timestamp":
            seconds = whole_number(value, 2 ** 63 - 1)
            if seconds >= 0:
                properties["timestamp"] = seconds
        elif key not in _NOT_APPLICATION:
            kind = types.get(key)
            table[key] = value if kind is None else _typed(value, kind)
    if table:
        properties["headers"] = table
    return properties


def route_of(message: Message) -> tuple[str, str]:
    """The exchange and routing key a delivery of ``message`` names, whoever published it."""
    headers = message.headers
    if ROUTING_KEY in headers:
        return headers.get(EXCHANGE, ""), headers[ROUTING_KEY]
    if message.kind == QUEUE:
        return "", message.address
    return TOPIC_EXCHANGE, message.address


def _types(text: str) -> dict:
    """What ``amqp-types`` says. Only the AMQP gateway writes it, but a message from a
    mesh peer or the console could hold anything there: what is not a JSON object is ignored."""
    try:
        types = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return types if isinstance(types, dict) else {}


def _typed(value: str, kind: object) -> Any:
    try:
        if kind == "int":
            return int(value)
        if kind == "bool":
            return value == "true"
        if kind == "float":
            return float(value)
        return json.loads(value)
    except (ValueError, RecursionError):  # not what amqp-types says it is: the text as it is
        return value


def _plain(value: Any) -> Any:
    """A table value JSON can hold (decimals and times as text, bytes as latin-1)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
