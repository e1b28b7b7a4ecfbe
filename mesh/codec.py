"""Sans-I/O codec of the inter-broker link: length-prefixed frames, and messages
as a compact binary record (control frame bodies: mesh.wire)."""

from __future__ import annotations

import json
import math
import struct
from itertools import chain, repeat

from gateway.broker.message import Message
from mesh.wire import MAX_MESSAGE_ID, MAX_NAME, MAX_PATH, FrameType, LinkError, encode_body
from model.names import MAX_NAME_BYTES

__all__ = ["LinkError", "LinkParser", "encode_control", "encode_frame", "encode_message", "decode_message"]

_HEAD = struct.Struct(">IB")
# text length, body length, kind, priority, expires, flags, accepted at (epoch s)
_MESSAGE = struct.Struct(">IIBBqBd")
_FRAMED_MESSAGE = struct.Struct(">IB" + _MESSAGE.format[1:])  # the frame head and the message head in one pack
_KINDS = {"queue": 0, "topic": 1}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}
_FIELDS = 5  # id, origin, address, path, target; header names and values follow
_PERSISTENT, _MAYBE_DELIVERED, _JSON_TEXT, _REDISTRIBUTED = 1, 2, 4, 8
# A message of a vhost other than "/": its name is one more text field after target (link protocol 5; a
# message of "/" is encoded exactly as before, so protocol 4 peers read it).
_VHOST = 16
# Its journey is recorded (gateway.broker.tracing): the next node traces it too. A node of an
# older release ignores the bit (no record there) and leaves it out when it forwards.
_TRACED = 32
MAX_FRAME = 64 * 1024 * 1024
_MESSAGE_FRAME = int(FrameType.MESSAGE)  # an enum member costs an attribute lookup per message


def encode_frame(kind: int, payload: bytes) -> bytes:
    return _HEAD.pack(len(payload), kind) + payload


def encode_control(kind: int, body: object = None) -> bytes:
    return encode_frame(kind, encode_body(body))


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(map(isinstance, value, repeat(str)))


def encode_message(message: Message, origin: str, path: tuple[str, ...], target: str = "",
                   redistributed: bool = False, vhost: str = "") -> bytes:
    """``origin`` is the node the message entered the mesh at (for duplicate
    detection); ``path`` the nodes it has crossed, the sender included; ``target``
    a durable subscription to put it in (scale-down) instead of routing it;
    ``redistributed`` says it is a backlog following consumers (for the counters);
    ``vhost`` the vhost it belongs to ("" for "/").

    Every string goes in one NUL-separated text block (one encode, one decode and
    split on the other side); JSON only if some string holds a NUL itself."""
    if vhost:
        return _encode_in_vhost(message, origin, path, target, redistributed, vhost)
    headers = message.headers
    if headers:
        text = "\0".join((message.id, origin, message.address, ",".join(path), target,
                          *chain.from_iterable(headers.items())))
    else:
        text = "\0".join((message.id, origin, message.address, ",".join(path), target))
    # "May have been delivered already" makes the next node's delivery say redelivered:true.
    flags = (_PERSISTENT if message.persistent else 0) | (
        _MAYBE_DELIVERED if message.deliveries or message.recovered else 0) | (
        _REDISTRIBUTED if redistributed else 0) | (_TRACED if message.traced else 0)
    if text.count("\0") != _FIELDS - 1 + 2 * len(headers):
        text = json.dumps([message.id, origin, message.address, list(path), target, headers])
        flags |= _JSON_TEXT
    return _framed(message, text.encode(), flags)


def _encode_in_vhost(message: Message, origin: str, path: tuple[str, ...], target: str, redistributed: bool,
                     vhost: str) -> bytes:
    """A message of a vhost other than "/": as for "/", the vhost a sixth text field (a
    seventh JSON element), flagged; kept apart so "/" pays nothing for it."""
    headers = message.headers
    text = "\0".join((message.id, origin, message.address, ",".join(path), target, vhost,
                      *chain.from_iterable(headers.items())))
    flags = _VHOST | (_PERSISTENT if message.persistent else 0) | (
        _MAYBE_DELIVERED if message.deliveries or message.recovered else 0) | (
        _REDISTRIBUTED if redistributed else 0) | (_TRACED if message.traced else 0)
    if text.count("\0") != _FIELDS + 2 * len(headers):
        text = json.dumps([message.id, origin, message.address, list(path), target, headers, vhost])
        flags |= _JSON_TEXT
    return _framed(message, text.encode(), flags)


def _framed(message: Message, block: bytes, flags: int) -> bytes:
    body = message.body
    head = _FRAMED_MESSAGE.pack(_MESSAGE.size + len(block) + len(body), _MESSAGE_FRAME, len(block), len(body),
                                _KINDS[message.kind], message.priority, message.expires, flags, message.created)
    return b"".join((head, block, body))


def decode_message(payload: bytes) -> tuple[Message, str, str, bool, str]:
    """The message, its origin, its target, whether it was redistributed and its
    vhost ("" for "/")."""
    try:
        tlen, blen, kind, priority, expires, flags, created = _MESSAGE.unpack_from(payload)
        start = _MESSAGE.size
        end = start + tlen
        if end + blen != len(payload) or priority > 9:
            raise ValueError("lengths do not add up")
        if not math.isfinite(created):
            raise ValueError("an accept time that is not a number")
        vhost = ""  # "/"
        if flags & (_JSON_TEXT | _VHOST):
            mid, origin, address, path, target, headers, vhost = _vhost_or_json_text(payload[start:end], flags)
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
        # A text block of at most MAX_NAME bytes holds no field past its bound (none is under
        # MAX_NAME characters, MAX_PATH far above MAX_NAME / 2 + 1 nodes): a frame with few
        # headers pays this one compare (bench/mesh_message_decode.py, docs/performance.md).
        if tlen > MAX_NAME:
            if (len(mid) > MAX_MESSAGE_ID or len(origin) > MAX_NAME or len(address) > MAX_NAME_BYTES
                    or len(target) > MAX_NAME_BYTES or len(vhost) > MAX_NAME_BYTES or len(path) > MAX_PATH):
                raise ValueError(_past_bound(mid, origin, address, target, vhost))
            for node in path:
                if len(node) > MAX_NAME:
                    raise ValueError(f"a path's node id longer than {MAX_NAME} characters")
        message = Message(mid, _KIND_NAMES[kind], address, headers, payload[end:], bool(flags & _PERSISTENT),
                          priority, expires)
    except (struct.error, ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise LinkError(f"malformed message frame: {error}") from None
    message.recovered = bool(flags & _MAYBE_DELIVERED)
    if flags & _TRACED:
        message.traced = True
    message.path = path
    message.created = created
    return message, origin, target, bool(flags & _REDISTRIBUTED), vhost


def _vhost_or_json_text(block: bytes, flags: int) -> tuple[str, str, str, tuple[str, ...], str, dict[str, str], str]:
    """The text block of a message of another vhost than "/", or one in JSON (a string
    held a NUL): (id, origin, address, path, target, headers, vhost)."""
    if flags & _JSON_TEXT:
        fields = json.loads(block)
        if not isinstance(fields, list):
            raise ValueError("a text block that is not a list")
        vhost = fields.pop() if flags & _VHOST and fields else ""
        mid, origin, address, path, target, headers = fields
        if not (isinstance(mid, str) and isinstance(origin, str) and isinstance(address, str)
                and isinstance(target, str) and _strings(path) and isinstance(headers, dict)
                and _strings(list(headers.values())) and isinstance(vhost, str)):
            raise ValueError("a field of the wrong type")
        if flags & _VHOST and not vhost:
            raise ValueError("an empty vhost name")
        return mid, origin, address, tuple(path), target, headers, vhost
    parts = block.decode().split("\0")
    count = _FIELDS + 1
    if len(parts) < count or (len(parts) - count) % 2:
        raise ValueError("bad text block")
    mid, origin, address, path_text, target, vhost = parts[:count]
    if not vhost:
        raise ValueError("an empty vhost name")
    headers = {parts[i]: parts[i + 1] for i in range(count, len(parts), 2)}
    return mid, origin, address, tuple(path_text.split(",")) if path_text else (), target, headers, vhost


def _past_bound(mid: str, origin: str, address: str, target: str, vhost: str) -> str:
    """Which field of a message is longer than a node of any release sends, in fixed text
    (the peer's value is never quoted); the path, if none of these."""
    # As a proven peer's control frames are (mesh.wire), its messages are bounded: the node
    # keeps these fields, logs them and passes them on. The message id is the broker's, the
    # origin and the path's entries node ids; the address, target (a durable subscription,
    # or a peer's topic queue: "link/" + its node id) and vhost names by the one rule
    # (model.names). A path names each node once, but when a durable subscription's backlog
    # follows its subscriber back to a node: MAX_PATH is far from both. Headers are bounded
    # by the frame alone: a client's are as long and as many as the settings of the listener
    # it sent them to allow, and those have no ceiling.
    for field, value, bound in (("a message id", mid, MAX_MESSAGE_ID), ("an origin", origin, MAX_NAME),
                                ("an address", address, MAX_NAME_BYTES), ("a target", target, MAX_NAME_BYTES),
                                ("a vhost", vhost, MAX_NAME_BYTES)):
        if len(value) > bound:
            return f"{field} longer than {bound} characters"
    return f"a path of more than {MAX_PATH} nodes"


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
