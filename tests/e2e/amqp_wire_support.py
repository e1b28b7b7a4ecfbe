"""A raw AMQP 0-9-1 client for the end-to-end tests: what it sends is exactly the
bytes given; what the node answers is read back frame by frame with pika's decoder."""

from __future__ import annotations

import socket
import time

import pika.frame
import pika.spec
from amqp_support import amqp_port
from e2e_support import HOST, TIMEOUT

from tests.amqp_inputs import PROTOCOL_HEADER, frame


class RawAmqp:
    """Connects, sends the protocol header and reads connection.start (``start``)."""

    def __init__(self, process, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection((HOST, amqp_port(process)), timeout=timeout)
        self.timeout = timeout
        self._data = b""
        self.sock.sendall(PROTOCOL_HEADER)
        self.start = self.method()
        assert isinstance(self.start, pika.spec.Connection.Start), self.start

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def method(self):
        """The next method the node sends; AssertionError if it closes the socket first."""
        deadline = time.monotonic() + self.timeout
        while True:
            consumed, decoded = pika.frame.decode_frame(self._data) if self._data else (0, None)
            if consumed:
                self._data = self._data[consumed:]
                if isinstance(decoded, pika.frame.Method):
                    return decoded.method
                continue
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk = self.sock.recv(65536)
            assert chunk, f"the node closed the socket without a method (after {self._data[:100]!r})"
            self._data += chunk

    def expect_close(self) -> pika.spec.Connection.Close:
        """The connection.close the node answers with, acknowledged with close-ok as a client does."""
        close = self.method()
        assert isinstance(close, pika.spec.Connection.Close), close
        self.sock.sendall(frame(1, 0, b"\x00\x0a\x00\x33"))  # connection.close-ok
        return close

    def closed_by_node(self) -> bool:
        """Whether the node closed the socket (within the timeout), having sent nothing more."""
        self.sock.settimeout(self.timeout)
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()
