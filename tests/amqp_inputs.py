"""Malformed AMQP 0-9-1 input, as the bytes a hostile client sends: the reproducers of
issue 22 and builders for more like them. Shared by the codec's unit tests, the
protocol tests and the end-to-end tests (which send them over a real socket)."""

from __future__ import annotations

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
EMPTY_TABLE = b"\x00\x00\x00\x00"


def frame(kind: int, channel: int, payload: bytes) -> bytes:
    return bytes([kind]) + channel.to_bytes(2, "big") + len(payload).to_bytes(4, "big") + payload + b"\xce"


def table(entries: bytes) -> bytes:
    """A field table's bytes: its size, then its entries as given."""
    return len(entries).to_bytes(4, "big") + entries


def start_ok(client_properties: bytes = EMPTY_TABLE, mechanism: bytes = b"PLAIN",
             response: bytes = b"\x00guest\x00guest") -> bytes:
    """connection.start-ok with ``client_properties`` as raw table bytes."""
    payload = (b"\x00\x0a\x00\x0b" + client_properties + bytes([len(mechanism)]) + mechanism
               + len(response).to_bytes(4, "big") + response + b"\x05en_US")
    return frame(1, 0, payload)


def nested_table(depth: int, kind: str = "F") -> bytes:
    """A field table holding tables (``kind`` F) or arrays (A) inside each other,
    ``depth`` deep counting itself: 1 is an empty table."""
    if kind == "F":
        entries = b""
        for _ in range(depth - 1):
            entries = b"\x01kF" + table(entries)
        return table(entries)
    items = b""
    for _ in range(depth - 2):
        items = b"A" + table(items)
    return table(b"\x01kA" + table(items)) if depth > 1 else table(b"")


def timestamp_in_client_properties(seconds: int) -> bytes:
    """connection.start-ok whose client_properties hold {"t": T seconds}."""
    return start_ok(table(b"\x01tT" + seconds.to_bytes(8, "big")))


# The reproducers, byte for byte (each after the protocol header).
TIMESTAMP_2_64 = bytes.fromhex("0100000000002f000a000b0000000b017454ffffffffffffffff05504c41494e0000000c00677565"
                               "737400677565737405656e5f5553ce")
TRUNCATED_AMQPLAIN = bytes.fromhex("01000000000024000a000b0000000008414d51504c41494e00000009054c4f47494e530000"
                                   "05656e5f5553ce")
