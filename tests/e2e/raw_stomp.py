"""A STOMP client on a plain socket for byte-exact end-to-end tests: what is sent
is exactly the given bytes, and frames are read back as they came."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterable, Mapping
from typing import NoReturn

from e2e_support import TIMEOUT, BrokerProcess

_UNESCAPE = {"1.1": {"n": "\n", "c": ":", "\\": "\\"}, "1.2": {"n": "\n", "c": ":", "\\": "\\", "r": "\r"}}


class RawFrame:
    def __init__(self, command: str, headers: dict[str, str], body: bytes, header_lines: list[str]) -> None:
        self.command = command
        self.headers = headers
        self.body = body
        self.header_lines = header_lines

    def __repr__(self) -> str:
        return f"RawFrame({self.command!r}, {self.headers!r}, {self.body[:80]!r})"


class ConnectionClosed(AssertionError):
    pass


def encode(command: str, headers: Mapping[str, str] | Iterable[tuple[str, str]] = (), body: bytes | str = b"",
           eol: bytes = b"\n") -> bytes:
    """A frame byte for byte as given: no escaping, no content-length unless asked."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    if isinstance(body, str):
        body = body.encode()
    head = command.encode() + eol
    for name, value in items:
        head += f"{name}:{value}".encode() + eol
    return head + eol + body + b"\0"


class RawClient:
    """A STOMP client on a plain socket: what is sent is exactly the given bytes."""

    def __init__(self, host: str, port: int, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.version: str | None = None
        self.heartbeat_times: list[float] = []
        self.closed = False
        self.frames: list[RawFrame] = []  # everything read so far, in order

    @classmethod
    def to(cls, broker: BrokerProcess, timeout: float = TIMEOUT) -> RawClient:
        return cls(broker.host, broker.port, timeout)

    # -- out ------------------------------------------------------------------------------

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, command: str, headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
                   body: bytes | str = b"") -> None:
        self.sendall(encode(command, headers, body))

    def closed_after(self, command: str, headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
                     body: bytes | str = b"") -> list[RawFrame]:
        """Send a frame the broker must refuse: the frames read until it closes the connection."""
        self.send_frame(command, headers, body)
        return self.wait_closed()

    def connect(self, version: str | None = "1.2", headers: Mapping[str, str] | None = None,
                command: str = "CONNECT") -> RawFrame:
        h = {}
        if version is not None:
            h["accept-version"] = version
        h["host"] = "localhost"
        h.update(headers or {})
        self.send_frame(command, h)
        frame = self.read_frame()
        assert frame.command == "CONNECTED", frame
        self.version = frame.headers.get("version", "1.0")
        return frame

    # -- in -------------------------------------------------------------------------------

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(262144)
        except TimeoutError:
            raise
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            raise ConnectionClosed("the broker closed the connection")
        self.buf += data

    def _take_frame(self) -> RawFrame | None:
        buf = self.buf
        while buf[:1] == b"\n" or buf[:2] == b"\r\n":
            del buf[: 1 if buf[:1] == b"\n" else 2]
            self.heartbeat_times.append(time.monotonic())
        if buf[:1] == b"\r":
            return None
        end = buf.find(b"\n\n")
        if end < 0:
            return None
        lines = buf[:end].decode("utf-8").split("\n")
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        command = lines[0]
        headers: dict[str, str] = {}
        table = _UNESCAPE.get(self.version or "1.0") if command != "CONNECTED" else None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if table:
                name = re.sub(r"\\(.)", lambda m: table.get(m.group(1), "\\" + m.group(1)), name)
                value = re.sub(r"\\(.)", lambda m: table.get(m.group(1), "\\" + m.group(1)), value)
            headers.setdefault(name, value)
        start = end + 2
        if "content-length" in headers:
            stop = start + int(headers["content-length"])
            if len(buf) <= stop:
                return None
            assert buf[stop] == 0, f"frame body not NUL-terminated after content-length: {bytes(buf[:200])!r}"
        else:
            stop = buf.find(b"\0", start)
            if stop < 0:
                return None
        frame = RawFrame(command, headers, bytes(buf[start:stop]), lines[1:])
        del buf[: stop + 1]
        self.frames.append(frame)
        return frame

    def read_frame(self, timeout: float = TIMEOUT) -> RawFrame:
        deadline = time.monotonic() + timeout
        while True:
            frame = self._take_frame()
            if frame is not None:
                return frame
            try:
                self._fill(deadline)
            except TimeoutError:
                raise AssertionError(f"no frame within {timeout}s; buffered {bytes(self.buf[:200])!r}") from None

    def expect(self, command: str, timeout: float = TIMEOUT) -> RawFrame:
        frame = self.read_frame(timeout)
        assert frame.command == command, f"expected {command}, got {frame!r}"
        return frame

    def read_frames(self, n: int, timeout: float = TIMEOUT) -> list[RawFrame]:
        deadline = time.monotonic() + timeout
        return [self.read_frame(max(0.001, deadline - time.monotonic())) for _ in range(n)]

    def _read_into(self, frames: list[RawFrame], deadline: float) -> NoReturn:
        """Append the frames that arrive to ``frames`` until reading raises: TimeoutError at
        ``deadline``, ConnectionClosed when the broker closes the connection."""
        while True:
            frame = self._take_frame()
            if frame is not None:
                frames.append(frame)
            else:
                self._fill(deadline)

    def poll(self, duration: float) -> list[RawFrame]:
        """Read whatever arrives during ``duration`` seconds (heart-beats are recorded)."""
        frames: list[RawFrame] = []
        try:
            self._read_into(frames, time.monotonic() + duration)
        except TimeoutError:
            return frames

    def wait_closed(self, timeout: float = TIMEOUT) -> list[RawFrame]:
        """Read until the broker closes the connection; return the frames read meanwhile.
        Fails if the connection is still open after ``timeout``."""
        frames: list[RawFrame] = []
        try:
            self._read_into(frames, time.monotonic() + timeout)
        except ConnectionClosed:
            return frames
        except TimeoutError:
            raise AssertionError(f"connection still open after {timeout}s; frames read: {frames}") from None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
