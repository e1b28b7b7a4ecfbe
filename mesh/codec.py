"""Sans-I/O codec of the inter-broker link: length-prefixed frames, control
frames as JSON, messages as a compact binary record."""

from __future__ import annotations

import json
import struct
from typing import Any

from gateway.broker.message import Message, decode_headers, encode_headers

__all__ = ["LinkError", "LinkParser", "encode_control", "encode_message", "decode_message", "FrameType"]


class FrameType:
    HELLO = 1      # who I am, and a nonce for the peer to prove the cluster password on
    AUTH = 2       # proof: HMAC(password, peer's nonce + my node id)
    REFUSE = 3     # why the link is refused; then close
    PING = 4
    PONG = 5
    DEMAND = 6     # the full set of consumer demand this node advertises to the peer
    TOPOLOGY = 7   # what this node knows of the mesh: nodes, links, partial queues
    MESSAGE = 8    # a forwarded message (custody passes on STORED)
    STORED = 9     # ids the receiver has durably stored (or already had)
    RELEASED = 10  # ids the sender has durably forgotten: the receiver may drop its duplicate markers
    MARKERS = 11   # on (re)connect: ids the receiver still remembers from this sender
    DURABLE = 12   # scale-down: make this durable subscription here; its backlog follows


_HEAD = struct.Struct(">IB")
_MESSAGE = struct.Struct(">HHBHIIBqHBH")
_KINDS = {"queue": 0, "topic": 1}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}
MAX_FRAME = 64 * 1024 * 1024


class LinkError(Exception):
    """The peer sent something that is not a valid link frame."""


def _frame(kind: int, payload: bytes) -> bytes:
    return _HEAD.pack(len(payload), kind) + payload


def encode_control(kind: int, body: Any = None) -> bytes:
    return _frame(kind, b"" if body is None else json.dumps(body, separators=(",", ":")).encode())


def decode_control(payload: bytes) -> Any:
    if not payload:
        return None
    try:
        return json.loads(payload)
    except ValueError as error:
        raise LinkError(f"malformed control frame: {error}") from None


def encode_message(message: Message, origin: str, path: tuple[str, ...], target: str = "") -> bytes:
    """``origin`` is the node the message entered the mesh at (for duplicate
    detection); ``path`` the nodes it has crossed, the sender included; ``target``
    a durable subscription to put it in (scale-down) instead of routing it."""
    mid = message.id.encode()
    org = origin.encode()
    address = message.address.encode()
    path = ",".join(path).encode()
    headers, json_headers = encode_headers(message.headers)
    body = message.body
    # Bit 1 carries "may have been delivered already" so the next node's delivery
    # says redelivered:true; bit 2 that the headers fell back to JSON.
    maybe_delivered = message.deliveries or message.recovered
    flags = (1 if message.persistent else 0) | (2 if maybe_delivered else 0) | (4 * json_headers)
    tgt = target.encode()
    head = _MESSAGE.pack(len(mid), len(org), _KINDS[message.kind], len(address), len(headers), len(body),
                         message.priority, message.expires, len(path), flags, len(tgt))
    return _frame(FrameType.MESSAGE, b"".join((head, mid, org, address, headers, path, tgt, body)))


def decode_message(payload: bytes) -> tuple[Message, str, str]:
    try:
        ilen, olen, kind, alen, hlen, blen, priority, expires, plen, flags, tlen = _MESSAGE.unpack_from(payload)
        off = _MESSAGE.size
        mid = payload[off:off + ilen].decode()
        off += ilen
        origin = payload[off:off + olen].decode()
        off += olen
        address = payload[off:off + alen].decode()
        off += alen
        headers = decode_headers(payload[off:off + hlen], 1 if flags & 4 else 0)
        off += hlen
        path = tuple(payload[off:off + plen].decode().split(",")) if plen else ()
        off += plen
        target = payload[off:off + tlen].decode()
        off += tlen
        body = payload[off:off + blen]
        if len(body) != blen or off + blen != len(payload) or priority > 9:
            raise ValueError("lengths do not add up")
        message = Message(mid, _KIND_NAMES[kind], address, headers, body, bool(flags & 1), priority, expires)
        message.recovered = bool(flags & 2)
    except (struct.error, ValueError, KeyError, UnicodeDecodeError) as error:
        raise LinkError(f"malformed message frame: {error}") from None
    message.path = path
    return message, origin, target


class LinkParser:
    """Feed bytes, get (frame type, payload) pairs."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buffer = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buf = self._buffer
        buf += data
        frames = []
        pos = 0
        end = len(buf)
        head = _HEAD.size
        while end - pos >= head:
            length, kind = _HEAD.unpack_from(buf, pos)
            if length > self.max_frame:
                raise LinkError(f"link frame of {length} bytes exceeds the limit of {self.max_frame}")
            if end - pos - head < length:
                break
            frames.append((kind, bytes(buf[pos + head:pos + head + length])))
            pos += head + length
        if pos:
            del buf[:pos]
        return frames
