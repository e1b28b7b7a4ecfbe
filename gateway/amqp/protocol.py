"""The Twisted side of AMQP 0-9-1: bytes in and out, the connection's life from its
handshake (gateway.amqp.handshake) to its close, heart-beats, flow control, and
connection errors. Channels, and what they do with the broker core, are
gateway.amqp.channel; what a listener's connections share is gateway.amqp.factory.

What a client sends wrong gets the reply code the specification gives it; anything
else that goes wrong while handling its bytes (a bug) closes that connection alone
with 541 "internal error". Lines about a peer go through the factory's PeerLog:
bounded, and rate-limited per peer address."""

from __future__ import annotations

import logging
from collections.abc import Callable

from twisted.internet import interfaces
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.amqp import handshake, spec
from gateway.amqp.channel import Channel
from gateway.amqp.codec import encode_heartbeat, encode_method
from gateway.amqp.factory import AmqpListener, AmqpSettings
from gateway.amqp.lifetimes import QueueLifetimes
from gateway.amqp.reader import Command, ContentRefused, FrameReader, Heartbeat, ProtocolHeader
from gateway.amqp.spec import AmqpError
from gateway.auth import Principal
from gateway.broker.broker import Broker
from gateway.broker.producer_pauses import ProducerPause
from gateway.broker.session import ConnectionInfo, Session
from gateway.hostile_log import quote
from gateway.transport import Transport
from model.mesh import Connection
from model.names import DEFAULT_VHOST

__all__ = ["AmqpFactory", "AmqpProtocol", "AmqpSettings"]  # AmqpSettings: where its users have always imported it

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 30.0
CLOSE_TIMEOUT = 2.0  # after a connection.close, how long the client has to answer
HOLD_LIMIT = 65536  # bytes of deliveries held for one write at most (Twisted's transport buffer size)
_HARD = {spec.CONNECTION_FORCED, spec.INVALID_PATH, spec.FRAME_ERROR, spec.SYNTAX_ERROR, spec.COMMAND_INVALID,
         spec.CHANNEL_ERROR, spec.UNEXPECTED_FRAME, spec.RESOURCE_ERROR, spec.NOT_ALLOWED, spec.NOT_IMPLEMENTED,
         spec.INTERNAL_ERROR}



@implementer(interfaces.IPushProducer)
class AmqpProtocol(Protocol):
    factory: AmqpFactory
    transport: Transport  # type: ignore[assignment]  # Twisted's is ITransport | None: see gateway.transport

    def __init__(self) -> None:
        self.reader = FrameReader()
        self.state = "header"  # header, start, tune, open, open, closing, closed
        self.channels: dict[int, Channel] = {}
        self.principal: Principal | None = None
        self.frame_max = spec.FRAME_MIN_SIZE
        self.channel_max = 0
        self.heartbeat = 0
        self.name = ""
        self.client_properties: dict = {}
        self.blocked = False  # connection.blocked sent
        self._reading_paused = False
        self._timers: list = []
        self._sent = False
        self._last_received = 0.0
        self._held: list[bytes] = []  # what write_soon holds for the end of the reactor turn
        self._held_size = 0
        self.session: Session | None = None  # the connection's own, from connection.open (see handshake._listed)
        self.broker: Broker  # its vhost's, from connection.open (before which no channel opens)
        self.lifetimes: QueueLifetimes  # its vhost's AMQP queue lifetimes, likewise
        self.info: ConnectionInfo  # what the management model lists of it, likewise
        self.vhost = DEFAULT_VHOST  # its name, from connection.open
        self._counted: str | None = None  # the vhost whose connection limit counts this one
        self.peer_host = "?"  # the client's address: what its log budget is kept by
        self.remote = "?"  # its address and port

    # -- connection lifecycle -------------------------------------------------------------

    def connectionMade(self) -> None:
        factory = self.factory
        self.clock = factory.clock
        factory.connections.add(self)
        peer = self.transport.getPeer()
        self.peer_host = str(getattr(peer, "host", "?"))
        self.remote = f"{self.peer_host}:{getattr(peer, 'port', 0)}"
        settings = factory.settings
        self.reader = FrameReader(frame_max=settings.frame_max, max_body=settings.max_message_size,
                                  channel_max=settings.channel_max, closed_until_open=True)
        self.transport.registerProducer(self, True)
        # A confirm or a delivery is a small write after a pause: without this, Nagle's
        # algorithm holds it until the client's delayed ACK (up to 40 ms).
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)
        if len(factory.connections) > factory.settings.max_connections:
            # Before connection.start nothing can say why: the socket just closes.
            factory.peer_log.warning(self.peer_host, "amqp: refusing %s: amqp.max_connections (%d) reached",
                                     self.remote, settings.max_connections)
            self.state = "closed"
            self.transport.abortConnection()
            return
        self._timers.append(self.clock.callLater(HANDSHAKE_TIMEOUT, self._handshake_timeout))

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.state = "closed"
        self.factory.connections.discard(self)
        for timer in self._timers:
            if timer.active():
                timer.cancel()
        for channel in list(self.channels.values()):
            channel.closed()
        self.channels.clear()
        if self._reading_paused:  # only channels pause it, so it has chosen its vhost's broker
            self.broker.paused_producers.pop(self, None)
        if self.session is not None:  # connection.open chose its vhost
            self.session.close()
            self.lifetimes.connection_gone(self)
        self._uncount()

    def _handshake_timeout(self) -> None:
        if self.state not in ("open", "closed"):
            self.factory.peer_log.info(self.peer_host, "amqp: %s did not finish the handshake in time", self.remote)
            self.transport.abortConnection()

    # -- bytes in -------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self.state == "closed":
            return
        self._last_received = self.clock.seconds()
        try:
            try:
                events = self.reader.feed(data)
            except AmqpError as error:
                self.close_connection(error)
                return
            for event in events:
                if self.state == "closed":
                    return
                self.handle(event)
        except Exception as error:  # the last line of defence: a bug closes this connection only
            self.internal_error(error)

    def handle(self, event: Command | Heartbeat | ProtocolHeader | ContentRefused) -> None:
        """One event the reader gave, or a channel's method that waited for another's answer."""
        if self.state == "closed":
            return
        try:
            if isinstance(event, Command):
                self._command(event)
            elif isinstance(event, Heartbeat):
                pass
            elif isinstance(event, ProtocolHeader):
                self._protocol_header(event)
            elif isinstance(event, ContentRefused):
                self.channel_error(event.error)
        except AmqpError as error:
            if error.code in _HARD or not error.channel:
                self.close_connection(error)
            else:
                self.channel_error(error)

    def internal_error(self, error: BaseException) -> None:
        """Our code raised ``error`` on this connection's input: the client hears 541
        (not what went wrong: that is ours to read, in the log), the node goes on."""
        self.factory.peer_log.internal_error(self.peer_host, f"amqp: closing {self.name or self.remote}", error)
        try:
            self.close_connection(AmqpError(spec.INTERNAL_ERROR, "internal error"))
        except Exception:  # closing failed too (a channel's cleanup): drop the socket
            self.state = "closed"
            self.transport.abortConnection()

    def _command(self, command: Command) -> None:
        name = command.spec.name
        if self.state == "closing":
            if name == "connection.close_ok":
                self._lose_connection()
            elif name == "connection.close":
                self.write(encode_method(0, "connection.close_ok"))
            return
        if command.channel == 0:  # a connection method: the reader lets no other through on channel 0
            handler = getattr(self, "method_" + name.replace(".", "_"), None)
            if handler is None:
                raise AmqpError(spec.COMMAND_INVALID, f"a client does not send {name}", 0, command.spec.class_id,
                                command.spec.method_id)
            handler(command)
            return
        if self.state != "open":
            raise AmqpError(spec.CHANNEL_ERROR, f"{name} before the connection was opened", 0,
                            command.spec.class_id, command.spec.method_id)
        channel = self.channels.get(command.channel)
        if name == "channel.open":
            self._open_channel(command)
        elif channel is None:
            raise AmqpError(spec.CHANNEL_ERROR, f"{name} on channel {command.channel}, which is not open", 0,
                            command.spec.class_id, command.spec.method_id)
        else:
            channel.command(command)

    # -- the handshake: gateway.amqp.handshake --------------------------------------------

    _protocol_header = handshake.protocol_header
    method_connection_start_ok = handshake.method_connection_start_ok
    method_connection_tune_ok = handshake.method_connection_tune_ok
    method_connection_open = handshake.method_connection_open

    # -- closing --------------------------------------------------------------------------

    def _uncount(self) -> None:
        """Give back the place this connection took under its vhost's max_connections."""
        if self._counted is not None:
            self.factory.limits.disconnect(self._counted)
            self._counted = None

    def method_connection_close(self, command: Command) -> None:
        self._uncount()  # before close_ok: a client told its connection is closed may open another at once
        # Its channels end before close_ok goes: a client that got close_ok finds them gone.
        for channel in list(self.channels.values()):
            channel.closed()
        self.channels.clear()
        self.write(encode_method(0, "connection.close_ok"))
        self.state = "closed"
        self._lose_connection()

    def method_connection_close_ok(self, command: Command) -> None:
        self._lose_connection()

    def _lose_connection(self) -> None:
        """Close once what is written is out. The producer goes first: Twisted closes a
        connection whose producer it paused (the socket was full of deliveries) only once
        that producer is unregistered; it would resume it instead, and stay open for good."""
        if getattr(self.transport, "producer", None) is not None:
            self.transport.unregisterProducer()
        self.transport.loseConnection()

    # -- channels -------------------------------------------------------------------------

    def _open_channel(self, command: Command) -> None:
        number = command.channel
        if number in self.channels:
            raise AmqpError(spec.CHANNEL_ERROR, f"channel {number} is already open", 0, 20, 10)
        if number > self.channel_max:
            raise AmqpError(spec.CHANNEL_ERROR, f"channel {number} is over channel_max ({self.channel_max})", 0,
                            20, 10)
        self.channels[number] = Channel(self, number)
        self.write(encode_method(number, "channel.open_ok"))

    def channel_error(self, error: AmqpError) -> None:
        """A soft error: the channel closes, the connection goes on."""
        channel = self.channels.get(error.channel)
        self.reader.forget_channel(error.channel)
        if channel is None or channel.closing:
            return
        self.factory.peer_log.info(self.peer_host, "amqp: closing channel %d of %s: %d %s", error.channel, self.name,
                                   error.code, error.text)
        channel.close_with(error)

    def channel_closed(self, number: int) -> None:
        self.channels.pop(number, None)
        self.reader.forget_channel(number)

    def close_connection(self, error: AmqpError) -> None:
        """A hard error (or a refusal): say why, close, wait briefly for close_ok."""
        if self.state in ("closing", "closed"):
            return
        self.factory.peer_log.info(self.peer_host, "amqp: closing %s: %d %s", self.name or self.remote, error.code,
                                   error.text)
        self._close(error)

    def close_from_admin(self, reason: str) -> None:
        if self.state in ("closing", "closed"):
            return
        # An administrator's doing, not the peer's: always logged, whatever the peer's log budget.
        log.info("amqp: closing %s at an administrator's request: %s", self.name, quote(reason))
        self._close(AmqpError(spec.CONNECTION_FORCED, reason))

    def _close(self, error: AmqpError) -> None:
        self.write(encode_method(0, "connection.close", reply_code=error.code, reply_text=error.text,
                                 class_id=error.class_id, method_id=error.method_id))
        self.state = "closing"
        self.reader.connection_closing()
        for channel in list(self.channels.values()):
            channel.closed()
        self.channels.clear()
        self._timers.append(self.clock.callLater(CLOSE_TIMEOUT, self._lose_connection))

    def describe(self, row: Connection) -> None:
        """The management model's row for this connection gets its open channels; its
        unacked are theirs (basic.get deliveries, and cancelled consumers' ones, too)."""
        channels = [channel.summary() for _, channel in sorted(self.channels.items()) if not channel.closing]
        row.channels = len(channels)
        row.channel_details = channels
        row.unacked = sum(channel.unacked for channel in channels)

    # -- heart-beats ----------------------------------------------------------------------

    def _beat(self) -> None:
        if self.state in ("closing", "closed"):
            return
        if not self._sent:
            self.transport.write(encode_heartbeat())
        self._sent = False
        self._timers.append(self.clock.callLater(self.heartbeat / 2, self._beat))

    def _check_alive(self) -> None:
        if self.state == "closed":
            return
        if self.clock.seconds() - self._last_received > self.heartbeat * 2:
            log.info("amqp: closing %s: no heartbeat from the client for %d s", self.name, self.heartbeat * 2)
            self.state = "closed"
            self.transport.abortConnection()
            return
        self._timers.append(self.clock.callLater(self.heartbeat / 2, self._check_alive))

    # -- bytes out and flow control -------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._held:
            self.flush()
        self._sent = True
        self.transport.write(data)

    def writeSequence(self, frames: list[bytes]) -> None:
        if self._held:
            self.flush()
        self._sent = True
        self.transport.writeSequence(frames)

    def write_soon(self, data: bytes) -> None:
        """Write by the end of this reactor turn (deliveries): the turn's writes go to
        the transport as one, sooner once HOLD_LIMIT bytes wait (the transport's own
        buffer limit then pauses the core's dispatching to this connection). Any
        other write flushes them first, so the client reads everything in order."""
        held = self._held
        if not held:
            self.clock.callLater(0, self.flush)
        held.append(data)
        self._held_size += len(data)
        if self._held_size >= HOLD_LIMIT:
            self.flush()

    def flush(self) -> None:
        held = self._held
        if held:
            self._held = []
            self._held_size = 0
            self._sent = True
            self.transport.write(b"".join(held))

    def pause_reading(self, until, limit_key: str | None = None,
                      limit_state: Callable[[], str] | None = None) -> None:
        """Stop reading the client (a producer the broker cannot take from now) until
        ``until`` calls back. ``limit_key`` is the limit that is reached
        (gateway/broker/producer_pauses.py): the client hears connection.blocked, and the
        doctor is told. None: no resource is short, it is sending ahead of its answers."""
        if not self._reading_paused:
            self._reading_paused = True
            self.transport.pauseProducing()
            if limit_key is not None:
                broker = self.broker
                broker.paused_producers[self] = ProducerPause(
                    limit_key=limit_key, since=self.clock.seconds(), protocol="amqp",
                    vhost=self.vhost, connection_name=lambda: self.name, limit_state=limit_state)
                self.set_blocked(True)
            until(self._resume_reading)

    def _resume_reading(self) -> None:
        if self._reading_paused and self.state != "closed":
            self._reading_paused = False
            self.broker.paused_producers.pop(self, None)
            self.set_blocked(False)
            self.transport.resumeProducing()

    def set_blocked(self, blocked: bool) -> None:
        if blocked == self.blocked or self.state != "open":
            return
        capabilities = self.client_properties.get("capabilities")
        self.blocked = blocked
        if isinstance(capabilities, dict) and capabilities.get("connection.blocked"):
            if blocked:
                self.write(encode_method(0, "connection.blocked", reason="low on memory or disk"))
            else:
                self.write(encode_method(0, "connection.unblocked"))

    # IPushProducer: the socket's send buffer is full (pause) or drained (resume).
    def pauseProducing(self) -> None:
        for channel in self.channels.values():
            channel.session.set_writable(False)

    def resumeProducing(self) -> None:
        for channel in list(self.channels.values()):
            channel.session.set_writable(True)

    def stopProducing(self) -> None:
        pass


class AmqpFactory(AmqpListener[AmqpProtocol]):
    """A listener's factory of AmqpProtocols; what they share is AmqpListener's."""

    protocol = AmqpProtocol
