"""The replication link's wire format: frames of ``<u32 payload length><u8
kind>payload``; control payloads are JSON, data payloads packed binary. No
Twisted here."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import struct

log = logging.getLogger("meshgate.replication")  # one logger for the whole link, both sides


CHALLENGE, AUTH, WELCOME, REFUSE = 1, 2, 3, 4  # handshake (JSON)
BEGIN, FILE, END = 5, 6, 7  # the catch-up copy
WRITE, SEGMENT, DELETE, CATALOG = 8, 9, 10, 11  # the stream
PING, ACK, PONG = 12, 13, 14  # heartbeats and durability
TAKEOVER, TAKEN = 15, 16  # failback: the serving member asks its backup to take over; the backup answers
KIND_NAMES = {CHALLENGE: "CHALLENGE", AUTH: "AUTH", WELCOME: "WELCOME", REFUSE: "REFUSE", BEGIN: "BEGIN",
              FILE: "FILE", END: "END", WRITE: "WRITE", SEGMENT: "SEGMENT", DELETE: "DELETE", CATALOG: "CATALOG",
              PING: "PING", ACK: "ACK", PONG: "PONG", TAKEOVER: "TAKEOVER", TAKEN: "TAKEN"}
_HEAD = struct.Struct("<IB")
_WRITE = struct.Struct("<IQQ")  # segment, offset, logical end position
_FILE = struct.Struct("<HQ")  # name length, offset
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
MAX_FRAME = 512 * 1024 * 1024  # one journal write (a 100 MiB message fits; a turn's buffer rarely exceeds it)
COPY_CHUNK = 1024 * 1024  # the catch-up copy reads and sends this much per reactor turn
INCOMPLETE = "replica-incomplete"  # in a backup's data dir while its copy is not whole: it must not take over
SNAPSHOT_FILES = ("node.json", "catalog.json", "epoch")


class ReplicationError(Exception):
    """The peer broke the replication protocol."""


class HandoverRefused(Exception):
    """A failback did not happen; the message says why (the serving member serves on)."""


def encode(kind: int, payload: bytes = b"") -> bytes:
    return _HEAD.pack(len(payload), kind) + payload


def encode_json(kind: int, body: dict) -> bytes:
    return encode(kind, json.dumps(body, separators=(",", ":")).encode())


def encode_write(segment: int, offset: int, end: int, data: bytes) -> bytes:
    return _HEAD.pack(_WRITE.size + len(data), WRITE) + _WRITE.pack(segment, offset, end) + data


def decode_write(payload: bytes | memoryview) -> tuple[int, int, int, memoryview]:
    segment, offset, end = _WRITE.unpack_from(payload)
    return segment, offset, end, memoryview(payload)[_WRITE.size:]


def encode_file(name: str, offset: int, data: bytes) -> bytes:
    raw = name.encode()
    return encode(FILE, _FILE.pack(len(raw), offset) + raw + data)


def decode_file(payload: bytes | memoryview) -> tuple[str, int, memoryview]:
    length, offset = _FILE.unpack_from(payload)
    view = memoryview(payload)
    name = bytes(view[_FILE.size:_FILE.size + length]).decode()
    _check_name(name)
    return name, offset, view[_FILE.size + length:]


def encode_position(kind: int, position: int) -> bytes:
    return encode(kind, _U64.pack(position))


def decode_position(payload: bytes | memoryview) -> int:
    return _U64.unpack_from(payload)[0]


def _check_name(name: str) -> None:
    """Only the data dir's own files: never a path outside it."""
    if name in SNAPSHOT_FILES:
        return
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != "journal" or not parts[1].endswith(".log") or not parts[1][:-4].isdigit():
        raise ReplicationError(f"not a replicated file name: {name!r}")


class Parser:
    """Bytes in, ``(kind, payload)`` frames out; frames may be split anywhere."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.buffer = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self.buffer += data
        frames = []
        buffer = self.buffer
        pos = 0
        while len(buffer) - pos >= _HEAD.size:
            length, kind = _HEAD.unpack_from(buffer, pos)
            if length > self.max_frame:
                raise ReplicationError(f"a frame of {length} bytes (at most {self.max_frame})")
            if kind not in KIND_NAMES:
                raise ReplicationError(f"unknown frame kind {kind}")
            end = pos + _HEAD.size + length
            if end > len(buffer):
                break
            frames.append((kind, bytes(buffer[pos + _HEAD.size:end])))
            pos = end
        if pos:
            del buffer[:pos]
        return frames


def proof(password: str, nonce: str, who: str) -> str:
    """HMAC of the other side's nonce: the cluster password, proven without sending it."""
    return hmac.new(password.encode(), f"replication:{who}:{nonce}".encode(), hashlib.sha256).hexdigest()


def _json(payload: bytes) -> dict:
    try:
        body = json.loads(payload)
    except ValueError:
        raise ReplicationError("a control frame that is not JSON") from None
    if not isinstance(body, dict):
        raise ReplicationError("a control frame that is not a JSON object")
    return body


# -- the primary's side --------------------------------------------------------------------------
