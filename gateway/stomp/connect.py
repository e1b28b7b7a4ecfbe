"""CONNECT (or STOMP), a connection's first frame: the version both sides speak, who
the client is (a password check runs off the reactor thread, the frames after CONNECT
held meanwhile), the vhost its ``host`` header names and whether the client may open
it, its heart-beats, and the session. Apart from the protocol because it runs once
per connection and asks the node, not the socket; the connection hands itself over
as :class:`Connecting` and gets the session back through :meth:`Connecting.opened`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet import threads

from gateway import __version__
from gateway.auth import ANONYMOUS, Authenticator, Principal
from gateway.broker.broker import Broker
from gateway.broker.errors import BrokerError
from gateway.broker.session import DeliverySink, Session
from gateway.broker.vhost_limits import VhostLimits
from gateway.permissions import AccessControl, admit
from gateway.stomp.codec import Frame, FrameParser
from gateway.stomp.flow import ProducerFlow
from gateway.stomp.settings import StompSettings
from gateway.stomp.versions import SUPPORTED
from gateway.transport import Transport
from model.events import USER_LIMIT, AuthenticationFailed
from model.names import DEFAULT_VHOST, quoted

if TYPE_CHECKING:
    from gateway.broker.vhosts import VirtualHosts


class StompNode(Protocol):
    """What CONNECT asks of the node's STOMP factory."""

    broker: Broker  # the default vhost's
    vhosts: VirtualHosts | None
    settings: StompSettings
    authenticator: Authenticator
    access: AccessControl
    limits: VhostLimits
    node_name: str
    session_ids: Iterator[int]
    threadpool: Any


class Connecting(DeliverySink, Protocol):
    """What CONNECT does to the connection it opens (a StompProtocol)."""

    @property
    def factory(self) -> StompNode: ...

    transport: Transport
    parser: FrameParser
    clock: Any
    closing: bool
    held: list[Frame] | None  # the frames after CONNECT, while its password is checked
    vhost: str
    counted: str | None  # the vhost whose connection limit counts this one
    flow: ProducerFlow

    def fail(self, message: str, receipt: str | None = None, extra: dict | None = None) -> None: ...

    def frame_failed(self, frame: Frame, error: Exception, receipt: str | None = None) -> None: ...

    def process(self, frames: list[Frame]) -> None: ...

    def start_heartbeats(self, client: tuple[int, int], settings: StompSettings) -> None: ...

    def opened(self, session: Session, principal: Principal, version: str, reply: dict[str, str]) -> None: ...


def connect(connection: Connecting, frame: Frame) -> None:
    """The connection's first frame: CONNECT, or an ERROR saying it is not."""
    headers = frame.headers
    if frame.command not in ("CONNECT", "STOMP"):
        connection.fail(f"expected CONNECT or STOMP as the first frame, got {frame.command}", headers.get("receipt"))
        return
    version = _negotiate(headers.get("accept-version"))
    if version is None:
        connection.fail(
            f"no supported protocol version in accept-version {headers.get('accept-version')!r}",
            extra={"version": ",".join(SUPPORTED)},
        )
        return
    connection.parser.version = version
    authenticator = connection.factory.authenticator
    if authenticator.anonymous:
        _open(connection, frame, version, ANONYMOUS)
        return
    # A password check costs a PBKDF2 run: keep it off the reactor thread,
    # and hold the frames that follow CONNECT until it is done.
    connection.held = []
    login, passcode = headers.get("login"), headers.get("passcode")
    d = threads.deferToThreadPool(connection.clock, connection.factory.threadpool, authenticator.authenticate,
                                  login, passcode)
    d.addCallback(_authenticated, connection, frame, version)


def _authenticated(principal: Principal | None, connection: Connecting, frame: Frame, version: str) -> None:
    held, connection.held = connection.held, None
    if connection.closing:
        return
    if principal is None:
        peer = connection.transport.getPeer()
        login = frame.headers.get("login")
        connection.factory.broker.events.emit(AuthenticationFailed(
            user=None if login is None else login[:USER_LIMIT],
            remote=f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', 0)}"))
        connection.fail(f"access refused for user {quoted(login or '')}: wrong login or passcode")
        return
    try:
        _open(connection, frame, version, principal)
    except Exception as error:
        connection.frame_failed(frame, error)
        return
    if held:
        connection.process(held)


def _open(connection: Connecting, frame: Frame, version: str, principal: Principal) -> None:
    """Open the session CONNECT asks for, or fail saying why not."""
    headers = frame.headers
    factory = connection.factory
    session_id = f"{factory.node_name}-{next(factory.session_ids)}"
    reply = {"version": version, "server": f"meshgate/{__version__}", "session": session_id}
    beats = _parse_heartbeat(headers.get("heart-beat", "0,0")) if version != "1.0" else None
    if version != "1.0" and beats is None:
        connection.fail(f"malformed heart-beat header {headers.get('heart-beat', '')[:40]!r}: expected 'cx,cy'")
        return
    host = headers.get("host")
    broker = factory.broker if factory.vhosts is None else factory.vhosts.for_stomp_host(host)
    if broker is None:
        connection.fail(f"no virtual host named {quoted(host or '')} on this broker")
        return
    vhost = connection.vhost = _vhost_name(factory, host, broker)
    refusal = admit(factory.access, factory.limits, principal, vhost)
    if refusal is not None:
        connection.fail(refusal)
        return
    connection.counted = vhost
    connection.flow.stored = factory.limits.stored(vhost)
    try:
        session = broker.open_session(connection, session_id, headers.get("client-id"))
    except BrokerError as error:  # a client-id no client could address
        connection.fail(str(error))
        return
    if beats is not None:
        settings = factory.settings
        reply["heart-beat"] = f"{settings.heartbeat_send_ms},{settings.heartbeat_receive_ms}"
        connection.start_heartbeats(beats, settings)
    connection.opened(session, principal, version, reply)


def _vhost_name(factory: StompNode, host: str | None, broker: Broker) -> str:
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
