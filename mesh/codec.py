"""Sans-I/O codec of the inter-broker link: length-prefixed frames, control
frames as JSON, messages as a compact binary record."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from itertools import chain, repeat
from typing import Any

from gateway.broker.message import Message

__all__ = ["LinkError", "LinkParser", "encode_control", "encode_frame", "encode_message", "decode_message",
           "FrameType", "check_hello", "decode_checked"]


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
    ASK = 13       # on reconnect: non-persistent messages in flight when the link went; which did you get?
    HAVE = 14      # the asked ones the receiver got (its recent window)
    LEAVING = 15   # scale-down finished: this node holds nothing of anyone's and goes for good
    FORGET = 16    # an administrator says a crashed node is gone for good; passed on to every node
    REQUEST = 17   # a management request on its way to a node (mesh.router)
    REPLY = 18     # its answer on the way back
    CHUNK = 19     # a piece of a large MESSAGE (mesh.large), to peers whose HELLO says "chunks"
    BUSY = 20      # ids the receiver did not take: its store has no room; the sender keeps them, tries later
    DEFINITIONS = 21  # mesh-wide definitions (model.definitions): all of them on link up, then each change
    VOTE = 22      # instead of a HELLO: a backup asks whether the peer still hears its primary (mesh.quorum)
    VOTED = 23     # the answer to a VOTE; then close (the connection never becomes a link)


_HEAD = struct.Struct(">IB")
# text length, body length, kind, priority, expires, flags, accepted at (epoch s)
_MESSAGE = struct.Struct(">IIBBqBd")
_FRAMED_MESSAGE = struct.Struct(">IB" + _MESSAGE.format[1:])  # the frame head and the message head in one pack
_KINDS = {"queue": 0, "topic": 1}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}
_FIELDS = 5  # id, origin, address, path, target; header names and values follow
_PERSISTENT, _MAYBE_DELIVERED, _JSON_TEXT, _REDISTRIBUTED = 1, 2, 4, 8
MAX_FRAME = 64 * 1024 * 1024


class LinkError(Exception):
    """The peer sent something that is not a valid link frame."""


def encode_frame(kind: int, payload: bytes) -> bytes:
    return _HEAD.pack(len(payload), kind) + payload


def encode_control(kind: int, body: Any = None) -> bytes:
    return encode_frame(kind, b"" if body is None else json.dumps(body, separators=(",", ":")).encode())


def decode_control(payload: bytes) -> Any:
    if not payload:
        return None
    try:
        return json.loads(payload)
    except ValueError as error:
        raise LinkError(f"malformed control frame: {error}") from None


# -- what a peer's control frames must look like -----------------------------------------------------
# A peer's JSON is checked for the types this node reads before any of it is used, so a
# malformed frame is a LinkError (the link is refused, saying why), never a TypeError
# deep in the mesh. Lists of ids are checked in C (map over isinstance): about 40 ns an id.

MAX_NAME = 200  # characters of a node id, name, nonce, user or group in a HELLO: far above a uuid or a host name


def _text(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(map(isinstance, value, repeat(str)))


def _address(value: object) -> bool:
    return isinstance(value, list) and len(value) == 2 and _text(value[0]) and isinstance(value[1], int)


def check_hello(hello: object, version: int) -> dict:
    """A peer's HELLO with the fields this node reads of the types it reads them as,
    or LinkError."""
    if not isinstance(hello, dict) or hello.get("version") != version:
        raise LinkError("not a Meshgate link peer of this protocol version")
    for key in ("node_id", "nonce"):
        if not _text(hello.get(key)) or not hello[key]:
            raise LinkError(f"a HELLO without a valid {key}")
    for key, valid in (("name", _text), ("user", _text), ("group", _text), ("started", _number),
                       ("link", _address), ("stomp", _address)):
        if key in hello and not valid(hello[key]):
            raise LinkError(f"a HELLO with an invalid {key}")
    return hello


def _demand(records: object) -> bool:
    return isinstance(records, list) and all(
        isinstance(r, dict) and isinstance(r.get("kind"), str) and isinstance(r.get("address"), str)
        and _strings(r.get("path")) and bool(r["path"]) and isinstance(r.get("selector"), (str, type(None)))
        and isinstance(r.get("consumers", 1), int) and not isinstance(r.get("consumers", 1), bool)
        for r in records)


def _durable(spec: object) -> bool:
    if not isinstance(spec, dict):
        return False
    if "link" in spec:
        return isinstance(spec["link"], str) and _strings(spec.get("patterns"))
    return isinstance(spec.get("name"), str) and isinstance(spec.get("topic"), str) and \
        isinstance(spec.get("selector"), (str, type(None)))


def _forget(request: object) -> bool:
    return isinstance(request, dict) and isinstance(request.get("node"), str) and isinstance(request.get("id"), str)


def _routed(frame: object) -> bool:
    return isinstance(frame, dict) and isinstance(frame.get("id"), str) and _strings(frame.get("route"))


_SHAPES: dict[int, tuple[Callable[[object], bool], str]] = {
    **{kind: (_strings, "a list of message ids") for kind in (
        FrameType.STORED, FrameType.BUSY, FrameType.RELEASED, FrameType.MARKERS, FrameType.ASK, FrameType.HAVE)},
    FrameType.DEMAND: (_demand, "a list of demand records (kind, address, path, selector, consumers)"),
    FrameType.DURABLE: (_durable, "a durable subscription (name, topic, selector) or a link binding"),
    FrameType.FORGET: (_forget, "a node and a request id"),
    FrameType.REQUEST: (_routed, "a request id and a route"),
    FrameType.REPLY: (_routed, "a request id and a route"),
    FrameType.DEFINITIONS: (lambda body: isinstance(body, list), "a list of definitions"),
}


def decode_checked(kind: int, payload: bytes) -> Any:
    """A control frame's JSON, checked against the shape its frame type has."""
    body = decode_control(payload)
    shape = _SHAPES.get(kind)
    if shape is not None and not shape[0](body):
        raise LinkError(f"malformed link frame of type {kind}: expected {shape[1]}")
    return body


def encode_message(message: Message, origin: str, path: tuple[str, ...], target: str = "",
                   redistributed: bool = False) -> bytes:
    """``origin`` is the node the message entered the mesh at (for duplicate
    detection); ``path`` the nodes it has crossed, the sender included; ``target``
    a durable subscription to put it in (scale-down) instead of routing it;
    ``redistributed`` says it is a backlog following consumers (for the counters).

    Every string goes in one NUL-separated text block (one encode, one decode and
    split on the other side); JSON only if some string holds a NUL itself."""
    headers = message.headers
    if headers:
        text = "\0".join((message.id, origin, message.address, ",".join(path), target,
                          *chain.from_iterable(headers.items())))
    else:
        text = "\0".join((message.id, origin, message.address, ",".join(path), target))
    # "May have been delivered already" makes the next node's delivery say redelivered:true.
    flags = (_PERSISTENT if message.persistent else 0) | (
        _MAYBE_DELIVERED if message.deliveries or message.recovered else 0) | (_REDISTRIBUTED if redistributed else 0)
    if text.count("\0") != _FIELDS - 1 + 2 * len(headers):
        text = json.dumps([message.id, origin, message.address, list(path), target, headers])
        flags |= _JSON_TEXT
    block = text.encode()
    body = message.body
    head = _FRAMED_MESSAGE.pack(_MESSAGE.size + len(block) + len(body), FrameType.MESSAGE, len(block), len(body),
                                _KINDS[message.kind], message.priority, message.expires, flags, message.created)
    return b"".join((head, block, body))


def decode_message(payload: bytes) -> tuple[Message, str, str, bool]:
    """The message, its origin, its target and whether it was redistributed."""
    try:
        tlen, blen, kind, priority, expires, flags, created = _MESSAGE.unpack_from(payload)
        start = _MESSAGE.size
        end = start + tlen
        if end + blen != len(payload) or priority > 9:
            raise ValueError("lengths do not add up")
        if not math.isfinite(created):
            raise ValueError("an accept time that is not a number")
        if flags & _JSON_TEXT:
            mid, origin, address, path, target, headers = json.loads(payload[start:end])
            if not (isinstance(mid, str) and isinstance(origin, str) and isinstance(address, str)
                    and isinstance(target, str) and _strings(path) and isinstance(headers, dict)
                    and _strings(list(headers.values()))):
                raise ValueError("a field of the wrong type")
            path = tuple(path)
        else:
            parts = payload[start:end].decode().split("\0")
            if len(parts) == _FIELDS:
                mid, origin, address, path_text, target = parts
                headers = {}
            elif len(parts) < _FIELDS or (len(parts) - _FIELDS) % 2:
                raise ValueError("bad text block")
            else:
                mid, origin, address, path_text, target = parts[:_FIELDS]
                headers = {parts[i]: parts[i + 1] for i in range(_FIELDS, len(parts), 2)}
            path = tuple(path_text.split(",")) if path_text else ()
        message = Message(mid, _KIND_NAMES[kind], address, headers, payload[end:], bool(flags & _PERSISTENT),
                          priority, expires)
    except (struct.error, ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise LinkError(f"malformed message frame: {error}") from None
    message.recovered = bool(flags & _MAYBE_DELIVERED)
    message.path = path
    message.created = created
    return message, origin, target, bool(flags & _REDISTRIBUTED)


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
        with memoryview(buf) as view:  # slices of a view copy once, where slices of the bytearray copy twice
            while end - pos >= head:
                length, kind = _HEAD.unpack_from(buf, pos)
                if length > self.max_frame:
                    raise LinkError(f"link frame of {length} bytes exceeds the limit of {self.max_frame}")
                if end - pos - head < length:
                    break
                frames.append((kind, view[pos + head:pos + head + length].tobytes()))
                pos += head + length
        if pos:
            del buf[:pos]
        return frames
