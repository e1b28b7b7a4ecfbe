"""AMQP 0-9-1 values and frames without I/O: a method's arguments and a content's
properties, decoded (for gateway.amqp.reader, which reads frames) and encoded, and
the frames the broker writes: a method, a content, a delivery, a heartbeat. Field
values (gateway.amqp.fields) follow RabbitMQ's table types, which is what pika,
py-amqp and kombu send. The decoders raise DecodeError and nothing else, whatever
the bytes."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

from gateway.amqp.fields import (
    FAILURES,
    DecodeError,
    decode_table,
    encode_shortstr,
    encode_table,
    longstr,
    reason,
    shortstr,
)
from gateway.amqp.spec import (
    BASIC_CLASS,
    BASIC_PROPERTIES,
    BY_NAME,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
)

_FRAME_HEAD = struct.Struct(">BHI")
_METHOD_HEAD = struct.Struct(">HH")
_CONTENT_HEAD = struct.Struct(">HHQH")
_B, _H = struct.Struct(">B"), struct.Struct(">H")
_I, _Q = struct.Struct(">I"), struct.Struct(">Q")
_HEARTBEAT = _FRAME_HEAD.pack(FRAME_HEARTBEAT, 0, 0) + bytes([FRAME_END])


# -- decoding -----------------------------------------------------------------------------


def decode_fields(fields: list[tuple[str, str]], data: bytes, offset: int) -> tuple[SimpleNamespace, int]:
    """A method's arguments from ``offset``, and where they end. Raises DecodeError only."""
    values: dict[str, Any] = {}
    bit = 0
    bits = 0
    try:
        for name, kind in fields:
            if kind == "bit":
                if bit == 0:
                    bits = data[offset]
                    offset += 1
                values[name] = bool(bits & (1 << bit))
                bit = (bit + 1) % 8
                continue
            bit = 0
            if kind == "shortstr":
                values[name], offset = shortstr(data, offset)
            elif kind == "short":
                (values[name],) = _H.unpack_from(data, offset)
                offset += 2
            elif kind == "long":
                (values[name],) = _I.unpack_from(data, offset)
                offset += 4
            elif kind in ("longlong", "timestamp"):
                (values[name],) = _Q.unpack_from(data, offset)
                offset += 8
            elif kind == "octet":
                values[name] = data[offset]
                offset += 1
            elif kind == "longstr":
                values[name], offset = longstr(data, offset)
            elif kind == "table":
                values[name], offset = decode_table(data, offset)
            else:  # pragma: no cover - the spec table has no other types
                raise DecodeError(f"unknown field type {kind}")
    except FAILURES as error:
        raise DecodeError(reason(error)) from None
    return SimpleNamespace(**values), offset


def decode_publish(data: bytes) -> tuple[SimpleNamespace, int]:
    """basic.publish, the busiest method there is, without the generic loop. Besides its
    arguments, ``route``: its exchange and routing key as they came, which basic.deliver repeats."""
    exchange, offset = shortstr(data, 6)
    routing_key, offset = shortstr(data, offset)
    bits = data[offset]
    return SimpleNamespace(reserved_1=0, exchange=exchange, routing_key=routing_key, mandatory=bool(bits & 1),
                           immediate=bool(bits & 2), route=data[6:offset]), offset + 1


_ACK = struct.Struct(">QB")


def _decode_ack(data: bytes) -> tuple[SimpleNamespace, int]:
    delivery_tag, bits = _ACK.unpack_from(data, 4)
    return SimpleNamespace(delivery_tag=delivery_tag, multiple=bool(bits & 1)), 4 + _ACK.size


BY_NAME["basic.publish"].fast_decoder = decode_publish
BY_NAME["basic.ack"].fast_decoder = _decode_ack


_PLANS: dict[int, list[tuple[str, str]]] = {}  # property flags -> the properties present, in order


def _plan(flags: int) -> list[tuple[str, str]]:
    plan = _PLANS.get(flags)
    if plan is None:
        plan = _PLANS[flags] = [(name, kind) for index, (name, kind) in enumerate(BASIC_PROPERTIES)
                                if flags & (1 << (15 - index))]
    return plan


def decode_properties(flags: int, data: bytes, offset: int) -> dict:
    """A content header's properties from ``offset`` to the end. Raises DecodeError only."""
    properties: dict[str, Any] = {}
    if not flags:
        if offset != len(data):
            raise DecodeError(f"{len(data) - offset} bytes after the properties")
        return properties
    if flags & 1:
        raise DecodeError("continued property flags (more than 15 properties) are not basic's")
    try:
        for name, kind in _plan(flags):
            if kind == "shortstr":
                properties[name], offset = shortstr(data, offset)
            elif kind == "octet":
                properties[name] = data[offset]
                offset += 1
            elif kind == "timestamp":
                (properties[name],) = _Q.unpack_from(data, offset)
                offset += 8
            else:
                properties[name], offset = decode_table(data, offset)
    except FAILURES as error:
        raise DecodeError(reason(error)) from None
    if offset != len(data):
        raise DecodeError(f"{len(data) - offset} bytes after the properties")
    return properties


# -- writing ------------------------------------------------------------------------------


def encode_fields(fields: list[tuple[str, str]], values: dict) -> bytes:
    parts = []
    bit = 0
    bits = 0
    for name, kind in fields:
        value = values.get(name)
        if kind == "bit":
            if value:
                bits |= 1 << bit
            bit += 1
            if bit == 8:
                parts.append(_B.pack(bits))
                bit = bits = 0
            continue
        if bit:
            parts.append(_B.pack(bits))
            bit = bits = 0
        if kind == "shortstr":
            parts.append(encode_shortstr(value or ""))
        elif kind == "short":
            parts.append(_H.pack(value or 0))
        elif kind == "long":
            parts.append(_I.pack(value or 0))
        elif kind in ("longlong", "timestamp"):
            parts.append(_Q.pack(value or 0))
        elif kind == "octet":
            parts.append(_B.pack(value or 0))
        elif kind == "longstr":
            raw = value.encode() if isinstance(value, str) else (value or b"")
            parts.append(_I.pack(len(raw)) + raw)
        elif kind == "table":
            parts.append(encode_table(value))
    if bit:
        parts.append(_B.pack(bits))
    return b"".join(parts)


def _frame(kind: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_HEAD.pack(kind, channel, len(payload)) + payload + b"\xce"


def encode_method(channel: int, name: str, **values: Any) -> bytes:
    spec = BY_NAME[name]
    payload = _METHOD_HEAD.pack(spec.class_id, spec.method_id) + encode_fields(spec.fields, values)
    return _frame(FRAME_METHOD, channel, payload)


def encode_properties(properties: dict) -> tuple[int, bytes]:
    flags = 0
    parts = []
    for index, (name, kind) in enumerate(BASIC_PROPERTIES):
        value = properties.get(name)
        if value is None:
            continue
        flags |= 1 << (15 - index)
        if kind == "shortstr":
            parts.append(encode_shortstr(value))
        elif kind == "octet":
            parts.append(_B.pack(value))
        elif kind == "timestamp":
            parts.append(_Q.pack(value))
        else:
            parts.append(encode_table(value))
    return flags, b"".join(parts)


def encode_content(channel: int, properties: dict | tuple[int, bytes], body: bytes, frame_max: int) -> list[bytes]:
    """The header frame and body frames of a content, each within frame_max.
    ``properties`` may come encoded already (encode_properties' answer)."""
    flags, encoded = properties if isinstance(properties, tuple) else encode_properties(properties)
    frames = [_frame(FRAME_HEADER, channel, _CONTENT_HEAD.pack(BASIC_CLASS, 0, len(body), flags) + encoded)]
    room = frame_max - 8
    if len(body) <= room:
        if body:
            frames.append(_frame(FRAME_BODY, channel, body))
        return frames
    view = memoryview(body)
    for start in range(0, len(body), room):
        frames.append(_frame(FRAME_BODY, channel, bytes(view[start:start + room])))
    return frames


# basic.deliver's delivery tag and redelivered; then the end of its frame and the head of
# the content header frame (up to its property flags); then the end of that and the body frame's head.
_DELIVERY_TAGS = struct.Struct(">QB")
_HEADER_AFTER_METHOD = struct.Struct(">BBHIHHQH")
_BODY_AFTER_HEADER = struct.Struct(">BBHI")


def encode_consumer(consumer_tag: str) -> bytes:
    """What every basic.deliver to one consumer starts with: class, method, consumer tag."""
    return _METHOD_HEAD.pack(BASIC_CLASS, 60) + encode_shortstr(consumer_tag)


def encode_route(exchange: str, routing_key: str) -> bytes:
    """basic.deliver's exchange and routing key, the same for every delivery of a message."""
    return encode_shortstr(exchange) + encode_shortstr(routing_key)


def encode_delivery(channel: int, consumer: bytes, delivery_tag: int, redelivered: bool, route: bytes,
                    properties: tuple[int, bytes], body: bytes, frame_max: int) -> bytes:
    """One delivery's frames (basic.deliver, content header, body) as one bytes object:
    ``consumer`` from encode_consumer, ``route`` from encode_route, ``properties``
    from encode_properties. A body over one frame goes the general way."""
    size = len(body)
    flags, raw = properties
    head = _FRAME_HEAD.pack(FRAME_METHOD, channel, len(consumer) + 9 + len(route))
    tags = _DELIVERY_TAGS.pack(delivery_tag, redelivered)
    if size > frame_max - 8:
        return b"".join((head, consumer, tags, route, b"\xce", *encode_content(channel, properties, body, frame_max)))
    header = _HEADER_AFTER_METHOD.pack(FRAME_END, FRAME_HEADER, channel, _CONTENT_HEAD.size + len(raw), BASIC_CLASS,
                                       0, size, flags)
    if not size:
        return b"".join((head, consumer, tags, route, header, raw, b"\xce"))
    return b"".join((head, consumer, tags, route, header, raw,
                     _BODY_AFTER_HEADER.pack(FRAME_END, FRAME_BODY, channel, size), body, b"\xce"))


def encode_heartbeat() -> bytes:
    return _HEARTBEAT
