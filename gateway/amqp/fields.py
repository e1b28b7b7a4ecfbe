"""AMQP 0-9-1 field values without I/O: short and long strings, and field tables
and arrays with RabbitMQ's value types (what pika, py-amqp and kombu send), decoded
and encoded.

A client's bytes are hostile until decoded: whatever they are, the decoders return
or raise DecodeError (with a text for humans), nothing else. Tables and arrays nest
at most MAX_TABLE_DEPTH deep, so no input can exhaust the stack; a timestamp (T)
decodes to an aware UTC datetime, as pika's decoder gives one (naive, UTC), and one
past the year 9999, which no datetime holds, is refused."""

from __future__ import annotations

import calendar
import datetime
import struct
from decimal import Decimal
from typing import Any

_B, _b = struct.Struct(">B"), struct.Struct(">b")
_H, _h = struct.Struct(">H"), struct.Struct(">h")
_I, _i = struct.Struct(">I"), struct.Struct(">i")
_Q, _q = struct.Struct(">Q"), struct.Struct(">q")
_f, _d = struct.Struct(">f"), struct.Struct(">d")
# Field-table value types of a fixed width, by type code (RabbitMQ's table of them)
_FIXED_WIDTH = {"b": _b, "B": _B, "s": _h, "u": _H, "i": _I, "L": _Q, "f": _f, "d": _d}
# Tables and arrays in a table, nested deeper than this, are refused. Clients nest two
# or three (capabilities in client_properties, x-death in headers); the limit keeps a
# decode (and what later walks the value: the JSON of STOMP's amqp-types, repr) far
# from Python's recursion limit, and a frame's worth of brackets cheap to refuse.
MAX_TABLE_DEPTH = 32
# A field-table timestamp (T) decodes to a datetime, as pika's does; past the last
# second of the year 9999 none exists, and the value is refused.
_LAST_TIMESTAMP = 253402300799
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class DecodeError(ValueError):
    """Bytes that do not decode as what they should be: the one error the decoders
    raise. Its text is for humans (it ends up in a connection.close)."""


# What Python raises on bytes that are not what they claim to be, all turned into DecodeError.
FAILURES = (struct.error, IndexError, UnicodeDecodeError, OverflowError, OSError, RecursionError, ValueError)


def reason(error: Exception) -> str:
    """A DecodeError's own text, or what the Python error means (never its text, which
    names buffers and offsets, or its type: the client reads this)."""
    if isinstance(error, DecodeError):
        return str(error)
    if isinstance(error, (struct.error, IndexError)):
        return "a value runs past the end"
    if isinstance(error, UnicodeDecodeError):
        return "a short string is not UTF-8"
    if isinstance(error, RecursionError):
        return "values nested too deeply"
    return "a value out of range"


def shortstr(data: bytes, offset: int) -> tuple[str, int]:
    size = data[offset]
    end = offset + 1 + size
    if end > len(data):
        raise DecodeError("a short string runs past the end")
    return data[offset + 1:end].decode(), end


def longstr(data: bytes, offset: int) -> tuple[bytes, int]:
    (size,) = _I.unpack_from(data, offset)
    end = offset + 4 + size
    if end > len(data):
        raise DecodeError("a long string runs past the end")
    return data[offset + 4:end], end


def decode_table(data: bytes, offset: int) -> tuple[dict, int]:
    """A field table at ``offset`` (its 4-byte size first), and where it ends.
    Raises DecodeError, and only that, whatever the bytes."""
    try:
        return _table(data, offset, 1)
    except FAILURES as error:
        raise DecodeError(reason(error)) from None


def _table(data: bytes, offset: int, depth: int) -> tuple[dict, int]:
    (size,) = _I.unpack_from(data, offset)
    offset += 4
    end = offset + size
    if end > len(data):
        raise DecodeError("a table runs past the end")
    table = {}
    while offset < end:
        key, offset = shortstr(data, offset)
        table[key], offset = _decode_value(data, offset, depth)
    if offset != end:
        raise DecodeError("a table value runs past the table's end")
    return table, end


def _decode_value(data: bytes, offset: int, depth: int) -> tuple[Any, int]:
    """A value in a table or array ``depth`` deep (the outermost table is 1)."""
    kind = chr(data[offset])
    offset += 1
    if kind == "S":
        raw, offset = longstr(data, offset)
        try:
            return raw.decode(), offset
        except UnicodeDecodeError:
            return raw, offset
    if kind == "I":  # the commonest first: pika and py-amqp send ints as I
        return _i.unpack_from(data, offset)[0], offset + 4
    if kind == "t":
        return bool(data[offset]), offset + 1
    if kind == "l":
        return _q.unpack_from(data, offset)[0], offset + 8
    if kind == "F" or kind == "A":
        if depth >= MAX_TABLE_DEPTH:
            raise DecodeError(f"tables or arrays nested more than {MAX_TABLE_DEPTH} deep")
        return _table(data, offset, depth + 1) if kind == "F" else _array(data, offset, depth + 1)
    if kind == "V":
        return None, offset
    fixed = _FIXED_WIDTH.get(kind)
    if fixed is not None:
        return fixed.unpack_from(data, offset)[0], offset + fixed.size
    if kind == "D":
        scale = data[offset]
        (value,) = _i.unpack_from(data, offset + 1)
        return Decimal(value).scaleb(-scale), offset + 5
    if kind == "T":
        (seconds,) = _Q.unpack_from(data, offset)
        if seconds > _LAST_TIMESTAMP:
            raise DecodeError(f"a timestamp of {seconds} s, past the year 9999")
        return _EPOCH + datetime.timedelta(seconds=seconds), offset + 8
    if kind == "x":
        return longstr(data, offset)
    raise DecodeError(f"unknown field value type {kind!r}")


def _array(data: bytes, offset: int, depth: int) -> tuple[list, int]:
    (size,) = _I.unpack_from(data, offset)
    offset += 4
    end = offset + size
    if end > len(data):
        raise DecodeError("an array runs past the end")
    items = []
    while offset < end:
        item, offset = _decode_value(data, offset, depth)
        items.append(item)
    if offset != end:
        raise DecodeError("an array value runs past the array's end")
    return items, end


# -- writing -------------------------------------------------------------------------------


def encode_shortstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    if len(raw) > 255:
        raise ValueError(f"a short string of {len(raw)} bytes (at most 255)")
    return _B.pack(len(raw)) + raw


def encode_table(table: dict | None) -> bytes:
    if not table:
        return b"\x00\x00\x00\x00"
    parts = []
    for key, value in table.items():
        parts.append(encode_shortstr(key))
        parts.append(_encode_value(value))
    body = b"".join(parts)
    return _I.pack(len(body)) + body


def _encode_value(value: Any) -> bytes:
    if isinstance(value, bool):
        return b"t" + _B.pack(value)
    if isinstance(value, int):
        if -2 ** 31 <= value < 2 ** 31:
            return b"I" + _i.pack(value)
        if -2 ** 63 <= value < 2 ** 63:
            return b"l" + _q.pack(value)
        raise ValueError(f"an integer of {value.bit_length()} bits has no AMQP field type (64 at most)")
    if isinstance(value, str):
        raw = value.encode()
        return b"S" + _I.pack(len(raw)) + raw
    if isinstance(value, (bytes, bytearray)):
        return b"x" + _I.pack(len(value)) + bytes(value)
    if isinstance(value, float):
        return b"d" + _d.pack(value)
    if isinstance(value, dict):
        return b"F" + encode_table(value)
    if isinstance(value, (list, tuple)):
        body = b"".join(_encode_value(item) for item in value)
        return b"A" + _I.pack(len(body)) + body
    if value is None:
        return b"V"
    if isinstance(value, Decimal):
        sign, digits, exponent = value.as_tuple()
        scale = max(0, -int(exponent))
        return b"D" + _B.pack(scale) + _i.pack(int(value.scaleb(scale)))
    if isinstance(value, datetime.datetime):
        seconds = calendar.timegm(value.utctimetuple())  # a naive datetime is UTC, as pika takes it
        if seconds < 0:
            raise ValueError(f"a timestamp before 1970 ({value.isoformat()}) has no AMQP field type")
        return b"T" + _Q.pack(seconds)
    raise ValueError(f"no AMQP field type for {type(value).__name__}")
