"""The Twisted side of STOMP: bytes in and out, heart-beats, receipts in order
and errors, and the factory. CONNECT lives in :mod:`gateway.stomp.connect`,
producer flow control in :mod:`gateway.stomp.flow`, frame handling in
:mod:`gateway.stomp.versions`."""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from twisted.internet import interfaces
from twisted.internet.protocol import Protocol, ServerFactory
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.auth import Principal
from gateway.broker.broker import Broker
from gateway.broker.errors import BrokerError
from gateway.broker.message import Message
from gateway.broker.queue import Subscription
from gateway.broker.session import ConnectionInfo, Session
from gateway.broker.vhost_limits import VhostLimits
from gateway.hostile_log import PeerLog
from gateway.permissions import AccessControl, VhostPermissions
from gateway.stomp.codec import HEARTBEAT, Frame, FrameError, FrameParser, encode_frame
from gateway.stomp.connect import connect
from gateway.stomp.flow import ProducerFlow
from gateway.stomp.settings import StompSettings
from gateway.stomp.versions import VERSIONS, Stomp10, StompError
from gateway.transport import Transport
from model.names import DEFAULT_VHOST

if TYPE_CHECKING:
    from gateway.broker.vhosts import VirtualHosts

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 30.0
PIECE = 256 * 1024  # of a large body written at a time (versions.STREAM_AT)

__all__ = ["StompFactory", "StompProtocol", "StompSettings"]  # StompSettings too: node.py and tests import it here


@implementer(interfaces.IPushProducer)
class StompProtocol(Protocol):
    factory: StompFactory
    transport: Transport  # type: ignore[assignment]  # Twisted's is ITransport | None: see gateway.transport
    parser: FrameParser  # made in connectionMade, before any byte is read
    flow: ProducerFlow  # likewise

    def __init__(self) -> None:
        self.handler: Stomp10 | None = None
        self.closing = False
        self.sent_since_beat = False
        self.last_received = 0.0
        self.silence_allowed = 0.0
        self._receipts: deque[list] = deque()
        self._close_after_receipts = False
        self._timers: list = []
        self.held: list[Frame] | None = None  # while CONNECT's password is checked: handled after it
        self._stream: deque | None = None  # what waits behind a large body going out in pieces
        self._close_after_stream = False
        self._socket_full = False
        self.vhost = DEFAULT_VHOST  # chosen at CONNECT
        self.counted: str | None = None  # the vhost whose connection limit counts this one

    # -- connection lifecycle -------------------------------------------------------------

    def connectionMade(self) -> None:
        factory = self.factory
        settings = factory.settings
        self.parser = FrameParser("1.0", settings.max_frame_size, settings.max_headers, settings.max_header_length)
        self.clock = factory.clock
        self.flow = ProducerFlow(self, factory.broker, self.clock, settings.no_space_fail_after_ms)
        factory.connections.add(self)
        self.transport.registerProducer(self, True)
        # A RECEIPT or a MESSAGE is a small write after a pause: without this, Nagle's
        # algorithm holds it until the client's delayed ACK (up to 40 ms).
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)
        if len(factory.connections) > settings.max_connections:
            self.fail("too many connections to this broker")
            return
        self._timers.append(self.clock.callLater(CONNECT_TIMEOUT, self._connect_timeout))

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.closing = True
        for timer in self._timers:
            if timer.active():
                timer.cancel()
        self._timers.clear()
        self.flow.stop()
        self.factory.connections.discard(self)
        self._uncount()
        if self.handler is not None:
            self.handler.session.close()
            self.handler = None

    def _connect_timeout(self) -> None:
        if self.handler is None and not self.closing:
            self.fail("no CONNECT frame received in time")

    # -- bytes in -------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_received = now = self.clock.seconds()
        if self.handler is not None:
            self.handler.session.received_at = now  # when its SENDs were accepted, its ACKs given
        parser = self.parser
        while True:
            try:
                frames = parser.feed(data)
            except FrameError as error:
                if error.frames:
                    self.process(error.frames)
                self.fail(error.message, error.receipt)
                return
            if frames:
                self.process(frames)
            if not parser.stopped_at_connect or self.closing:
                break
            data = b""  # CONNECT negotiated the version: parse what followed it
        if parser.buffered != self.flow.partial and not self.closing:
            self.flow.count_partial(parser.buffered)

    def process(self, frames: list[Frame]) -> None:
        if self.held is not None:  # still authenticating: keep order, handle later
            self.held.extend(frames)
            return
        store = self.factory.broker.store
        sent = persistent = False
        for index, frame in enumerate(frames):
            if self.closing:
                return
            handler = self.handler
            receipt = frame.headers.get("receipt")
            before = store.position
            try:
                if handler is None:
                    connect(self, frame)
                    if self.held is not None:
                        self.held.extend(frames[index + 1:])
                        return
                    continue
                handler.handle(frame)
            except Exception as error:
                self.frame_failed(frame, error, receipt)
                return
            if receipt is not None:
                self.receipt(receipt, store.position != before)
            if frame.command == "SEND":
                sent = True
                persistent = persistent or frame.headers.get("persistent") == "true"
        if sent:
            self.flow.after_sends(persistent)

    # -- CONNECT done (gateway.stomp.connect negotiates it) -------------------------------

    def opened(self, session: Session, principal: Principal, version: str, reply: dict[str, str]) -> None:
        """CONNECT opened ``session``: its version's handler takes the frames from here on."""
        session.principal = principal
        peer = self.transport.getPeer()
        remote = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', 0)}"
        session.connection = ConnectionInfo("stomp", version, remote, self.clock.seconds(), self.fail)
        self.handler = VERSIONS[version](self, session, principal)
        self.write(encode_frame("CONNECTED", reply, version=version))

    # -- heart-beats ----------------------------------------------------------------------

    def start_heartbeats(self, client: tuple[int, int], settings: StompSettings) -> None:
        client_send, client_receive = client
        if settings.heartbeat_send_ms and client_receive:
            # Ticking at half the interval keeps every gap within the interval.
            self._schedule(max(settings.heartbeat_send_ms, client_receive) / 2000.0, self._beat)
        if settings.heartbeat_receive_ms and client_send:
            self.silence_allowed = max(settings.heartbeat_receive_ms, client_send) / 1000.0 * settings.heartbeat_grace
            self._schedule(self.silence_allowed / 4, self._check_alive)

    def _schedule(self, interval: float, tick) -> None:
        def run() -> None:
            if self.closing:
                return
            tick()
            if not self.closing:
                self._timers[index] = self.clock.callLater(interval, run)

        index = len(self._timers)
        self._timers.append(self.clock.callLater(interval, run))

    def _beat(self) -> None:
        # Ticks come every half interval: a beat (or any frame) in one half
        # excuses the next, so gaps stay within the interval without doubling beats.
        if self.sent_since_beat or self._stream is not None:  # a large body going out is beat enough
            self.sent_since_beat = False
        else:
            self.transport.write(HEARTBEAT)
            self.sent_since_beat = True

    def _check_alive(self) -> None:
        if self.clock.seconds() - self.last_received > self.silence_allowed:
            log.info("closing %s: no heart-beat from the client in time", self.transport.getPeer())
            self.closing = True
            self.transport.abortConnection()

    # -- bytes out ------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        self.sent_since_beat = True
        if self._stream is not None:
            self._stream.append(data)  # after the large body being written
        else:
            self.transport.write(data)

    def send_large(self, head: bytes, body: bytes) -> None:
        """A MESSAGE with a large body: the body goes out a piece at a time, each
        when the socket has taken the last, so a slow consumer holds a reference to
        the one shared body rather than a copy of it, and nothing else is written
        (or dispatched to this client) until it is out."""
        self.sent_since_beat = True
        if getattr(self.transport, "whole_frames", False):  # WebSocket: one frame per message
            self.transport.write(b"".join((head, body, b"\0")))
            return
        if self._stream is None:
            self._stream = deque()
        self._stream.extend((head, memoryview(body), b"\0"))
        self.handler.session.writable = False  # type: ignore[union-attr]  # the handler's deliver calls this
        self._pump()

    def _pump(self) -> None:
        stream = self._stream
        while stream and not self._socket_full:
            item = stream[0]
            if isinstance(item, memoryview):
                piece, rest = item[:PIECE], item[PIECE:]
                if rest:
                    stream[0] = rest
                else:
                    stream.popleft()
                item = piece.tobytes()
            else:
                stream.popleft()
            self.transport.write(item)  # may pause us at once: the socket's buffer is full
        if not stream and stream is self._stream:
            self._stream = None
            if self._close_after_stream:
                self._lose_connection()
            elif not self._socket_full and self.handler is not None and not self.closing:
                self.handler.session.set_writable(True)

    def deliver(self, subscription: Subscription, message: Message) -> None:
        # Only the session CONNECT opened delivers here, so the handler is set.
        self.handler.deliver(subscription, message)  # type: ignore[union-attr]

    def receipt(self, receipt_id: str, needs_sync: bool) -> None:
        """Receipts go out in the order their frames came, each once its effects are durable."""
        frame = encode_frame("RECEIPT", {"receipt-id": receipt_id}, version=self.parser.version)
        if not needs_sync and not self._receipts:
            self.write(frame)
            return
        entry = [frame, not needs_sync]
        self._receipts.append(entry)
        if needs_sync:
            durable = self.factory.broker.store.when_durable(told_of_failed_writes=True)
            durable.addCallbacks(self._durable, self._not_durable, callbackArgs=(entry,), errbackArgs=(entry,))
        else:
            self._drain_receipts()

    def _durable(self, _: object, entry: list) -> None:
        entry[1] = True
        self._drain_receipts()

    def _not_durable(self, failure: Failure, entry: list) -> None:
        """The store cannot make the frame durable: no RECEIPT for it, an ERROR
        saying why instead (after the receipts of what did become durable)."""
        if entry in self._receipts:
            self._receipts.remove(entry)
        self.fail(f"not stored: {failure.getErrorMessage()}")

    def _drain_receipts(self) -> None:
        receipts = self._receipts
        while receipts and receipts[0][1]:
            self.write(receipts.popleft()[0])
        if not receipts and self._close_after_receipts:
            self._lose_connection()

    def _uncount(self) -> None:
        """Give back the place this connection took under its vhost's max_connections."""
        if self.counted is not None:
            self.factory.limits.disconnect(self.counted)
            self.counted = None

    def disconnect_requested(self) -> None:
        self._uncount()  # before the DISCONNECT's receipt: a client told it is gone may connect again at once
        self.closing = True
        self._close_after_receipts = True
        # The DISCONNECT's own receipt is queued after this returns.
        self.clock.callLater(0, self._drain_receipts)

    def fail(self, message: str, receipt: str | None = None, extra: dict | None = None) -> None:
        """Answer a client mistake with an ERROR naming it, then close. Receipts
        still waiting for the disk go out first: their frames did take effect."""
        if self.closing:
            return
        self.closing = True
        headers = {"message": message.replace("\n", " ")[:500], "content-type": "text/plain"}
        if receipt is not None:
            headers["receipt-id"] = receipt
        if extra:
            headers.update(extra)
        version = self.parser.version
        error = encode_frame("ERROR", headers, message.encode(), version=version)
        if self._receipts:
            if self.factory.broker.store.failure is not None:
                # What waits for a failing disk gets no RECEIPT here: the ERROR says why, now.
                self._receipts = deque(entry for entry in self._receipts if entry[1])
            self._receipts.append([error, True])
            self._close_after_receipts = True
            self._drain_receipts()
            return
        self.write(error)
        self._lose_connection()

    def frame_failed(self, frame: Frame, error: Exception, receipt: str | None = None) -> None:
        """A frame refused (StompError, BrokerError: the ERROR says why), or one our code
        failed on: a bug, so the client hears only that, and the log says where."""
        if isinstance(error, (StompError, BrokerError)):
            self.fail(str(error), receipt)
            return
        peer = self.transport.getPeer()
        host, port = getattr(peer, "host", "?"), getattr(peer, "port", 0)
        self.factory.peer_log.internal_error(host, f"stomp: closing {host}:{port} after a {frame.command[:20]} frame",
                                             error)
        self.fail("internal error handling the frame (the node's log says where)", receipt)

    def _lose_connection(self) -> None:
        """Close once what is written is out; while a large body still goes out in
        pieces, once it is out. The producer goes first: Twisted closes a connection
        whose producer it paused (the socket was full) only once that producer is
        unregistered; it would resume it instead and the socket would stay open for
        good."""
        if self._stream is not None:
            self._close_after_stream = True
            return
        if getattr(self.transport, "producer", None) is not None:
            self.transport.unregisterProducer()
        self.transport.loseConnection()

    # -- IPushProducer: the transport tells us when its buffer is full ------------------

    def pauseProducing(self) -> None:
        self._socket_full = True
        if self.handler is not None:
            self.handler.session.writable = False

    def resumeProducing(self) -> None:
        self._socket_full = False
        if self._stream is not None:
            self._pump()  # it makes the session writable once the body is out
        elif self.handler is not None and not self.closing:
            self.handler.session.set_writable(True)

    def stopProducing(self) -> None:
        pass


class StompFactory(ServerFactory[StompProtocol]):
    protocol = StompProtocol

    def __init__(self, broker: Broker, settings: StompSettings, authenticator, authorizer, clock,
                 node_name: str = "meshgate", threadpool=None, vhosts: VirtualHosts | None = None,
                 permissions: VhostPermissions | None = None, limits: VhostLimits | None = None) -> None:
        self.broker = broker  # the default vhost's; the node's store and memory budget are every vhost's
        self.vhosts = vhosts
        self.settings = settings
        self.authenticator = authenticator
        self.authorizer = authorizer
        # Both authorization maps (docs/vhosts.md, "Permissions") and the vhosts' limits.
        self.access = AccessControl(authorizer, permissions or VhostPermissions((), enabled=False))
        self.limits = limits or VhostLimits()
        self.clock = clock
        self.node_name = node_name
        self.connections: set[StompProtocol] = set()
        self.session_ids: Iterator[int] = itertools.count(1)
        self.threadpool = threadpool
        self.peer_log = PeerLog(log, clock.seconds)  # what clients make the node log, rate-limited per address
