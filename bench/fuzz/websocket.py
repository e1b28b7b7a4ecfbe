"""The STOMP-over-WebSocket port: an HTTP upgrade request (sometimes broken), then
the STOMP fuzzer's session carried in WebSocket frames — text or binary, one
STOMP frame per message or fragmented over continuation frames, with pings,
pongs and a close — mutated at either level: the STOMP frame before it is
wrapped, or the WebSocket frame (opcode, RSV bits, mask, lengths) after."""

from __future__ import annotations

import base64
import random
import socket
import struct
import time

from bench.fuzz.mutate import Mutator
from bench.fuzz.node import HOST
from bench.fuzz.runner import CASE_TIMEOUT, Case, CaseBuilder, ControlFailed, Live, Target
from bench.fuzz.stomp import corpus as stomp_corpus
from bench.fuzz.stomp import session_plan, stomp_round_trip

TEXT, BINARY, CONTINUATION, CLOSE, PING, PONG = 1, 2, 0, 8, 9, 10
P_BROKEN_UPGRADE = 0.1
UPGRADE_WAIT = 5.0


def upgrade_request(rng: random.Random, port: int) -> bytes:
    key = base64.b64encode(rng.randbytes(16)).decode()
    lines = ["GET /ws HTTP/1.1", f"Host: {HOST}:{port}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    if rng.random() < 0.5:
        lines.append("Sec-WebSocket-Protocol: " + rng.choice(("v12.stomp", "v12.stomp, v11.stomp", "v10.stomp")))
    if rng.random() < 0.3:
        lines.append("Origin: " + rng.choice(("http://127.0.0.1:8161", "null", "https://example.com")))
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def ws_frame(opcode: int, payload: bytes, mask: bytes, fin: bool = True) -> bytes:
    """A client's (masked) frame."""
    size = len(payload)
    if size < 126:
        head = struct.pack(">BB", (0x80 if fin else 0) | opcode, 0x80 | size)
    elif size < 65536:
        head = struct.pack(">BBH", (0x80 if fin else 0) | opcode, 0x80 | 126, size)
    else:
        head = struct.pack(">BBQ", (0x80 if fin else 0) | opcode, 0x80 | 127, size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def lengths(data: bytes) -> list[tuple[int, int]]:
    """The 7-bit length (with the mask bit), and the 16 or 64-bit length after it."""
    if len(data) < 2:
        return []
    marker = data[1] & 0x7F
    return [(1, 1)] + ([(2, 2)] if marker == 126 else [(2, 8)] if marker == 127 else [])


def message(rng: random.Random, payload: bytes) -> list[bytes]:
    """One STOMP frame (or a piece of the stream) as one message or fragmented."""
    try:
        payload.decode()
        opcode = TEXT if rng.random() < 0.8 else BINARY
    except UnicodeDecodeError:
        opcode = BINARY
    mask = rng.randbytes(4)
    if len(payload) < 2 or rng.random() < 0.8:
        return [ws_frame(opcode, payload, mask)]
    cuts = sorted(rng.sample(range(1, len(payload)), min(len(payload) - 1, rng.randint(1, 3))))
    pieces = [payload[a:b] for a, b in zip([0, *cuts], [*cuts, len(payload)], strict=True)]
    return [ws_frame(opcode if i == 0 else CONTINUATION, piece, mask, fin=i == len(pieces) - 1)
            for i, piece in enumerate(pieces)]


def control_frame(rng: random.Random) -> bytes:
    mask = rng.randbytes(4)
    choice = rng.randrange(4)
    if choice == 0:
        return ws_frame(PING, rng.randbytes(rng.randrange(10)), mask)
    if choice == 1:
        return ws_frame(PONG, b"", mask)
    if choice == 2:
        return ws_frame(CLOSE, struct.pack(">H", rng.choice((1000, 1001, 1002, 4000, 999, 5000))) + b"bye", mask)
    return ws_frame(PING, b"x" * 200, mask)  # a control frame over 125 bytes: a protocol error


class WebSocketTarget(Target):
    name = "websocket"
    scheme = "ws"

    def __init__(self, node) -> None:
        super().__init__(node)
        rng = random.Random(0)
        self.corpus = [upgrade_request(rng, 1)] + [f for s in stomp_corpus() for f in message(rng, s)]

    def make_case(self, rng: random.Random, index: int) -> Case:
        mutator = Mutator(rng, lengths)
        builder = CaseBuilder(rng, mutator, self.corpus, index)
        broken = rng.random() < P_BROKEN_UPGRADE
        builder.frames([upgrade_request(rng, self.port)], 1.0 if broken else 0.0)
        if not broken:  # a client waits for the 101 (RFC 6455, 4.1) before its frames
            builder.live("upgraded", counts=False)
        for stomp_frame, p in session_plan(rng):
            stomp_frame = builder.mutated(stomp_frame, p / 2)
            builder.frames(message(rng, stomp_frame), p / 2)
            if rng.random() < 0.05:
                builder.frames([control_frame(rng)], p / 2)
        return builder.case

    def opened(self, sock: socket.socket) -> socket.socket:
        return sock

    def live(self, step: Live, context: object) -> list[bytes]:
        """Read the answer to the upgrade request (a 101, or a refusal and the close)."""
        assert isinstance(context, socket.socket)
        answer = bytearray()
        deadline = time.monotonic() + UPGRADE_WAIT
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            context.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                data = context.recv(4096)
            except TimeoutError:
                break
            if not data:
                break
            answer += data
        context.settimeout(CASE_TIMEOUT)
        return []

    def control(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        sock = socket.create_connection((HOST, self.port), timeout=timeout)
        try:
            rng = random.Random()
            sock.sendall(upgrade_request(rng, self.port))
            stream = _ServerStream(sock, deadline)
            stream.receive_upgrade()
            stomp_round_trip(lambda data: sock.sendall(ws_frame(TEXT, data, rng.randbytes(4))), stream.receive,
                             timeout)
        finally:
            sock.close()


class _ServerStream:
    """The server's side: the HTTP 101 answer, then unmasked frames whose payloads
    make the STOMP stream."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buffer = bytearray()

    def _read(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise ControlFailed("no answer within the control timeout")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise ControlFailed("no answer within the control timeout") from None
        if not data:
            raise ControlFailed(f"the node closed the control connection; got {bytes(self.buffer[:200])!r}")
        self.buffer += data

    def receive_upgrade(self) -> None:
        while b"\r\n\r\n" not in self.buffer:
            self._read()
        end = self.buffer.find(b"\r\n\r\n")
        if not self.buffer.startswith(b"HTTP/1.1 101"):
            raise ControlFailed(f"upgrade refused: {bytes(self.buffer[:200])!r}")
        del self.buffer[:end + 4]

    def receive(self, remaining: float) -> bytes:
        payloads = bytearray()
        while not payloads:
            while len(self.buffer) >= 2:
                size, offset = self.buffer[1] & 0x7F, 2
                if size == 126:
                    size, offset = (struct.unpack_from(">H", self.buffer, 2)[0], 4) if len(self.buffer) >= 4 \
                        else (None, 4)
                elif size == 127:
                    size, offset = (struct.unpack_from(">Q", self.buffer, 2)[0], 10) if len(self.buffer) >= 10 \
                        else (None, 10)
                if size is None or len(self.buffer) < offset + size:
                    break
                if self.buffer[0] & 0x0F in (TEXT, BINARY, CONTINUATION):
                    payloads += self.buffer[offset:offset + size]
                del self.buffer[:offset + size]
            if not payloads:
                self._read()
        return bytes(payloads)
