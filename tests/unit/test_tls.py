"""gateway.tls: mutual TLS material, handshakes over an in-memory pump, why a
handshake failed, the handshake deadline and reload()."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionAborted
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.test import iosim

from gateway.hostile_log import PeerLog
from gateway.tls import HANDSHAKE_TIMEOUT_S, TlsError, TlsMaterial
from tests.e2e.tls_support import issue


class Recorder(Protocol):
    def __init__(self) -> None:
        self.received = b""
        self.lost = False

    def connectionMade(self) -> None:
        self.transport.write(b"hello")

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: object = None) -> None:
        self.lost = True


def _material(directory: Path, ca, stem: str, host: str = "127.0.0.1") -> TlsMaterial:
    _, _, cert, key = issue(directory, stem, stem, issuer=ca[:2], client=True)
    return TlsMaterial(str(cert), str(key), str(ca[2]), ca_name="the mesh CA")


@pytest.fixture
def ca(tmp_path: Path):
    return issue(tmp_path, "ca", "test CA", ca=True)


def _pair(server: TlsMaterial, client: TlsMaterial, caplog, host: str = "127.0.0.1", clock=None):
    clock = clock or MemoryReactorClock()
    log = PeerLog(logging.getLogger("test.tls"), clock.seconds, per_minute=1)
    server_factory = server.server_factory(Factory.forProtocol(Recorder), log, clock)
    client_factory = client.client_factory(Factory.forProtocol(Recorder), host, 4242, log, clock)
    address = IPv4Address("TCP", "127.0.0.1", 4242)
    server_tls = server_factory.buildProtocol(address)
    client_tls = client_factory.buildProtocol(address)
    server, client = server_tls.wrappedProtocol, client_tls.wrappedProtocol
    pump = iosim.connect(server_tls, iosim.makeFakeServer(server_tls), client_tls, iosim.makeFakeClient(client_tls),
                         greet=True)
    for _ in range(5):  # writes are gathered until the end of a reactor turn
        clock.advance(0)
        pump.flush()
    return server, client, pump, clock


def test_mutual_tls_carries_data_both_ways(tmp_path: Path, ca, caplog) -> None:
    server, client, _, _ = _pair(_material(tmp_path, ca, "a"), _material(tmp_path, ca, "b"), caplog)
    assert server.received == b"hello" and client.received == b"hello"


def test_a_certificate_of_another_ca_is_refused_saying_so(tmp_path: Path, ca, caplog) -> None:
    other = issue(tmp_path, "other-ca", "other CA", ca=True)
    with caplog.at_level(logging.WARNING, "test.tls"):
        server, client, _, _ = _pair(_material(tmp_path, ca, "a"), _material(tmp_path, other, "b"), caplog)
    assert server.received == b"" and client.received == b""
    assert "certificate of 127.0.0.1:4242 not signed by the mesh CA" in caplog.text


def test_a_certificate_not_naming_the_dialled_host_is_a_name_mismatch(tmp_path: Path, ca, caplog) -> None:
    with caplog.at_level(logging.WARNING, "test.tls"):
        _, client, _, _ = _pair(_material(tmp_path, ca, "a"), _material(tmp_path, ca, "b"), caplog,
                                host="mesh.example.org")
    assert client.received == b""
    assert "name mismatch: the certificate of mesh.example.org:4242 does not name mesh.example.org" in caplog.text


def test_a_handshake_not_done_in_time_is_dropped(tmp_path: Path, ca, caplog) -> None:
    clock = MemoryReactorClock()
    log = PeerLog(logging.getLogger("test.tls"), clock.seconds)
    factory = _material(tmp_path, ca, "a").server_factory(Factory.forProtocol(Recorder), log, clock)
    tls = factory.buildProtocol(None)
    transport = iosim.FakeTransport(tls, isServer=True)
    tls.makeConnection(transport)
    with caplog.at_level(logging.WARNING, "test.tls"):
        clock.advance(HANDSHAKE_TIMEOUT_S + 0.1)
        assert transport.disconnecting
        tls.connectionLost(Failure(ConnectionAborted()))
    assert "no TLS handshake within 5 s" in caplog.text


def test_mismatched_key_names_both_files(tmp_path: Path, ca) -> None:
    _, _, cert, _ = issue(tmp_path, "a", "a", issuer=ca[:2])
    _, _, _, other_key = issue(tmp_path, "b", "b", issuer=ca[:2])
    with pytest.raises(TlsError, match=r"private key '.*b\.key' does not match the certificate '.*a\.crt'"):
        TlsMaterial(str(cert), str(other_key), str(ca[2]))


def test_reload_swaps_the_files_for_new_handshakes_and_keeps_the_old_on_error(tmp_path: Path, ca, caplog) -> None:
    server = _material(tmp_path, ca, "a")
    old_context = server.context
    issue(tmp_path, "a", "a-renewed", issuer=ca[:2], client=True)  # new files at the same paths
    server.reload()
    assert server.context is not old_context
    _, client, pump, _ = _pair(server, _material(tmp_path, ca, "b"), caplog)
    peer = client.transport.getPeerCertificate()
    assert peer.get_subject().CN == "a-renewed"
    pump.flush()
    Path(server.files[1]).write_text("not a key")
    current = server.context
    with pytest.raises(TlsError, match="private key"):
        server.reload()
    assert server.context is current
