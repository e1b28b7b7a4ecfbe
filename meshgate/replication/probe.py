"""Whether the other member of a pair serves: a starting primary dials its
replication listener (it only listens while it serves)."""

from __future__ import annotations

from twisted.internet import defer, error
from twisted.internet.interfaces import IHandshakeListener
from twisted.internet.protocol import ClientFactory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from meshgate.config.ha import ReplicationTlsConfig
from meshgate.replication.tls import client_endpoint


@defer.inlineCallbacks
def primary_active_at(reactor, peer: tuple[str, int], timeout: float = 1.0,
                      tls: ReplicationTlsConfig | None = None):
    """Whether a process serves at the other member's replication listener (it only
    listens while it serves): then this one must not. With ``tls`` the probe dials
    with TLS and lets the handshake finish (or fail) before closing, so that the
    listener sees a well-behaved peer; a listener that accepts counts either way."""
    endpoint = client_endpoint(reactor, peer, tls, timeout)
    try:
        protocol = yield endpoint.connect(_ProbeFactory())
    except (error.ConnectError, error.TimeoutError, OSError):
        return False
    if tls is not None:
        timer = reactor.callLater(max(timeout, 1.0), lambda: protocol.settled.called or protocol.settled.callback(None))
        yield protocol.settled
        if timer.active():
            timer.cancel()
    protocol.transport.loseConnection()
    return True


@implementer(IHandshakeListener)
class _ProbeProtocol(Protocol):
    def __init__(self) -> None:
        self.settled: defer.Deferred[None] = defer.Deferred()  # the TLS handshake finished or the connection went

    def handshakeCompleted(self) -> None:
        if not self.settled.called:
            self.settled.callback(None)

    def connectionLost(self, reason: Failure | None = None) -> None:
        if not self.settled.called:
            self.settled.callback(None)


class _ProbeFactory(ClientFactory):
    protocol = _ProbeProtocol
