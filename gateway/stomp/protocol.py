"""The Twisted side of STOMP: bytes in and out, CONNECT negotiation,
heart-beats, receipts in order, flow control and errors. Frame handling lives
in :mod:`gateway.stomp.versions`."""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twisted.internet import interfaces, threads
from twisted.internet.protocol import Protocol, ServerFactory
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway import __version__
from gateway.auth import ANONYMOUS, Principal
from gateway.broker.broker import Broker
from gateway.broker.errors import BrokerError
from gateway.broker.message import Message
from gateway.broker.queue import Subscription
from gateway.broker.session import ConnectionInfo
from gateway.broker.vhost_limits import StoredMessages, VhostLimits
from gateway.hostile_log import PeerLog
from gateway.permissions import AccessControl, VhostPermissions
from gateway.stomp.codec import HEARTBEAT, Frame, FrameError, FrameParser, encode_frame
from gateway.stomp.versions import SUPPORTED, VERSIONS, Stomp10, StompError
from gateway.transport import Transport
from model.events import USER_LIMIT, AuthenticationFailed
from model.names import DEFAULT_VHOST, quoted

if TYPE_CHECKING:
    from gateway.broker.vhosts import VirtualHosts

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 30.0
PIECE = 256 * 1024  # of a large body written at a time (versions.STREAM_AT)


@dataclass
class StompSettings:
    max_frame_size: int = 100 * 1024 * 1024  # ActiveMQ's maxFrameSize
    max_headers: int = 1000
    max_header_length: int = 10240
    heartbeat_send_ms: int = 10000
    heartbeat_receive_ms: int = 10000
    heartbeat_grace: float = 1.5
    max_connections: int = 100000
    no_space_fail_after_ms: int = 0  # a persistent producer waiting for store room this long gets an ERROR


@implementer(interfaces.IPushProducer)
class StompProtocol(Protocol):
    factory: StompFactory
    transport: Transport  # type: ignore[assignment]  # Twisted's is ITransport | None: see gateway.transport
    parser: FrameParser  # made in connectionMade, before any byte is read

    def __init__(self) -> None:
        self.handler: Stomp10 | None = None
        self.closing = False
        self.sent_since_beat = False
        self.last_received = 0.0
        self.silence_allowed = 0.0
        self._receipts: deque[list] = deque()
        self._close_after_receipts = False
        self._timers: list = []
        self._reading_paused = False
        self._held: list[Frame] | None = None
        self._partial = 0  # bytes of a frame still arriving, counted against the broker's memory
        self._stream: deque | None = None  # what waits behind a large body going out in pieces
        self._close_after_stream = False
        self._socket_full = False
        self.vhost = DEFAULT_VHOST  # chosen at CONNECT
        self._counted: str | None = None  # the vhost whose connection limit counts this one
        self._stored: StoredMessages | None = None  # its vhost's max_messages, if it has one

    # -- connection lifecycle -------------------------------------------------------------

    def connectionMade(self) -> None:
        factory = self.factory
        settings = factory.settings
        self.parser = FrameParser("1.0", settings.max_frame_size, settings.max_headers, settings.max_header_length)
        self.clock = factory.clock
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
        self._count_partial(0)
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
        if parser.buffered != self._partial and not self.closing:
            self._count_partial(parser.buffered)

    def _count_partial(self, buffered: int) -> None:
        """A large frame counts against the memory limit as it arrives, and a client
        whose frame arrives while memory is full is not read on (unless its frame
        is most of what fills it: only reading on can end that)."""
        broker = self.factory.broker
        grown, self._partial = buffered - self._partial, buffered
        if grown > 0:
            broker.reserve_memory(grown)
            if broker.memory_full and buffered * 2 < broker.memory_used:
                self._pause_reading()
        elif grown < 0:
            broker.release_memory(-grown)

    def process(self, frames: list[Frame]) -> None:
        if self._held is not None:  # still authenticating: keep order, handle later
            self._held.extend(frames)
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
                    self.connect(frame)
                    if self._held is not None:
                        self._held.extend(frames[index + 1:])
                        return
                    continue
                handler.handle(frame)
            except Exception as error:
                self._frame_failed(frame, error, receipt)
                return
            if receipt is not None:
                self.receipt(receipt, store.position != before)
            if frame.command == "SEND":
                sent = True
                persistent = persistent or frame.headers.get("persistent") == "true"
        if sent and self.factory.broker.memory_full and not self._fills_memory_itself():
            self._pause_reading()  # producer flow control: stop reading this client until memory drains
        if sent and self._stored is not None and self._stored.full:
            self._pause_reading(self._stored.when_below)  # its vhost holds max_messages: likewise, until one goes
        if persistent and store.blocked is not None and not self._reading_paused:
            # Store flow control: not read while the store is at store.limit or
            # store.max_disk_usage; after no_space_fail_after_ms of that, an ERROR.
            self._pause_reading(store.when_room)
            wait_ms = self.factory.settings.no_space_fail_after_ms
            if wait_ms:
                self._timers.append(self.clock.callLater(wait_ms / 1000.0, self._no_room, store))

    def _no_room(self, store) -> None:
        if self._reading_paused and store.blocked is not None:
            self.fail(f"no room for persistent messages: {store.blocked} (waited store.fail_after_ms)")

    def _pause_reading(self, until: Callable[[Callable[[], None]], None] | None = None) -> None:
        """Stop reading this client until ``until`` (the broker's memory by default)
        calls back."""
        if not self._reading_paused:
            self._reading_paused = True
            self.transport.pauseProducing()
            (until or self.factory.broker.when_memory_available)(self._resume_reading)

    def _fills_memory_itself(self) -> bool:
        """Its own open transactions hold most of the memory: only reading on
        (to its COMMIT, or to the transaction limit's ERROR) can free it."""
        handler = self.handler
        return handler is not None and handler.session.transaction_bytes * 2 >= self.factory.broker.memory_used

    def _resume_reading(self) -> None:
        if self._reading_paused and not self.closing:
            self._reading_paused = False
            self.transport.resumeProducing()

    # -- CONNECT --------------------------------------------------------------------------

    def connect(self, frame: Frame) -> None:
        headers = frame.headers
        if frame.command not in ("CONNECT", "STOMP"):
            self.fail(f"expected CONNECT or STOMP as the first frame, got {frame.command}", headers.get("receipt"))
            return
        version = _negotiate(headers.get("accept-version"))
        if version is None:
            self.fail(
                f"no supported protocol version in accept-version {headers.get('accept-version')!r}",
                extra={"version": ",".join(SUPPORTED)},
            )
            return
        self.parser.version = version
        authenticator = self.factory.authenticator
        if authenticator.anonymous:
            self._connected(frame, version, ANONYMOUS)
            return
        # A password check costs a PBKDF2 run: keep it off the reactor thread,
        # and hold the frames that follow CONNECT until it is done.
        self._held = []
        login, passcode = headers.get("login"), headers.get("passcode")
        d = threads.deferToThreadPool(self.clock, self.factory.threadpool, authenticator.authenticate, login, passcode)
        d.addCallback(self._authenticated, frame, version)

    def _authenticated(self, principal: Principal | None, frame: Frame, version: str) -> None:
        held, self._held = self._held, None
        if self.closing:
            return
        if principal is None:
            peer = self.transport.getPeer()
            login = frame.headers.get("login")
            self.factory.broker.events.emit(AuthenticationFailed(
                user=None if login is None else login[:USER_LIMIT],
                remote=f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', 0)}"))
            self.fail(f"access refused for user {quoted(login or '')}: wrong login or passcode")
            return
        try:
            self._connected(frame, version, principal)
        except Exception as error:
            self._frame_failed(frame, error)
            return
        if held:
            self.process(held)

    def _connected(self, frame: Frame, version: str, principal: Principal) -> None:
        headers = frame.headers
        factory = self.factory
        session_id = f"{factory.node_name}-{next(factory.session_ids)}"
        reply = {"version": version, "server": f"meshgate/{__version__}", "session": session_id}
        beats = _parse_heartbeat(headers.get("heart-beat", "0,0")) if version != "1.0" else None
        if version != "1.0" and beats is None:
            self.fail(f"malformed heart-beat header {headers.get('heart-beat', '')[:40]!r}: expected 'cx,cy'")
            return
        host = headers.get("host")
        broker = factory.broker if factory.vhosts is None else factory.vhosts.for_stomp_host(host)
        if broker is None:
            self.fail(f"no virtual host named {quoted(host or '')} on this broker")
            return
        vhost = self.vhost = _vhost_name(factory, host, broker)
        if not factory.access.may_open(principal, vhost):  # RabbitMQ's words, as AMQP's 530 has them
            self.fail(f"access to vhost {quoted(vhost)} refused for user {quoted(principal.name)}")
            return
        refusal = factory.limits.connect(vhost)
        if refusal is not None:
            self.fail(refusal)
            return
        self._counted = vhost
        self._stored = factory.limits.stored(vhost)
        try:
            session = broker.open_session(self, session_id, headers.get("client-id"))
        except BrokerError as error:  # a client-id no client could address
            self.fail(str(error))
            return
        if beats is not None:
            settings = factory.settings
            reply["heart-beat"] = f"{settings.heartbeat_send_ms},{settings.heartbeat_receive_ms}"
            self._start_heartbeats(beats, settings)
        session.principal = principal
        peer = self.transport.getPeer()
        remote = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', 0)}"
        session.connection = ConnectionInfo("stomp", version, remote, self.clock.seconds(), self.fail)
        self.handler = VERSIONS[version](self, session, principal)
        self.write(encode_frame("CONNECTED", reply, version=version))

    # -- heart-beats ----------------------------------------------------------------------

    def _start_heartbeats(self, client: tuple[int, int], settings: StompSettings) -> None:
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
        if self._counted is not None:
            self.factory.limits.disconnect(self._counted)
            self._counted = None

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

    def _frame_failed(self, frame: Frame, error: Exception, receipt: str | None = None) -> None:
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
        self.session_ids = itertools.count(1)
        self.threadpool = threadpool
        self.peer_log = PeerLog(log, clock.seconds)  # what clients make the node log, rate-limited per address



def _vhost_name(factory: StompFactory, host: str | None, broker: Broker) -> str:
    """The name of the vhost CONNECT chose: ``host`` if it names one, else the default vhost's."""
    if host is not None and factory.vhosts is not None and factory.vhosts.get(host) is broker:
        return host
    return DEFAULT_VHOST


def _negotiate(accept_version: str | None) -> str | None:
    if accept_version is None:
        return "1.0"
    offered = {v.strip() for v in accept_version.split(",")}
    for version in reversed(SUPPORTED):
        if version in offered:
            return version
    return None


def _parse_heartbeat(value: str) -> tuple[int, int] | None:
    send, sep, receive = value.partition(",")
    send, receive = send.strip(), receive.strip()
    if not sep or not send.isdigit() or not receive.isdigit():
        return None
    return int(send), int(receive)
