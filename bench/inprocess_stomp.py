"""What the in-process STOMP benches share (stomp_path.py, journeys_cost.py): a STOMP
connection of a StompFactory on Twisted's StringTransport, connected and ready.

Import it after the bench has put ``--checkout`` on sys.path: it imports no Meshgate
module itself, so the factory passed in decides which code runs."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport


def open_connection(factory: Any, version: str = "1.2", *frames: bytes) -> tuple[Any, StringTransport]:
    """A protocol of ``factory`` CONNECTed in STOMP ``version``, then fed ``frames`` (e.g. a
    SUBSCRIBE); its transport emptied. (protocol, transport)."""
    protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.dataReceived(f"CONNECT\naccept-version:{version}\nhost:bench\nheart-beat:0,0\n\n\0".encode())
    for frame in frames:
        protocol.dataReceived(frame)
    assert transport.value().startswith(b"CONNECTED"), transport.value()[:200]
    transport.clear()
    return protocol, transport
