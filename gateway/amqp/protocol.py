"""The Twisted side of AMQP 0-9-1: bytes in and out, the connection's handshake
(protocol header, start, tune, open), heart-beats, flow control, and connection
errors. Channels, and what they do with the broker core, are gateway.amqp.channel.

What a client sends wrong gets the reply code the specification gives it; anything
else that goes wrong while handling its bytes (a bug) closes that connection alone
with 541 "internal error". Lines about a peer go through the factory's PeerLog:
bounded, and rate-limited per peer address."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twisted.internet import interfaces, threads
from twisted.internet.protocol import Protocol, ServerFactory
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway import __version__
from gateway.amqp import spec
from gateway.amqp.channel import Channel
from gateway.amqp.codec import encode_heartbeat, encode_method
from gateway.amqp.fields import DecodeError, decode_table
from gateway.amqp.lifetimes import QueueLifetimes
from gateway.amqp.reader import Command, ContentRefused, FrameReader, Heartbeat, ProtocolHeader
from gateway.amqp.spec import AmqpError
from gateway.auth import ANONYMOUS, Authorizer, Principal
from gateway.broker.broker import Broker
from gateway.broker.session import ConnectionInfo, Session
from gateway.broker.vhost_limits import VhostLimits
from gateway.hostile_log import PeerLog, quote
from gateway.permissions import AccessControl, VhostPermissions
from gateway.transport import Transport
from model.events import USER_LIMIT, AuthenticationFailed
from model.mesh import Connection
from model.names import DEFAULT_VHOST

if TYPE_CHECKING:
    from gateway.broker.vhosts import VirtualHosts

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 30.0
CLOSE_TIMEOUT = 2.0  # after a connection.close, how long the client has to answer
HOLD_LIMIT = 65536  # bytes of deliveries held for one write at most (Twisted's transport buffer size)
_HARD = {spec.CONNECTION_FORCED, spec.INVALID_PATH, spec.FRAME_ERROR, spec.SYNTAX_ERROR, spec.COMMAND_INVALID,
         spec.CHANNEL_ERROR, spec.UNEXPECTED_FRAME, spec.RESOURCE_ERROR, spec.NOT_ALLOWED, spec.NOT_IMPLEMENTED,
         spec.INTERNAL_ERROR}
SERVER_CAPABILITIES = {
    "publisher_confirms": True, "exchange_exchange_bindings": True, "basic.nack": True,
    "consumer_cancel_notify": True, "connection.blocked": True, "authentication_failure_close": True,
    "per_consumer_qos": True, "consumer_priorities": False, "direct_reply_to": False,
}


@dataclass
class AmqpSettings:
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat_s: int = 60  # offered; the client's choice wins, 0 turns them off
    max_message_size: int = 100 * 1024 * 1024
    max_connections: int = 100000


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
        self.session: Session | None = None  # the connection's own, from connection.open (see _listed)
        self.broker: Broker  # its vhost's, from connection.open (before which no channel opens)
        self.lifetimes: QueueLifetimes  # its vhost's AMQP queue lifetimes, likewise
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
        except Exception as error:  # the last line of defence: a bug closes this connection only
            self.internal_error(error)

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

    def _protocol_header(self, header: ProtocolHeader) -> None:
        if not header.ok:
            # The spec: answer with the protocol header we speak, then close.
            self.transport.write(spec.PROTOCOL_HEADER)
            self.state = "closed"
            self._lose_connection()
            return
        self.state = "start"
        self.write(encode_method(
            0, "connection.start", version_major=0, version_minor=9,
            server_properties={"product": "Meshgate", "version": __version__, "platform": "Python/Twisted",
                               "cluster_name": self.factory.node_name, "capabilities": SERVER_CAPABILITIES},
            mechanisms="PLAIN AMQPLAIN", locales="en_US"))

    # -- the handshake --------------------------------------------------------------------

    def method_connection_start_ok(self, command: Command) -> None:
        if self.state != "start":
            raise AmqpError(spec.COMMAND_INVALID, "connection.start_ok out of turn", 0, 10, 11)
        args = command.args
        self.client_properties = args.client_properties or {}
        login, password = _credentials(args.mechanism, args.response)
        self.state = "authenticating"
        authenticator = self.factory.authenticator
        if authenticator.anonymous:
            self._authenticated(ANONYMOUS, login)
            return
        d = threads.deferToThreadPool(self.clock, self.factory.threadpool, authenticator.authenticate, login,
                                      password)
        d.addCallback(self._authenticated, login)
        d.addErrback(self._authenticator_failed)

    def _authenticator_failed(self, failure: Failure) -> None:
        assert failure.value is not None  # Twisted's type allows None; a Failure made from an exception holds it
        self.internal_error(failure.value)

    def _authenticated(self, principal: Principal | None, login: str | None) -> None:
        if self.state != "authenticating":
            return
        if principal is None:
            self.factory.broker.events.emit(AuthenticationFailed(user=(login or "")[:USER_LIMIT], remote=self.remote))
            self.close_connection(AmqpError(spec.ACCESS_REFUSED, f"login refused for user {quote(login or '')}: "
                                                                  "wrong user or password", 0, 10, 11))
            return
        self.principal = principal
        self.state = "tune"
        settings = self.factory.settings
        self.write(encode_method(0, "connection.tune", channel_max=settings.channel_max,
                                 frame_max=settings.frame_max, heartbeat=settings.heartbeat_s))

    def method_connection_tune_ok(self, command: Command) -> None:
        if self.state != "tune":
            raise AmqpError(spec.COMMAND_INVALID, "connection.tune_ok out of turn", 0, 10, 31)
        args = command.args
        settings = self.factory.settings
        if args.frame_max and args.frame_max < spec.FRAME_MIN_SIZE:
            raise AmqpError(spec.NOT_ALLOWED, f"frame_max {args.frame_max} is under the minimum of "
                                              f"{spec.FRAME_MIN_SIZE}", 0, 10, 31)
        self.frame_max = min(args.frame_max or settings.frame_max, settings.frame_max)
        self.reader.frame_max = self.frame_max
        self.channel_max = min(args.channel_max or settings.channel_max, settings.channel_max)
        self.heartbeat = args.heartbeat
        self.state = "opening"
        if self.heartbeat:
            self._timers.append(self.clock.callLater(self.heartbeat / 2, self._beat))
            self._timers.append(self.clock.callLater(self.heartbeat / 2, self._check_alive))

    def method_connection_open(self, command: Command) -> None:
        if self.state != "opening":
            raise AmqpError(spec.COMMAND_INVALID, "connection.open out of turn", 0, 10, 40)
        factory = self.factory
        vhost = command.args.virtual_host or DEFAULT_VHOST
        broker = factory.broker_for(vhost)
        if broker is None:  # RabbitMQ's words, which clients and their users know
            raise AmqpError(spec.NOT_ALLOWED, f"vhost {quote(vhost)} not found", 0, 10, 40)
        principal = self.principal or ANONYMOUS
        if not factory.access.may_open(principal, vhost):  # RabbitMQ's words
            raise AmqpError(spec.NOT_ALLOWED, f"access to vhost {quote(vhost)} refused for user "
                                              f"{quote(principal.name)}", 0, 10, 40)
        refusal = factory.limits.connect(vhost)
        if refusal is not None:
            raise AmqpError(spec.NOT_ALLOWED, refusal, 0, 10, 40)
        self._counted = self.vhost = vhost
        self.broker = broker
        self.lifetimes = factory.lifetimes(broker)
        self.name = f"{factory.node_name}-amqp-{next(factory.connection_ids)}"
        # Shared by the sessions of its channels: the management model lists the connection once.
        self.info = ConnectionInfo("amqp", "0-9-1", self.remote, self.clock.seconds(), self.close_from_admin, self.name,
                                   self.describe)
        self._listed()
        self.state = "open"
        self.write(encode_method(0, "connection.open_ok"))
        if broker.memory_full:
            self.set_blocked(True)

    def _listed(self) -> None:
        """The management model lists a connection from its sessions (its channels'
        share ``info``); this one, holding no subscriptions, lists it from
        connection.open on, before any channel, as STOMP's does from CONNECT."""
        self.session = self.broker.open_session(_NO_DELIVERIES, self.name)
        self.session.principal = self.principal
        self.session.connection = self.info

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

    def pause_reading(self, until) -> None:
        """Stop reading the client (a producer the broker cannot take from now) until
        ``until`` calls back; it hears connection.blocked meanwhile."""
        if not self._reading_paused:
            self._reading_paused = True
            self.transport.pauseProducing()
            self.set_blocked(True)
            until(self._resume_reading)

    def _resume_reading(self) -> None:
        if self._reading_paused and self.state != "closed":
            self._reading_paused = False
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


class _NoDeliveries:
    """The sink of a connection's own session: it never subscribes (its channels do)."""

    def deliver(self, subscription, message) -> None:
        raise AssertionError("an AMQP connection's own session has no subscriptions")


_NO_DELIVERIES = _NoDeliveries()


class AmqpFactory(ServerFactory[AmqpProtocol]):
    protocol = AmqpProtocol

    def __init__(self, broker: Broker, settings: AmqpSettings, authenticator, authorizer, clock,
                 node_name: str = "meshgate", threadpool=None, vhosts: VirtualHosts | None = None,
                 permissions: VhostPermissions | None = None, limits: VhostLimits | None = None) -> None:
        self.broker = broker
        self.settings = settings
        self.authenticator = authenticator
        self.authorizer = authorizer
        # Both authorization maps (docs/vhosts.md, "Permissions") and the vhosts' limits.
        nobody_refused = Authorizer((), enabled=False)  # a factory may be made without a map (benches)
        self.access = AccessControl(authorizer if authorizer is not None else nobody_refused,
                                    permissions or VhostPermissions((), enabled=False))
        self.limits = limits or VhostLimits()
        self.clock = clock
        self.node_name = node_name
        self.threadpool = threadpool
        self.connections: set[AmqpProtocol] = set()
        self.connection_ids = itertools.count(1)
        self.peer_log = PeerLog(log, clock.seconds)
        self.vhosts = vhosts
        self._lifetimes: dict[Broker, QueueLifetimes] = {}  # one per vhost

    def broker_for(self, vhost: str) -> Broker | None:
        """The broker of the vhost connection.open names, None if there is none. Without
        vhosts (a factory made on one broker) every name is that broker."""
        if self.vhosts is None:
            return self.broker
        return self.vhosts.get(vhost)

    def lifetimes(self, broker: Broker) -> QueueLifetimes:
        """Exclusive, auto-delete and x-expires queues of ``broker``'s vhost."""
        lifetimes = self._lifetimes.get(broker)
        if lifetimes is None:
            lifetimes = self._lifetimes[broker] = QueueLifetimes(broker, self.clock)
        return lifetimes



def _credentials(mechanism: str, response: bytes) -> tuple[str | None, str | None]:
    """The login and password a client gave (PLAIN: authzid NUL login NUL password;
    AMQPLAIN: a field table without its length, LOGIN and PASSWORD). A response that
    is not what its mechanism says is a refused login (403), what clients report as one."""
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) == 3:
            return parts[1].decode(errors="replace"), parts[2].decode(errors="replace")
        raise AmqpError(spec.ACCESS_REFUSED, "a PLAIN response is authzid NUL login NUL password", 0, 10, 11)
    if mechanism == "AMQPLAIN":
        try:
            table, _ = decode_table(len(response).to_bytes(4, "big") + response, 0)
        except DecodeError as error:
            raise AmqpError(spec.ACCESS_REFUSED, f"a malformed AMQPLAIN response: {error}", 0, 10, 11) from None
        login, password = table.get("LOGIN"), table.get("PASSWORD")
        if not all(value is None or isinstance(value, str) for value in (login, password)):
            raise AmqpError(spec.ACCESS_REFUSED, "an AMQPLAIN response's LOGIN and PASSWORD are UTF-8 strings", 0,
                            10, 11)
        return login, password
    raise AmqpError(spec.ACCESS_REFUSED, f"unknown mechanism {quote(mechanism)}; use PLAIN or AMQPLAIN", 0, 10, 11)

