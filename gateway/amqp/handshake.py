"""How an AMQP connection opens, for gateway.amqp.protocol: the protocol header,
connection.start and its start_ok (the credentials a mechanism carries, checked by
the authenticator on its thread pool), tune and tune_ok (frame_max, channel_max,
heart-beats), and connection.open, which chooses the vhost under both authorization
maps and its connection limit. Each handler here is one of AmqpProtocol's methods
(its class body lists them), as gateway.amqp.declarations' are Channel's: dispatch
by method name is unchanged, and nothing here runs per message."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet import threads
from twisted.python.failure import Failure

from gateway import __version__
from gateway.amqp import spec
from gateway.amqp.codec import encode_method
from gateway.amqp.fields import DecodeError, decode_table
from gateway.amqp.reader import Command, ProtocolHeader
from gateway.amqp.spec import AmqpError
from gateway.auth import ANONYMOUS, Principal
from gateway.broker.session import ConnectionInfo
from gateway.hostile_log import quote
from gateway.permissions import admit
from model.events import USER_LIMIT, AuthenticationFailed
from model.names import DEFAULT_VHOST

if TYPE_CHECKING:
    from gateway.amqp.protocol import AmqpProtocol

SERVER_CAPABILITIES = {
    "publisher_confirms": True, "exchange_exchange_bindings": True, "basic.nack": True,
    "consumer_cancel_notify": True, "connection.blocked": True, "authentication_failure_close": True,
    "per_consumer_qos": True, "consumer_priorities": False, "direct_reply_to": False,
}


def protocol_header(connection: AmqpProtocol, header: ProtocolHeader) -> None:
    if not header.ok:
        # The spec: answer with the protocol header we speak, then close.
        connection.transport.write(spec.PROTOCOL_HEADER)
        connection.state = "closed"
        connection._lose_connection()
        return
    connection.state = "start"
    connection.write(encode_method(
        0, "connection.start", version_major=0, version_minor=9,
        server_properties={"product": "Meshgate", "version": __version__, "platform": "Python/Twisted",
                           "cluster_name": connection.factory.node_name, "capabilities": SERVER_CAPABILITIES},
        mechanisms="PLAIN AMQPLAIN", locales="en_US"))


def method_connection_start_ok(connection: AmqpProtocol, command: Command) -> None:
    if connection.state != "start":
        raise AmqpError(spec.COMMAND_INVALID, "connection.start_ok out of turn", 0, 10, 11)
    args = command.args
    connection.client_properties = args.client_properties or {}
    login, password = credentials(args.mechanism, args.response)
    connection.state = "authenticating"
    authenticator = connection.factory.authenticator
    if authenticator.anonymous:
        _authenticated(ANONYMOUS, connection, login)
        return
    d = threads.deferToThreadPool(connection.clock, connection.factory.threadpool, authenticator.authenticate, login,
                                  password)
    d.addCallback(_authenticated, connection, login)
    d.addErrback(_authenticator_failed, connection)


def _authenticator_failed(failure: Failure, connection: AmqpProtocol) -> None:
    assert failure.value is not None  # Twisted's type allows None; a Failure made from an exception holds it
    connection.internal_error(failure.value)


def _authenticated(principal: Principal | None, connection: AmqpProtocol, login: str | None) -> None:
    """The authenticator's answer (a Deferred's result, hence first)."""
    if connection.state != "authenticating":
        return
    if principal is None:
        connection.factory.broker.events.emit(AuthenticationFailed(user=(login or "")[:USER_LIMIT],
                                                                   remote=connection.remote))
        connection.close_connection(AmqpError(spec.ACCESS_REFUSED, f"login refused for user {quote(login or '')}: "
                                                                    "wrong user or password", 0, 10, 11))
        return
    connection.principal = principal
    connection.state = "tune"
    settings = connection.factory.settings
    connection.write(encode_method(0, "connection.tune", channel_max=settings.channel_max,
                                   frame_max=settings.frame_max, heartbeat=settings.heartbeat_s))


def method_connection_tune_ok(connection: AmqpProtocol, command: Command) -> None:
    if connection.state != "tune":
        raise AmqpError(spec.COMMAND_INVALID, "connection.tune_ok out of turn", 0, 10, 31)
    args = command.args
    settings = connection.factory.settings
    if args.frame_max and args.frame_max < spec.FRAME_MIN_SIZE:
        raise AmqpError(spec.NOT_ALLOWED, f"frame_max {args.frame_max} is under the minimum of "
                                          f"{spec.FRAME_MIN_SIZE}", 0, 10, 31)
    connection.frame_max = min(args.frame_max or settings.frame_max, settings.frame_max)
    connection.reader.frame_max = connection.frame_max
    connection.channel_max = min(args.channel_max or settings.channel_max, settings.channel_max)
    connection.heartbeat = args.heartbeat
    connection.state = "opening"
    if connection.heartbeat:
        connection._timers.append(connection.clock.callLater(connection.heartbeat / 2, connection._beat))
        connection._timers.append(connection.clock.callLater(connection.heartbeat / 2, connection._check_alive))


def method_connection_open(connection: AmqpProtocol, command: Command) -> None:
    if connection.state != "opening":
        raise AmqpError(spec.COMMAND_INVALID, "connection.open out of turn", 0, 10, 40)
    factory = connection.factory
    vhost = command.args.virtual_host or DEFAULT_VHOST
    broker = factory.broker_for(vhost)
    if broker is None:  # RabbitMQ's words, which clients and their users know
        raise AmqpError(spec.NOT_ALLOWED, f"vhost {quote(vhost)} not found", 0, 10, 40)
    principal = connection.principal or ANONYMOUS
    refusal = admit(factory.access, factory.limits, principal, vhost)
    if refusal is not None:
        raise AmqpError(spec.NOT_ALLOWED, refusal, 0, 10, 40)
    connection._counted = connection.vhost = vhost
    connection.broker = broker
    connection.lifetimes = factory.lifetimes(broker)
    connection.name = f"{factory.node_name}-amqp-{next(factory.connection_ids)}"
    # Shared by the sessions of its channels: the management model lists the connection once.
    connection.info = ConnectionInfo("amqp", "0-9-1", connection.remote, connection.clock.seconds(),
                                     connection.close_from_admin, connection.name, connection.describe)
    _listed(connection)
    connection.state = "open"
    connection.write(encode_method(0, "connection.open_ok"))
    if broker.memory_full:
        connection.set_blocked(True)


def _listed(connection: AmqpProtocol) -> None:
    """The management model lists a connection from its sessions (its channels'
    share ``info``); this one, holding no subscriptions, lists it from
    connection.open on, before any channel, as STOMP's does from CONNECT."""
    connection.session = connection.broker.open_session(_NO_DELIVERIES, connection.name)
    connection.session.principal = connection.principal
    connection.session.connection = connection.info


class _NoDeliveries:
    """The sink of a connection's own session: it never subscribes (its channels do)."""

    def deliver(self, subscription, message) -> None:
        raise AssertionError("an AMQP connection's own session has no subscriptions")


_NO_DELIVERIES = _NoDeliveries()


def credentials(mechanism: str, response: bytes) -> tuple[str | None, str | None]:
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
