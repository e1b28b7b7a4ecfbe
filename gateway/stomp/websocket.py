"""STOMP over WebSocket (RFC 6455), as browsers and RabbitMQ's Web-STOMP, ActiveMQ's
``ws://`` connector and Artemis speak it.

wsproto (the sans-I/O WebSocket of h11's authors) does the handshake and the
framing; this module only adapts. After the handshake a ``StompProtocol`` from the
node's STOMP factory runs unchanged over a transport whose ``write`` sends one
WebSocket message: STOMP writes a frame (or a heart-beat EOL) per call, so each
goes out as a message of its own, as text when it is UTF-8, else binary. What
arrives is fed to STOMP's stream parser whatever the message boundaries, so a
frame split over several messages, or several frames in one, is read alike.

Subprotocols ``v12.stomp``, ``v11.stomp`` and ``v10.stomp`` (the client's CONNECT
still negotiates the version); a client that offers none is accepted, one that
offers only others is refused (400). Any path is accepted. ``allowed_origins``
(``*`` by default) limits which web origins a browser may connect from; a
request without an ``Origin`` header (not a browser) is not limited by it.

Whatever the client's bytes make wsproto raise (a RemoteProtocolError, or a
UnicodeDecodeError on a header of other bytes than ASCII) is the client's mistake:
a 400 before the handshake is done, a close 1002 after; what our own handlers
raise is a bug, logged once with its traceback. A handshake must be done within
HANDSHAKE_TIMEOUT, as STOMP's CONNECT must."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from twisted.internet.base import DelayedCall
from twisted.internet.interfaces import IAddress
from twisted.internet.protocol import Protocol, ServerFactory
from twisted.python.failure import Failure
from wsproto import ConnectionState, ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from gateway.hostile_log import PeerLog, quote
from gateway.stomp.protocol import StompFactory, StompProtocol
from gateway.transport import Transport

log = logging.getLogger(__name__)

SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")  # in order of preference
NORMAL_CLOSE, PROTOCOL_ERROR, INTERNAL_ERROR = 1000, 1002, 1011
HANDSHAKE_TIMEOUT = 30.0  # as STOMP's CONNECT_TIMEOUT: an upgrade request never finished holds no socket for good


@dataclass(frozen=True)
class WebSocketSettings:
    allowed_origins: tuple[str, ...] = ("*",)

    def allows(self, origin: str | None) -> bool:
        return origin is None or "*" in self.allowed_origins or origin in self.allowed_origins


class WebSocketStompProtocol(Protocol):
    """One WebSocket connection carrying one STOMP connection."""

    factory: WebSocketStompFactory
    transport: Transport  # type: ignore[assignment]  # Twisted's is ITransport | None: see gateway.transport

    def __init__(self, stomp_factory: StompFactory, settings: WebSocketSettings) -> None:
        self.stomp_factory = stomp_factory
        self.settings = settings
        self.ws = WSConnection(ConnectionType.SERVER)
        self.stomp: StompProtocol | None = None
        self.subprotocol: str | None = None
        self._timeout: DelayedCall | None = None

    def connectionMade(self) -> None:
        self._timeout = self.stomp_factory.clock.callLater(HANDSHAKE_TIMEOUT, self._handshake_timeout)

    def _handshake_timeout(self) -> None:
        if self.ws.state is ConnectionState.CONNECTING:
            self._log("websocket from %s closed: no complete upgrade request within %.0f s", self._peer(),
                      HANDSHAKE_TIMEOUT)
            self.transport.abortConnection()

    # -- bytes in: wsproto's events, one handler each ---------------------------------------

    def dataReceived(self, data: bytes) -> None:
        try:
            self.ws.receive_data(data)
            for event in self.ws.events():
                handler = getattr(self, "event_" + type(event).__name__, None)
                if handler is None:
                    continue
                try:
                    handler(event)
                except Exception as error:  # a bug of ours: one line (the first with its traceback), then close
                    self.factory.peer_log.internal_error(self._host(), f"websocket from {self._peer()}", error)
                    self.close(INTERNAL_ERROR, "internal error")
                    return
        except Exception as error:  # wsproto (or what it calls) refused the client's bytes
            self._protocol_error(error)

    def event_Request(self, request: Request) -> None:
        origin = _header(request.extra_headers, b"origin")
        if origin is not None and not self.settings.allows(origin):
            self._reject(403, f"origin {origin[:100]} is not in stomp.websocket.allowed_origins")
            return
        if request.subprotocols:
            chosen = next((name for name in SUBPROTOCOLS if name in request.subprotocols), None)
            if chosen is None:
                self._reject(400, f"no STOMP subprotocol offered ({quote(', '.join(request.subprotocols))}); "
                                  f"this server speaks {', '.join(SUBPROTOCOLS)}")
                return
            self.subprotocol = chosen
        self.transport.write(self.ws.send(AcceptConnection(subprotocol=self.subprotocol)))
        self._cancel_timeout()
        self.stomp = stomp = self.stomp_factory.buildProtocol(self.transport.getPeer())
        assert stomp is not None, "a StompFactory builds a protocol for every connection"
        stomp.makeConnection(_MessageTransport(self))

    def event_TextMessage(self, message: TextMessage) -> None:
        if self.stomp is not None:
            self.stomp.dataReceived(message.data.encode())

    def event_BytesMessage(self, message: BytesMessage) -> None:
        if self.stomp is not None:
            self.stomp.dataReceived(bytes(message.data))

    def event_Ping(self, ping: Ping) -> None:
        if self.ws.state is ConnectionState.OPEN:  # once a close is sent, a pong may not follow it
            self.transport.write(self.ws.send(ping.response()))

    def event_CloseConnection(self, close: CloseConnection) -> None:
        if self.ws.state is ConnectionState.REMOTE_CLOSING:
            self.transport.write(self.ws.send(close.response()))
        self._lose_connection()

    def connectionLost(self, reason: Failure | None = None) -> None:
        self._cancel_timeout()
        stomp, self.stomp = self.stomp, None
        if stomp is not None:
            stomp.connectionLost(reason)

    # -- bytes out --------------------------------------------------------------------------

    def send_message(self, data: bytes) -> None:
        if self.ws.state is not ConnectionState.OPEN:
            return
        try:
            message: Event = TextMessage(data=data.decode())
        except UnicodeDecodeError:  # a binary body: browsers get an ArrayBuffer
            message = BytesMessage(data=data)
        self.transport.write(self.ws.send(message))

    def close(self, code: int = NORMAL_CLOSE, reason: str | None = None) -> None:
        if self.ws.state is ConnectionState.OPEN:
            self.transport.write(self.ws.send(CloseConnection(code=code, reason=reason)))
        self._lose_connection()

    def _lose_connection(self) -> None:
        """Close once what is written is out. STOMP's producer goes first: Twisted
        closes a connection whose producer it paused (the socket was full) only once
        that producer is unregistered; it would resume it instead and the socket would
        stay open for good."""
        if getattr(self.transport, "producer", None) is not None:
            self.transport.unregisterProducer()
        self.transport.loseConnection()

    def _reject(self, status: int, reason: str) -> None:
        self._log("websocket from %s refused: %s", self._peer(), reason)
        body = reason.encode()
        self.transport.write(self.ws.send(RejectConnection(
            status_code=status, headers=[(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))],
            has_body=True)))
        self.transport.write(self.ws.send(RejectData(data=body)))
        self._lose_connection()

    def _protocol_error(self, error: Exception) -> None:
        # wsproto's own errors name the rule broken; any other error's text may quote the client's bytes.
        what = str(error)[:100] if isinstance(error, RemoteProtocolError) else "malformed data"
        if self.ws.state is ConnectionState.CONNECTING:  # not a WebSocket handshake at all
            self._reject(400, f"not a WebSocket request: {what}")
            return
        self.close(PROTOCOL_ERROR, what)

    def _cancel_timeout(self) -> None:
        if self._timeout is not None and self._timeout.active():
            self._timeout.cancel()
        self._timeout = None

    def _log(self, message: str, *args: object) -> None:
        """Anyone can connect: what a client makes the node log is rate-limited per address."""
        self.factory.peer_log.info(self._host(), message, *args)

    def _peer(self) -> str:
        peer = self.transport.getPeer()
        return f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', 0)}"

    def _host(self) -> str:
        return str(getattr(self.transport.getPeer(), "host", "?"))


class _MessageTransport:
    """What the STOMP protocol sees as its transport: each write one WebSocket
    message; flow control, addresses and closing go to the TCP connection."""

    whole_frames = True  # a large body is not written in pieces: each would be a message of its own

    def __init__(self, websocket: WebSocketStompProtocol) -> None:
        self.websocket = websocket
        self.tcp = websocket.transport

    def write(self, data: bytes) -> None:
        self.websocket.send_message(data)

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        self.websocket.close()

    def abortConnection(self) -> None:
        self.tcp.abortConnection()

    def getPeer(self) -> IAddress:
        return self.tcp.getPeer()

    def getHost(self) -> IAddress:
        return self.tcp.getHost()

    def registerProducer(self, producer: object, streaming: bool) -> None:
        self.tcp.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        self.tcp.unregisterProducer()

    @property
    def producer(self) -> object:
        return getattr(self.tcp, "producer", None)

    def pauseProducing(self) -> None:
        self.tcp.pauseProducing()

    def resumeProducing(self) -> None:
        self.tcp.resumeProducing()


class WebSocketStompFactory(ServerFactory[WebSocketStompProtocol]):
    def __init__(self, stomp_factory: StompFactory, settings: WebSocketSettings) -> None:
        self.stomp_factory = stomp_factory
        self.settings = settings
        self.peer_log = PeerLog(log, stomp_factory.clock.seconds)

    def buildProtocol(self, addr: IAddress | None) -> WebSocketStompProtocol:
        protocol = WebSocketStompProtocol(self.stomp_factory, self.settings)
        protocol.factory = self
        return protocol


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None
