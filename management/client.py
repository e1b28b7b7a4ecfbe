"""A blocking client for management requests, over STOMP like any client: the
``meshgate`` commands use it, and so can scripts and the console. One connection
carries any number of requests; replies come to a temporary queue of its own."""

from __future__ import annotations

import socket
import ssl
import uuid
from dataclasses import dataclass
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


TLS_SCHEME, PLAIN_SCHEME = "stomp+ssl://", "stomp://"
_TLS_ALERT = b"\x15\x03"  # a TLS record of type alert, any version


def parse_address(text: str) -> tuple[str, int, bool]:
    """``HOST:PORT``, ``stomp://HOST:PORT`` or ``stomp+ssl://HOST:PORT`` (an IPv6 host in
    brackets) -> (host, port, speaks TLS); ValueError if it is none of these."""
    tls = text.startswith(TLS_SCHEME)
    rest = text[len(TLS_SCHEME):] if tls else text.removeprefix(PLAIN_SCHEME)
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or "/" in host or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT or stomp+ssl://HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port), tls


@dataclass(frozen=True)
class TlsFiles:
    """What verifies the node (``ca``: a CA file, else the system's trust store) and, for a
    node that requires client certificates, what this client presents."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        """ManagementClientError if a file cannot be read or the certificate and key do not match."""
        if (self.cert is None) != (self.key is None):
            raise ManagementClientError("a client certificate needs its key, and a key its certificate")
        try:
            context = ssl.create_default_context(cafile=self.ca)
        except (OSError, ssl.SSLError) as error:
            raise ManagementClientError(f"cannot use the CA file {self.ca}: {_reason(error)}") from None
        context.check_hostname = self.verify_hostname
        if self.cert is not None:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as error:
                raise ManagementClientError(f"cannot use the client certificate {self.cert} with the key "
                                            f"{self.key}: {_reason(error)}") from None
        return context


def _reason(error: OSError) -> str:
    if isinstance(error, ssl.SSLError):
        return (error.reason or str(error)).lower().replace("_", " ")
    return error.strerror or str(error)


class ManagementClient:
    def __init__(self, host: str, port: int, login: str | None = None, passcode: str | None = None,
                 timeout: float = 15.0, tls: ssl.SSLContext | None = None) -> None:
        """``tls``: the node's address speaks TLS, verified by this context (``TlsFiles.context``)."""
        self.host = host
        self.port = port
        self.login = login
        self.passcode = passcode
        self.timeout = timeout
        self.tls = tls
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
        headers = {"accept-version": "1.2", "host": "/", "heart-beat": "0,0"}  # management lives in vhost "/"
        if self.login is not None:
            headers.update(login=self.login, passcode=self.passcode or "")
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as error:
            raise ManagementClientError(f"cannot connect to {self.host}:{self.port}: {error.strerror or error}") \
                from None
        self._sock = sock if self.tls is None else self._handshake(sock, self.tls)
        self._send(encode_frame("CONNECT", headers))
        self._expect("CONNECTED")
        self._send(encode_frame("SUBSCRIBE", {"id": "replies", "destination": self._reply_to}))

    def _handshake(self, sock: socket.socket, context: ssl.SSLContext) -> ssl.SSLSocket:
        try:
            return context.wrap_socket(sock, server_hostname=self.host)
        except ssl.SSLCertVerificationError as error:
            sock.close()
            raise ManagementClientError(f"certificate verify failed: {error.verify_message} "
                                        f"(the node at {self.host}:{self.port})") from None
        except TimeoutError:
            sock.close()
            raise ManagementClientError(f"no TLS handshake with {self.host}:{self.port} within "
                                        f"{self.timeout:g} s") from None
        except OSError as error:
            sock.close()
            raise ManagementClientError(self._tls_refusal(error)) from None

    def _tls_refusal(self, error: OSError) -> str:
        """Why a TLS connection failed, in words (with TLS 1.3 a node refuses a client's
        certificate only after the client's side of the handshake is done)."""
        where = f"the node at {self.host}:{self.port}"
        reason = getattr(error, "reason", None) or ""
        if "CERTIFICATE_REQUIRED" in reason:
            return f"{where} requires a client certificate (--cert and --key)"
        if "ALERT" in reason:
            return f"{where} refused the TLS connection: {_reason(error)}"
        if isinstance(error, (ssl.SSLError, ConnectionResetError)):
            return f"{where} does not speak TLS ({_reason(error)})"
        return f"connection to {self.host}:{self.port} lost: {error.strerror or error}"

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
            if self.tls is not None:
                raise ManagementClientError(self._tls_refusal(error)) from None
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
                    if self.tls is not None:
                        raise ManagementClientError(self._tls_refusal(error)) from None
                    raise ManagementClientError(f"connection to {self.host}:{self.port} lost: {error}") from None
                if command == "CONNECTED" and self.tls is None and (not data or data.startswith(_TLS_ALERT)):
                    # What a TLS listener does with a plaintext CONNECT: close, or alert.
                    raise ManagementClientError(
                        f"the node at {self.host}:{self.port} closed the connection without answering; if it "
                        f"speaks TLS, use {TLS_SCHEME}{self.host}:{self.port}")
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
