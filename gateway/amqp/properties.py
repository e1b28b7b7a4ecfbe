"""AMQP content properties to the core's message headers and back, so that STOMP and
AMQP clients read each other's messages (RabbitMQ's STOMP plugin's names) and an AMQP
consumer gets exactly what its publisher set: no property it did not set, each with
its value, each ``headers`` entry with its field type (nested ones too).

| AMQP property | core (STOMP) header |
|---|---|
| content_type, content_encoding, correlation_id, reply_to, type, app_id, user_id, cluster_id | the same, with dashes |
| message_id | ``amqp-message-id`` (``message-id`` is the broker's own id) |
| timestamp | ``timestamp`` (seconds) |
| delivery_mode 2 / 1 / other n | ``persistent``: ``true`` / ``false`` / ``n`` (only 2 is persistent) |
| priority | ``priority`` as published (0-255); the message's priority is it, at most 9 |
| expiration | ``amqp-expiration`` as published, and ``expires`` (ms since the epoch), the expiry |
| headers | one header each, as text; those not UTF-8 strings keep their type in ``amqp-types`` |

A ``headers`` entry named like a header above, one the broker or a protocol sets
(``destination``, ``expires``, ``amqp-types``…) or one starting ``amqp-header-`` is
the header ``amqp-header-`` + its name, so it never says what the properties or the
broker say and still comes back. ``amqp-types`` is JSON: {header: tag}; the text of
each typed header is readable where it can be (numbers, ``true``/``false``, decimals,
timestamps in seconds, void as an empty text, tables and arrays as JSON) and base64
for bytes (``x``, and an ``S`` that is not UTF-8). Tags: ``int`` ``bool`` ``float``
``json`` (also the previous release's, read as they were), an integer code ``b B s u
i l L``, ``f``, ``D``, ``T``, ``V``, ``x``, ``S``, and for a table or array with such
values inside, ``{"F": {key: tag}}`` / ``{"A": {"index": tag}}`` for those alone.

The type codes come from the property bytes as published (from_properties' ``raw``,
decoded again with fields.decode_typed_table: the decoded ``properties`` hold plain
Python values, as method arguments do, which lose b/s/u/i/f/… to int and float).

Back (to_properties), a header mapped to a property whose text the property cannot
hold (a ``timestamp`` that is not a number, a ``content-type`` over 255 bytes) is a
``headers`` entry, as text; ``amqp-expiration`` is dropped once ``expires`` is (a
dead-lettered message no longer expires, as in RabbitMQ); a message with no
``persistent`` header that is persistent (a management send) has delivery_mode 2.
A header whose name is over 255 bytes (a STOMP sender's) is left out: a ``headers``
entry's name is a short string. ``amqp-types`` is read as hostile: no STOMP or management sender can set it, but a
mesh peer could send anything; a tag that does not fit its text leaves the text.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import datetime
import json
from decimal import Decimal
from typing import Any, Callable

from gateway.amqp import fields
from gateway.broker.exchanges import TOPIC_EXCHANGE
from gateway.broker.message import EXCHANGE_HEADER, QUEUE, ROUTING_KEY_HEADER, TYPES_HEADER, Message
from gateway.numbers import whole_number

_TO_HEADER = {
    "content_type": "content-type", "content_encoding": "content-encoding", "correlation_id": "correlation-id",
    "reply_to": "reply-to", "message_id": "amqp-message-id", "type": "type", "user_id": "user-id",
    "app_id": "app-id", "cluster_id": "cluster-id",
}
_TO_PROPERTY = {header: name for name, header in _TO_HEADER.items()}
TYPES = TYPES_HEADER
EXPIRATION = "amqp-expiration"  # the expiration property as published (``expires`` is the expiry itself)
ESCAPE = "amqp-header-"  # before a headers entry's name that is a header of the broker's or a protocol's
MAX_EXPIRATION = 2 ** 32 - 1  # ms, as RabbitMQ bounds a message's TTL
EXCHANGE, ROUTING_KEY = EXCHANGE_HEADER, ROUTING_KEY_HEADER
# Headers a protocol or the broker sets: never read as an AMQP headers entry.
_NOT_APPLICATION = frozenset({
    "destination", "message-id", "subscription", "ack", "receipt", "content-length", "expires", "persistent",
    "priority", "timestamp", TYPES, EXCHANGE, ROUTING_KEY, "transaction", "redelivered", EXPIRATION,
    *_TO_PROPERTY,
})
_DELIVERY_MODES = {"true": 2, "false": 1}
_MODE_HEADERS = {2: "true", 1: "false"}
_INTEGER_CODES = frozenset("bBsuilL")


class Publish:
    """What a basic.publish carries, in the core's terms."""

    __slots__ = ("headers", "persistent", "priority", "expires", "match")

    def __init__(self, headers: dict[str, str], persistent: bool, priority: int, expires: int, match: dict) -> None:
        self.headers = headers
        self.persistent = persistent
        self.priority = priority
        self.expires = expires
        self.match = match  # the typed headers table, for headers exchanges


def from_properties(properties: dict, now_ms: Callable[[], int], raw: tuple[int, bytes] | None = None) -> Publish:
    """``properties`` as decoded, ``raw`` the (flags, bytes) they were decoded from: the
    headers table's type codes are read from those (without, each value is taken to have
    the code the encoder gives its Python type). Raises ValueError for a property that
    makes no sense (an expiration that is not a number)."""
    if not properties:
        return Publish({}, False, 4, 0, {})
    if len(properties) == 1:  # what most publishers set: delivery_mode alone, costing no more than before
        mode = properties.get("delivery_mode")
        if mode == 1:
            return Publish({"persistent": "false"}, False, 4, 0, {})
        if mode == 2:
            return Publish({"persistent": "true"}, True, 4, 0, {})
    headers: dict[str, str] = {}
    table = properties.get("headers")
    if table is not None:
        types: dict[str, Any] = {}
        for key, value in (table if raw is None or not table else _typed_table(raw, table)).items():
            name = key if key not in _NOT_APPLICATION and not key.startswith(ESCAPE) else ESCAPE + key
            if type(value) is str:
                headers[name] = value
            else:
                headers[name], types[name] = _header_text(value)
        if types or not table:  # an empty table is a table: amqp-types says it was there
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
        headers[EXPIRATION] = expiration
        headers["expires"] = str(expires)
    mode = properties.get("delivery_mode")
    if mode is not None:
        headers["persistent"] = _MODE_HEADERS.get(mode) or str(mode)  # "true" is what a STOMP consumer reads
    priority = properties.get("priority")
    if priority is not None:
        headers["priority"] = str(priority)
    return Publish(headers, mode == 2, 4 if priority is None else min(priority, 9), expires,
                   {} if table is None else table)


def to_properties(headers: dict[str, str], persistent: bool, priority: int = 4) -> dict[str, Any]:
    """The AMQP properties of a message the core holds, whoever published it: only
    those its headers say (``priority`` is the core's, not a property unless a header says it)."""
    if not headers:
        return {"delivery_mode": 2} if persistent else {}
    if len(headers) == 1 and "persistent" in headers:  # what most publishers set
        mode = _delivery_mode(headers["persistent"])
        if mode is not None:
            return {"delivery_mode": mode}
    properties: dict[str, Any] = {}
    types = _types(headers[TYPES]) if TYPES in headers else {}
    table: dict[str, Any] = {}
    for key, value in headers.items():
        prop = _TO_PROPERTY.get(key)
        if prop is not None:
            if len(value) < 64 or len(value.encode()) <= 255:  # a short string holds it
                properties[prop] = value
                continue
        elif key == "persistent":
            mode = _delivery_mode(value)
            if mode is not None:
                properties["delivery_mode"] = mode
                continue
        elif key == "priority":
            number = whole_number(value, 255)
            if number >= 0:
                properties["priority"] = number
                continue
        elif key == "timestamp":
            number = whole_number(value, 2 ** 64 - 1)
            if number >= 0:
                properties["timestamp"] = number
                continue
        elif key == EXPIRATION:
            if "expires" in headers and whole_number(value, MAX_EXPIRATION) >= 0:
                properties["expiration"] = value
            continue
        elif key in _NOT_APPLICATION:
            continue
        name = key[len(ESCAPE):] if key.startswith(ESCAPE) else key
        if len(name) > 63 and len(name.encode()) > 255:
            continue  # a table's names are short strings: a longer STOMP header name cannot be carried
        kind = types.get(key)
        table[name] = value if kind is None else _typed(value, kind)
    if table or TYPES in headers:
        properties["headers"] = table
    if persistent and "delivery_mode" not in properties:
        properties["delivery_mode"] = 2
    return properties


def route_of(message: Message) -> tuple[str, str]:
    """The exchange and routing key a delivery of ``message`` names, whoever published it."""
    headers = message.headers
    if ROUTING_KEY in headers:
        return headers.get(EXCHANGE, ""), headers[ROUTING_KEY]
    if message.kind == QUEUE:
        return "", message.address
    return TOPIC_EXCHANGE, message.address


def _delivery_mode(text: str) -> int | None:
    mode = _DELIVERY_MODES.get(text)
    if mode is None:
        number = whole_number(text, 255)
        mode = number if number >= 0 else None
    return mode


def _typed_table(raw: tuple[int, bytes], table: dict) -> dict:
    """The headers table in ``raw`` (basic properties' flags and bytes), its values typed
    with their codes (fields.decode_typed_table); ``table``, the plain one, if it does not
    decode (it did once, into ``table``: it cannot, unless ``raw`` is not what it came from)."""
    flags, data = raw
    offset = 0
    try:
        for bit in (0x8000, 0x4000):  # content_type and content_encoding, short strings, come first
            if flags & bit:
                offset += 1 + data[offset]
        return fields.decode_typed_table(data, offset)[0]
    except (fields.DecodeError, IndexError):
        return table


# -- a headers entry as text and a tag, and back ---------------------------------------------


def _header_text(value: Any) -> tuple[str, Any]:
    """A table value that is not a str: the header's text and its tag in amqp-types."""
    if isinstance(value, bool):
        return ("true" if value else "false"), "bool"
    plain, tag = _render(value)
    if isinstance(value, (dict, list)):
        return json.dumps(plain, ensure_ascii=False), "json" if tag is None else tag
    if value is None:
        return "", "V"
    if tag is None:  # an int the encoder types by itself (I, l), a double (d)
        return (str(value), "int") if isinstance(value, int) else (repr(value), "float")
    return (plain if isinstance(plain, str) else repr(plain)), tag


def _render(value: Any) -> tuple[Any, Any]:
    """``value`` as JSON holds it, and its tag: None where JSON gives the value back as
    the decoder gives it (str, bool, an int typed I or l, a double, void, a table or
    array of those), else a code, or for a table or array the tags of what is inside."""
    if isinstance(value, str) or value is None or isinstance(value, bool):
        return value, None
    if isinstance(value, int):
        return (value, None) if type(value) is int else (int(value), value.code)  # type: ignore[attr-defined]
    if isinstance(value, float):
        return (value, None) if type(value) is float else (float(value), "f")
    if isinstance(value, dict):
        plain, inner = {}, {}
        for key, item in value.items():
            plain[key], tag = _render(item)
            if tag is not None:
                inner[key] = tag
        return plain, ({"F": inner} if inner else None)
    if isinstance(value, list):
        items, inner = [], {}
        for index, item in enumerate(value):
            rendered, tag = _render(item)
            items.append(rendered)
            if tag is not None:
                inner[str(index)] = tag
        return items, ({"A": inner} if inner else None)
    if isinstance(value, Decimal):
        return str(value), "D"
    if isinstance(value, datetime.datetime):
        return calendar.timegm(value.utctimetuple()), "T"
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode(), ("S" if isinstance(value, fields.TypedBytes) else "x")
    raise ValueError(f"no header text for {type(value).__name__}")  # the decoder gives no other type


def _types(text: str) -> dict:
    """What ``amqp-types`` says. Only the AMQP gateway writes it, but a message from a
    mesh peer could hold anything there: what is not a JSON object is ignored."""
    try:
        types = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return types if isinstance(types, dict) else {}


def _typed(text: str, tag: object) -> Any:
    """The table value a header's text and tag stand for; the text itself when the tag
    does not fit it (anything could be there), so a consumer always gets its message."""
    try:
        if tag == "int":  # I or l, as the encoder picks
            number = int(text) if len(text) <= 21 else None
            return number if number is not None and -2 ** 63 <= number < 2 ** 63 else text
        if tag == "bool":
            return text == "true"
        if tag == "float":
            return float(text)
        if tag == "V":
            return None
        if isinstance(tag, str) and tag in _SCALAR_TAGS:
            value = _scalar(text, tag)
        else:  # "json", and tables and arrays of other tags
            value = _walk(json.loads(text), None if tag == "json" else tag, 1)
        fields.encode_table({"": value})  # what a consumer will be sent must encode
        return value
    except (*fields.FAILURES, TypeError, KeyError, AttributeError, ArithmeticError, binascii.Error):
        return text


_SCALAR_TAGS = frozenset({*_INTEGER_CODES, "f", "D", "T", "x", "S"})


def _scalar(plain: Any, tag: str) -> Any:
    """A value of code ``tag`` from what _render made of it (text at the top, JSON inside)."""
    if tag in _INTEGER_CODES:
        if isinstance(plain, bool) or not isinstance(plain, (int, str)) or len(str(plain)) > 21:
            raise ValueError("not an integer")
        return fields.typed_int(tag, int(plain))
    if tag == "f":
        if isinstance(plain, bool):
            raise ValueError("not a float")
        return fields.TypedFloat(float(plain))
    if not isinstance(plain, (str, int)) or isinstance(plain, bool):
        raise ValueError("not the text of " + tag)
    if tag == "D":
        return Decimal(str(plain))
    if tag == "T":
        seconds = int(plain)
        if not 0 <= seconds <= fields.LAST_TIMESTAMP:
            raise ValueError("a timestamp out of range")
        return fields.EPOCH + datetime.timedelta(seconds=seconds)
    raw = base64.b64decode(str(plain), validate=True)
    return fields.TypedBytes(raw) if tag == "S" else raw


def _walk(plain: Any, tag: Any, depth: int) -> Any:
    """The value JSON ``plain`` and its ``tag`` (None: as JSON gives it) stand for, nested
    no deeper than a table may be."""
    if depth > fields.MAX_TABLE_DEPTH:
        raise ValueError("nested too deeply")
    if tag is None or tag == "F" or tag == "A":
        if isinstance(plain, dict) and tag != "A":
            return {key: _walk(item, None, depth + 1) for key, item in plain.items()}
        if isinstance(plain, list) and tag != "F":
            return [_walk(item, None, depth + 1) for item in plain]
        if tag is None and not isinstance(plain, (dict, list)):
            return plain
        raise ValueError("a tag that does not fit its value")
    if tag == "V":
        return None
    if isinstance(tag, str) and tag in _SCALAR_TAGS:
        return _scalar(plain, tag)
    if isinstance(tag, dict) and len(tag) == 1:
        if isinstance(plain, dict) and isinstance(tag.get("F"), dict):
            inner = tag["F"]
            return {key: _walk(item, inner.get(key), depth + 1) for key, item in plain.items()}
        if isinstance(plain, list) and isinstance(tag.get("A"), dict):
            inner = tag["A"]
            return [_walk(item, inner.get(str(index)), depth + 1) for index, item in enumerate(plain)]
    raise ValueError("a tag that does not fit its value")
