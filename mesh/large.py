"""Large messages over a link: a message frame larger than ``CHUNK`` crosses as
CHUNK frames of up to ``CHUNK`` bytes, one written at a time while the link's
socket keeps up, so the smaller frames queued meanwhile go out between them
instead of waiting behind the whole message (as Artemis streams large messages).
Order still holds where it matters: a message for an address that has a large
message crossing waits behind it; other addresses' messages overtake.

Sent only to peers whose HELLO says ``chunks`` (older peers get whole frames).
A CHUNK payload is one flag byte (1: the last piece) and a piece of a MESSAGE
frame's payload; a link carries one chunked message at a time, so the pieces of
one message are never mixed with another's."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from mesh.codec import encode_frame
from mesh.wire import FrameType, LinkError

CHUNK = 1024 * 1024
MAX_CHUNKED = 1 << 31  # bytes of one message reassembled from chunks, at most
_LAST = b"\x01"
_MORE = b"\x00"
_FRAME_HEAD = 5  # a link frame's head: payload length (4 bytes) and type


class ChunkedSender:
    """The sending half: ``offer`` takes every message frame; ``write`` puts bytes on
    the link (small frames through ``small``, which batches them)."""

    def __init__(self, reactor: Any, write: Callable[[bytes], None], small: Callable[[bytes], None]) -> None:
        self.reactor = reactor
        self.write = write
        self.small = small
        self.large: deque[tuple[str, memoryview]] = deque()  # (address, payload) waiting or crossing
        self.held: dict[str, list[bytes]] = {}  # address -> frames waiting behind its large message
        self.sent = 0  # bytes of the first large message already written
        self.paused = False
        self._call = None

    def offer(self, frame: bytes, address: str) -> None:
        waiting = self.held.get(address)
        if waiting is not None:
            waiting.append(frame)
        elif len(frame) > CHUNK:
            self.held[address] = []
            self.large.append((address, memoryview(frame)[_FRAME_HEAD:]))
            self._schedule()
        else:
            self.small(frame)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self._schedule()

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self.large.clear()
        self.held.clear()

    def _schedule(self) -> None:
        if self._call is None and self.large and not self.paused:
            self._call = self.reactor.callLater(0, self._next)

    def _next(self) -> None:
        self._call = None
        if not self.large or self.paused:
            return
        address, payload = self.large[0]
        piece = payload[self.sent:self.sent + CHUNK]
        self.sent += len(piece)
        last = self.sent >= len(payload)
        self.write(encode_frame(FrameType.CHUNK, (_LAST if last else _MORE) + piece))
        if last:
            self.large.popleft()
            self.sent = 0
            for frame in self.held.pop(address, []):
                self.offer(frame, address)  # in order; a later large one holds the rest again
        self._schedule()


class ChunkAssembler:
    """The receiving half: pieces in, a whole MESSAGE payload out at the last one."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def add(self, payload: bytes) -> bytes | None:
        if not payload:
            raise LinkError("empty CHUNK frame")
        self.buffer += memoryview(payload)[1:]
        if len(self.buffer) > MAX_CHUNKED:
            raise LinkError(f"chunked message exceeds {MAX_CHUNKED} bytes")
        if payload[:1] != _LAST:
            return None
        whole, self.buffer = bytes(self.buffer), bytearray()
        return whole
