"""TLS on the replication link (``[ha.tls]``, docs/ha.md): the endpoints both sides use.

Without ``[ha.tls]`` the link is plain TCP, as before. With it the serving member's
listener (``ha.replication_bind``) speaks only TLS and requires the dialling member's
certificate, signed by ``ha.tls.ca_certificate``; the dialling member (the backup, and
the start-up probe of a primary) verifies the listener's certificate against the same
CA and the host of ``ha.peer``, and presents its own. The HMAC challenge of the
cluster password still runs on top: TLS adds confidentiality and a second check of
who is at the other end, the password still authenticates.

Both sides use ``ha.tls``'s one TlsMaterial, asked for its context at every handshake:
a reload (SIGHUP, ``meshgate reload-tls``) reaches the next link, the one up stays."""

from __future__ import annotations

from typing import Protocol, cast

from twisted.internet import endpoints
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator, IOpenSSLContextFactory, IStreamClientEndpoint
from twisted.internet.protocol import Factory

from gateway.transport import Transport
from meshgate.config.ha import ReplicationTlsConfig

COMPLAIN_EVERY_S = 30.0  # a repeated mismatch (the backup redials) is logged at most this often
# What both sides log when a handshake fails or never starts.
MISMATCH_HINT = ("the replication link needs [ha.tls] on both members or on neither, with certificates signed by "
                 "the CA in ha.tls.ca_certificate (docs/ha.md)")


class LinkTransport(Transport, Protocol):
    """A replication link's transport: TCP, or TLS over it."""

    def setTcpNoDelay(self, enabled: bool) -> None: ...


# Twisted's endpoints are zope interfaces, whose methods mypy reads as taking no ``self``.
class ServerEndpoint(Protocol):
    def listen(self, factory: Factory) -> Deferred: ...


class ClientEndpoint(Protocol):
    def connect(self, factory: Factory) -> Deferred: ...


def server_options(tls: ReplicationTlsConfig) -> IOpenSSLContextFactory:
    """The listener's side: this member's certificate; the peer must present one the CA
    signed. The material's context is taken per connection, so a reload reaches it."""
    return cast(IOpenSSLContextFactory, tls.material)


def client_options(tls: ReplicationTlsConfig, host: str) -> IOpenSSLClientConnectionCreator:
    """The dialling side: the listener's certificate must be the CA's and name ``host``;
    this member's certificate is presented (as last reloaded)."""
    return tls.material.client_creator(host)


def server_endpoint(reactor, bind: tuple[str, int], tls: ReplicationTlsConfig | None) -> ServerEndpoint:
    """The replication listener: plain TCP, or TLS requiring a client certificate the CA signed."""
    host, port = bind
    if tls is None:
        return cast(ServerEndpoint, endpoints.TCP4ServerEndpoint(reactor, port, interface=host))
    return cast(ServerEndpoint, endpoints.SSL4ServerEndpoint(reactor, port, server_options(tls), interface=host))


def client_endpoint(reactor, peer: tuple[str, int], tls: ReplicationTlsConfig | None,
                    timeout: float) -> ClientEndpoint:
    """Dialling the other member's replication listener: plain TCP, or TLS verifying
    its certificate (the CA, and the host of ``peer``) and presenting this member's."""
    host, port = peer
    tcp = endpoints.TCP4ClientEndpoint(reactor, host, port, timeout=max(1, int(timeout)))
    if tls is None:
        return cast(ClientEndpoint, tcp)
    return cast(ClientEndpoint, endpoints.wrapClientTLS(client_options(tls, host), cast(IStreamClientEndpoint, tcp)))
