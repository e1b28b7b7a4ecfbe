"""The journal's records, sans I/O: what an add or a remove looks like on disk, and
reading a segment's bytes back into the messages it holds.

A record is a head (payload length, crc32 of type and payload, type) and a payload.
Type 1 (an add as written before messages carried their accept time) is still read;
adds are written as type 3.

Records of the default vhost ("/") are written as before vhosts were, so a data dir
of the default vhost alone is the one an older release wrote and reads. A record of
another vhost is an ADD_VHOST or REMOVE_VHOST: the vhost's name (u16 length, UTF-8)
then the ADD_TIMED or REMOVE payload (an older release skips such records). In the
store its queue key is qualified, ``VHOST_MARK + vhost + VHOST_MARK + queue key``:
vhost names hold no control characters, and no default-vhost key starts with one."""

from __future__ import annotations

import functools
import struct
import zlib
from typing import Any

from gateway.broker.message import Message, decode_headers, encode_headers

ADD = 1
REMOVE = 2
ADD_TIMED = 3  # ADD with the time the message was accepted
ADD_VHOST = 4  # ADD_TIMED of a vhost other than "/"
REMOVE_VHOST = 5  # REMOVE of a vhost other than "/"
VHOST_MARK = "\x00"
VHOST_NAME = struct.Struct("<H")
HEAD = struct.Struct("<IIB")
HEAD_SIZE = HEAD.size
ADD_FIELDS = struct.Struct("<HHBHIIBqHBQH")
ADD_TIMED_FIELDS = struct.Struct(ADD_FIELDS.format + "d")
REMOVE_FIELDS = struct.Struct("<HH")
KINDS = {"queue": 0, "topic": 1, "temp": 2}
_KIND_NAMES = {v: k for k, v in KINDS.items()}


def record_head(kind: int, payload: bytes) -> bytes:
    return HEAD.pack(len(payload), zlib.crc32(payload, kind), kind)


def vhost_key(vhost: str, queue_key: str) -> str:
    """The store's key for ``queue_key`` of a vhost other than the default one."""
    return VHOST_MARK + vhost + VHOST_MARK + queue_key


def split_key(key: str) -> tuple[str | None, str]:
    """(vhost, queue key) of a store key; vhost None for the default vhost's keys."""
    if not key.startswith(VHOST_MARK):
        return None, key
    vhost, _, queue_key = key[1:].partition(VHOST_MARK)
    return vhost, queue_key


def vhost_add_record(queue_key: str, message: Message) -> tuple[int, bytes]:
    """The type and payload recording ``message`` in ``queue_key``, a store key of a
    vhost other than the default one (whose adds are plain ADD_TIMED records)."""
    prefix, key = _record_parts(queue_key)
    return ADD_VHOST, prefix + encode_add(key, message)


def vhost_remove_record(queue_key: str, message_id: str) -> tuple[int, bytes]:
    prefix, key = _record_parts(queue_key)
    return REMOVE_VHOST, prefix + encode_remove(key, message_id)


@functools.lru_cache(maxsize=4096)
def _record_parts(queue_key: str) -> tuple[bytes, str]:
    """The encoded vhost name and the vhost's own queue key of a qualified store key:
    remembered, since every record of a persistent message of that queue asks (taking
    the key apart and encoding the name each time cost ~0.8 µs a record)."""
    vhost, key = split_key(queue_key)
    name = (vhost or "").encode()
    return VHOST_NAME.pack(len(name)) + name, key


def encode_add(queue_key: str, message: Message) -> bytes:
    """An ADD_TIMED payload: the message as it is in ``queue_key`` (its sequence set)."""
    key = queue_key.encode()
    mid = message.id.encode()
    address = message.address.encode()
    headers, henc = encode_headers(message.headers)
    body = message.body
    path = ",".join(message.path).encode() if message.path else b""
    return b"".join((
        ADD_TIMED_FIELDS.pack(len(key), len(mid), KINDS[message.kind], len(address), len(headers), len(body),
                              message.priority, message.expires, min(message.deliveries, 65535), henc,
                              message.sequence, len(path), message.created),
        key, mid, address, headers, body, path,
    ))


def encode_remove(queue_key: str, message_id: str) -> bytes:
    key = queue_key.encode()
    mid = message_id.encode()
    return REMOVE_FIELDS.pack(len(key), len(mid)) + key + mid


def replay(data: Any, size: int, number: int, live: dict) -> int:
    """Apply segment ``number``'s records (``data``, a buffer of ``size`` bytes) to
    ``live`` ((queue key, message id) -> (queue key, message)); returns where the good
    records end: a torn or corrupt record stops the replay there."""
    pos = 0
    while pos < size:
        if pos + HEAD_SIZE > size:
            break
        length, crc, kind = HEAD.unpack_from(data, pos)
        start = pos + HEAD_SIZE
        payload = data[start:start + length]
        if len(payload) < length or zlib.crc32(payload, kind) != crc:
            break
        vhost = ""
        if kind == ADD_VHOST or kind == REMOVE_VHOST:
            (vlen,) = VHOST_NAME.unpack_from(payload)
            vhost = VHOST_MARK + payload[VHOST_NAME.size:VHOST_NAME.size + vlen].decode() + VHOST_MARK
            payload = payload[VHOST_NAME.size + vlen:]
            kind = ADD_TIMED if kind == ADD_VHOST else REMOVE
        if kind == ADD_TIMED or kind == ADD:
            queue_key, message = decode_add(payload, kind == ADD_TIMED)
            queue_key = vhost + queue_key
            message.segment = number
            live[(queue_key, message.id)] = (queue_key, message)
        elif kind == REMOVE:
            klen, ilen = REMOVE_FIELDS.unpack_from(payload)
            off = REMOVE_FIELDS.size
            queue_key = vhost + payload[off:off + klen].decode()
            message_id = payload[off + klen:off + klen + ilen].decode()
            live.pop((queue_key, message_id), None)
        pos = start + length
    return pos


def decode_add(payload: bytes, timed: bool) -> tuple[str, Message]:
    if timed:
        (klen, ilen, kind, alen, hlen, blen, priority, expires, deliveries, henc, sequence, plen, created) = (
            ADD_TIMED_FIELDS.unpack_from(payload)
        )
        off = ADD_TIMED_FIELDS.size
    else:
        (klen, ilen, kind, alen, hlen, blen, priority, expires, deliveries, henc, sequence, plen) = (
            ADD_FIELDS.unpack_from(payload)
        )
        off = ADD_FIELDS.size
        created = 0.0
    queue_key = payload[off:off + klen].decode()
    off += klen
    message_id = payload[off:off + ilen].decode()
    off += ilen
    address = payload[off:off + alen].decode()
    off += alen
    headers = decode_headers(payload[off:off + hlen], henc)
    off += hlen
    body = payload[off:off + blen]
    off += blen
    message = Message(message_id, _KIND_NAMES[kind], address, headers, body, True, priority, expires, deliveries)
    message.sequence = sequence
    message.created = created
    if plen:
        message.path = tuple(payload[off:off + plen].decode().split(","))
    return queue_key, message
