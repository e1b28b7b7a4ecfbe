"""A blocking client for management requests, over STOMP like any client: the
``meshgate`` commands use it, and so can scripts and the console. One connection
carries any number of requests; replies come to a temporary queue of its own."""

from __future__ import annotations

import socket
import uuid
from typing import Any

import msgspec

from gateway.stomp.codec import Frame, FrameError, FrameParser, encode_frame
from model.requests import MANAGEMENT_ADDRESS, Failure, Reply, Request, decode_reply


class ManagementClientError(Exception):
    """The broker could not be reached, refused the connection or the request."""


class RequestFailed(Exception):
    """The request was refused or could not be done: ``failure`` says why."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class ManagementClient:
    def __init__(self, host: str, port: int, login: str | None = None, passcode: str | None = None,
                 timeout: float = 15.0) -> None:
        self.host = host
        self.port = port
        self.login = login
        self.passcode = passcode
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._parser = FrameParser("1.2")
        self._frames: list[Frame] = []
        self._reply_to = f"/temp-queue/meshgate-admin-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> ManagementClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        headers = {"accept-version": "1.2", "host": self.host, "heart-beat": "0,0"}
        if self.login is not None:
            headers.update(login=self.login, passcode=self.passcode or "")
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as error:
            raise ManagementClientError(f"cannot connect to {self.host}:{self.port}: {error.strerror or error}") \
                from None
        self._send(encode_frame("CONNECT", headers))
        self._expect("CONNECTED")
        self._send(encode_frame("SUBSCRIBE", {"id": "replies", "destination": self._reply_to}))

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.sendall(encode_frame("DISCONNECT", {}))
            except OSError:
                pass
            self._sock.close()
            self._sock = None

    def ask(self, request: Request) -> Reply:
        """Send a request and wait for its reply (which may say it failed)."""
        if self._sock is None:
            self.connect()
        correlation = uuid.uuid4().hex
        self._send(encode_frame("SEND", {"destination": "/queue/" + MANAGEMENT_ADDRESS, "reply-to": self._reply_to,
                                         "correlation-id": correlation, "content-type": "application/json"},
                                msgspec.json.encode(request)))
        while True:
            frame = self._expect("MESSAGE")
            if frame.headers.get("correlation-id") == correlation:
                try:
                    return decode_reply(frame.body)
                except (msgspec.DecodeError, msgspec.ValidationError) as error:
                    raise ManagementClientError(f"the broker sent a reply this client cannot read: {error}") \
                        from None

    def call(self, request: Request) -> Any:
        """The request's result; RequestFailed if it failed as a whole."""
        reply = self.ask(request)
        if not reply.ok:
            raise RequestFailed(reply.error or Failure(code="bad_request", message="the request failed"))
        return reply.result

    # -- frames -----------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        assert self._sock is not None, "connect() first"
        try:
            self._sock.sendall(data)
        except OSError as error:
            raise ManagementClientError(f"connection to {self.host}:{self.port} lost: {error}") from None

    def _expect(self, command: str) -> Frame:
        assert self._sock is not None, "connect() first"
        while True:
            while not self._frames:
                try:
                    data = self._sock.recv(1 << 16)
                except TimeoutError:
                    raise ManagementClientError(f"no answer from {self.host}:{self.port} within "
                                                f"{self.timeout:g} s") from None
                except OSError as error:
                    raise ManagementClientError(f"connection to {self.host}:{self.port} lost: {error}") from None
                if not data:
                    raise ManagementClientError("the broker closed the connection without answering")
                try:
                    self._frames.extend(self._parser.feed(data))
                except FrameError as error:
                    raise ManagementClientError(f"the broker sent a malformed frame: {error}") from None
            frame = self._frames.pop(0)
            if frame.command == "ERROR":
                raise ManagementClientError(frame.headers.get("message", "error"))
            if frame.command == command:
                return frame
