"""AMQP content properties with every basic property and a headers table holding every
field-table value type (t b B s u I i l f d D S x A T F V), nested in tables and arrays,
as the raw bytes a publisher sends: what the property round-trip tests publish, over
the codec (unit) and over a socket (end-to-end), and compare byte for byte."""

from __future__ import annotations

import struct

from tests.amqp_inputs import table

# Every value type once, each as its code and its encoded value (after the code).
SCALARS: list[tuple[str, bytes]] = [
    ("t", b"\x01"), ("b", struct.pack(">b", -5)), ("B", b"\xfa"), ("s", struct.pack(">h", -300)),
    ("u", struct.pack(">H", 60000)), ("I", struct.pack(">i", -70000)), ("i", struct.pack(">I", 4000000000)),
    ("l", struct.pack(">q", 7)), ("f", struct.pack(">f", 0.1)), ("d", struct.pack(">d", -2.5)),
    ("D", b"\x02" + struct.pack(">i", -150)), ("S", b"\x00\x00\x00\x06h\xc3\xa9llo"),
    ("S", b"\x00\x00\x00\x02\xff\xfe"),  # a long string that is not UTF-8
    ("x", b"\x00\x00\x00\x03\x00\x01\xff"), ("T", struct.pack(">Q", 1700000000)), ("V", b""),
]


def _entry(key: str, code: str, value: bytes) -> bytes:
    return bytes([len(key)]) + key.encode() + code.encode() + value


def _array(items: list[tuple[str, bytes]]) -> bytes:
    body = b"".join(code.encode() + value for code, value in items)
    return struct.pack(">I", len(body)) + body


def every_type_table() -> bytes:
    """A headers table with each value type at the top, in a nested table, in an array,
    and in an array in a table in an array; and entries named like the broker's headers."""
    flat = b"".join(_entry(f"{code}{index}", code, value) for index, (code, value) in enumerate(SCALARS))
    nested = table(flat + _entry("array", "A", _array(SCALARS)))
    deep = _array([("F", table(_entry("inner", "A", _array(SCALARS)))), ("A", _array([])), ("F", table(b""))])
    named = b"".join(_entry(key, "S", b"\x00\x00\x00\x01v") for key in (
        "content-type", "expires", "persistent", "amqp-types", "amqp-header-x", "destination", "priority"))
    return table(flat + _entry("nested", "F", nested) + _entry("deep", "A", deep) + named
                 + _entry("celery", "A", _array([("V", b""), ("I", struct.pack(">i", 30))])))


def _short(text: str) -> bytes:
    return bytes([len(text.encode())]) + text.encode()


def every_property(headers: bytes | None = None, delivery_mode: int = 1) -> tuple[int, bytes]:
    """(property flags, property bytes) with all 14 basic properties set (priority 200)."""
    headers = every_type_table() if headers is None else headers
    raw = (_short("application/json") + _short("gzip") + headers + bytes([delivery_mode]) + b"\xc8" + _short("corr")
           + _short("reply.here") + _short("60000") + _short("msg-1") + struct.pack(">Q", 1700000001)
           + _short("kind") + _short("guest") + _short("app") + _short("cluster"))
    return 0xFFFC, raw


# Each property alone: (flag, its bytes), for "absent stays absent".
ALONE: dict[str, tuple[int, bytes]] = {
    "content_type": (1 << 15, _short("text/plain")), "content_encoding": (1 << 14, _short("utf-8")),
    "headers": (1 << 13, table(b"")), "delivery_mode": (1 << 12, b"\x01"), "priority": (1 << 11, b"\x00"),
    "correlation_id": (1 << 10, _short("c")), "reply_to": (1 << 9, _short("r")),
    "expiration": (1 << 8, _short("0")), "message_id": (1 << 7, _short("m")),
    "timestamp": (1 << 6, struct.pack(">Q", 2 ** 64 - 1)), "type": (1 << 5, _short("t")),
    "user_id": (1 << 4, _short("guest")), "app_id": (1 << 3, _short("a")), "cluster_id": (1 << 2, _short("k")),
}


def typed_values():
    """A hypothesis strategy: table values of every type the decoder gives, typed codes
    included (a b, B, s, u, i, small l or L int, an f float, an S that is not UTF-8);
    no NaN, whose payload bits do not come back (the NaN and its code do)."""
    import datetime
    from decimal import Decimal

    from hypothesis import strategies as st

    from gateway.amqp import fields

    ranges = {"b": (-2 ** 7, 2 ** 7 - 1), "B": (0, 2 ** 8 - 1), "s": (-2 ** 15, 2 ** 15 - 1), "u": (0, 2 ** 16 - 1),
              "i": (0, 2 ** 32 - 1), "l": (-2 ** 31, 2 ** 31 - 1), "L": (-2 ** 63, 2 ** 63 - 1)}
    typed_ints = st.sampled_from(sorted(ranges)).flatmap(
        lambda code: st.integers(*ranges[code]).map(lambda value: fields.typed_int(code, value)))
    singles = st.floats(width=32, allow_nan=False).map(fields.TypedFloat)  # a NaN: see the unit test
    not_utf8 = st.binary(min_size=1, max_size=10).filter(_not_utf8).map(fields.TypedBytes)
    timestamps = st.integers(0, fields.LAST_TIMESTAMP).map(lambda s: fields.EPOCH + datetime.timedelta(seconds=s))
    decimals = st.builds(lambda v, s: Decimal(v).scaleb(-s), st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(0, 40))
    scalars = (st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1) | typed_ints | st.text(max_size=12)
               | st.binary(max_size=12) | not_utf8 | st.floats(allow_nan=False) | singles | st.none() | timestamps
               | decimals)
    keys = st.text(max_size=20) | st.sampled_from(["expires", "persistent", "amqp-types", "amqp-header-x", ""])
    return st.dictionaries(keys, st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=16), max_size=6)


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return True
    return False
