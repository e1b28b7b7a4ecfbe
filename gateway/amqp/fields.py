"""AMQP 0-9-1 field values without I/O: short and long strings, and field tables
and arrays with RabbitMQ's value types (what pika, py-amqp and kombu send), decoded
and encoded.

A client's bytes are hostile until decoded: whatever they are, the decoders return
or raise DecodeError (with a text for humans), nothing else. Tables and arrays nest
at most MAX_TABLE_DEPTH deep, so no input can exhaust the stack; a timestamp (T)
decodes to an aware UTC datetime, as pika's decoder gives one (naive, UTC), and one
past the year 9999, which no datetime holds, is refused.

decode_typed_table keeps each value's type code: an integer, float or long string
whose code is not the one the encoder picks for that Python type (a ``b``, ``B``,
``s``, ``u``, ``i``, ``L`` or a small ``l``; an ``f``; an ``S`` that is not UTF-8)
decodes to a subclass of int, float or bytes that names its code (Typed…, ``.code``),
and the encoder writes it back with that code: what a publisher sent is what its
consumers get (gateway/amqp/properties.py). They compare and hash as the plain values
do. decode_table gives plain values: method arguments (a queue's x-arguments) are
stored and serialised (msgspec) as plain ints, floats and bytes."""

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
# L is signed, as pika and py-amqp (which sends 64-bit ints as L) read and write it.
_FIXED_WIDTH = {"b": _b, "B": _B, "s": _h, "u": _H, "i": _I, "L": _q, "f": _f, "d": _d}
# Tables and arrays in a table, nested deeper than this, are refused. Clients nest two
# or three (capabilities in client_properties, x-death in headers); the limit keeps a
# decode (and what later walks the value: the JSON of STOMP's amqp-types, repr) far
# from Python's recursion limit, and a frame's worth of brackets cheap to refuse.
MAX_TABLE_DEPTH = 32
# A field-table timestamp (T) decodes to a datetime, as pika's does; past the last
# second of the year 9999 none exists, and the value is refused.
LAST_TIMESTAMP = 253402300799
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class TypedInt(int):
    """An integer whose field type is ``code`` (a class attribute of each subclass)."""

    __slots__ = ()
    code = "I"


class TypedFloat(float):
    """A float sent as ``f`` (32 bits): encoded back as one."""

    __slots__ = ()
    code = "f"


class TypedBytes(bytes):
    """A long string (``S``) that is not UTF-8: bytes, encoded back as ``S``, not ``x``."""

    __slots__ = ()
    code = "S"


# One TypedInt subclass per integer code the encoder would not pick by itself.
INT_TYPES: dict[str, type[TypedInt]] = {
    code: type(f"Int_{code}", (TypedInt,), {"__slots__": (), "code": code}) for code in "bBsuilL"}
_INT_RANGES = {"b": (-2 ** 7, 2 ** 7), "B": (0, 2 ** 8), "s": (-2 ** 15, 2 ** 15), "u": (0, 2 ** 16),
               "I": (-2 ** 31, 2 ** 31), "i": (0, 2 ** 32), "l": (-2 ** 63, 2 ** 63), "L": (-2 ** 63, 2 ** 63)}


def typed_int(code: str, value: int) -> int:
    """``value`` as a field of integer type ``code``, the way the decoder gives it (plain
    when the encoder would choose that code itself). ValueError when it does not fit."""
    low, high = _INT_RANGES[code]
    if not low <= value < high:
        raise ValueError(f"{value} does not fit field type {code!r}")
    if code == "I" or (code == "l" and not -2 ** 31 <= value < 2 ** 31):
        return int(value)
    return INT_TYPES[code](value)


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
        return _table(data, offset, 1, False)
    except FAILURES as error:
        raise DecodeError(reason(error)) from None


def decode_typed_table(data: bytes, offset: int) -> tuple[dict, int]:
    """decode_table, each value that the encoder would write with another code typed
    with its own (TypedInt, TypedFloat, TypedBytes)."""
    try:
        return _table(data, offset, 1, True)
    except FAILURES as error:
        raise DecodeError(reason(error)) from None


def _table(data: bytes, offset: int, depth: int, typed: bool) -> tuple[dict, int]:
    (size,) = _I.unpack_from(data, offset)
    offset += 4
    end = offset + size
    if end > len(data):
        raise DecodeError("a table runs past the end")
    table = {}
    while offset < end:
        key, offset = shortstr(data, offset)
        table[key], offset = _decode_value(data, offset, depth, typed)
    if offset != end:
        raise DecodeError("a table value runs past the table's end")
    return table, end


def _decode_value(data: bytes, offset: int, depth: int, typed: bool) -> tuple[Any, int]:
    """A value in a table or array ``depth`` deep (the outermost table is 1); ``typed``:
    see decode_typed_table."""
    kind = chr(data[offset])
    offset += 1
    if kind == "S":
        raw, offset = longstr(data, offset)
        try:
            return raw.decode(), offset
        except UnicodeDecodeError:
            return (TypedBytes(raw) if typed else raw), offset
    if kind == "I":  # the commonest first: pika and py-amqp send ints as I
        return _i.unpack_from(data, offset)[0], offset + 4
    if kind == "t":
        return bool(data[offset]), offset + 1
    if kind == "l":
        (value,) = _q.unpack_from(data, offset)
        return (INT_TYPES["l"](value) if typed and -2 ** 31 <= value < 2 ** 31 else value), offset + 8
    if kind == "F" or kind == "A":
        if depth >= MAX_TABLE_DEPTH:
            raise DecodeError(f"tables or arrays nested more than {MAX_TABLE_DEPTH} deep")
        return (_table if kind == "F" else _array)(data, offset, depth + 1, typed)
    if kind == "V":
        return None, offset
    fixed = _FIXED_WIDTH.get(kind)
    if fixed is not None:
        (value,) = fixed.unpack_from(data, offset)
        if not typed or kind == "d":
            return value, offset + fixed.size
        return (TypedFloat(value) if kind == "f" else INT_TYPES[kind](value)), offset + fixed.size
    if kind == "D":
        scale = data[offset]
        (value,) = _i.unpack_from(data, offset + 1)
        return Decimal(value).scaleb(-scale), offset + 5
    if kind == "T":
        (seconds,) = _Q.unpack_from(data, offset)
        if seconds > LAST_TIMESTAMP:
            raise DecodeError(f"a timestamp of {seconds} s, past the year 9999")
        return EPOCH + datetime.timedelta(seconds=seconds), offset + 8
    if kind == "x":
        return longstr(data, offset)
    raise DecodeError(f"unknown field value type {kind!r}")


def _array(data: bytes, offset: int, depth: int, typed: bool) -> tuple[list, int]:
    (size,) = _I.unpack_from(data, offset)
    offset += 4
    end = offset + size
    if end > len(data):
        raise DecodeError("an array runs past the end")
    items = []
    while offset < end:
        item, offset = _decode_value(data, offset, depth, typed)
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
        if type(value) is not int:  # a TypedInt: the code it came with (only plain ints cost no more)
            return _typed_int(value)
        if -2 ** 31 <= value < 2 ** 31:
            return b"I" + _i.pack(value)
        if -2 ** 63 <= value < 2 ** 63:
            return b"l" + _q.pack(value)
        raise ValueError(f"an integer of {value.bit_length()} bits has no AMQP field type (64 at most)")
    if isinstance(value, str):
        raw = value.encode()
        return b"S" + _I.pack(len(raw)) + raw
    if isinstance(value, (bytes, bytearray)):
        return (b"S" if isinstance(value, TypedBytes) else b"x") + _I.pack(len(value)) + bytes(value)
    if isinstance(value, float):
        return b"f" + _f.pack(value) if isinstance(value, TypedFloat) else b"d" + _d.pack(value)
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


_INT_STRUCTS = {"b": _b, "B": _B, "s": _h, "u": _H, "I": _i, "i": _I, "l": _q, "L": _q}


def _typed_int(value: int) -> bytes:
    code = getattr(value, "code", "")
    if code not in _INT_STRUCTS:
        raise ValueError(f"no AMQP field type {code!r} for an integer")
    typed_int(code, value)  # ValueError if it does not fit: never a struct.error
    return code.encode() + _INT_STRUCTS[code].pack(value)
