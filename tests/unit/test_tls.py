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


def _endpoint_pair(server: TlsMaterial, client: TlsMaterial, host: str = "127.0.0.1"):
    """A dial as a Twisted endpoint makes it (``wrapClientTLS`` with ``client_creator``) to a
    listener given the material as its context factory (``SSL4ServerEndpoint``)."""
    from twisted.protocols.tls import TLSMemoryBIOFactory

    clock = MemoryReactorClock()
    server_tls = TLSMemoryBIOFactory(server, False, Factory.forProtocol(Recorder), clock).buildProtocol(None)
    client_tls = TLSMemoryBIOFactory(client.client_creator(host), True, Factory.forProtocol(Recorder),
                                     clock).buildProtocol(None)
    listener, dialled = server_tls.wrappedProtocol, client_tls.wrappedProtocol  # (let go when the connection is)
    pump = iosim.connect(server_tls, iosim.makeFakeServer(server_tls), client_tls, iosim.makeFakeClient(client_tls),
                         greet=True)
    for _ in range(5):
        clock.advance(0)
        pump.flush()
    return listener, dialled


def test_a_dial_through_an_endpoint_takes_the_reloaded_files_and_checks_the_name(tmp_path: Path, ca) -> None:
    server, dialler = _material(tmp_path, ca, "a"), _material(tmp_path, ca, "b")
    issue(tmp_path, "b", "b-renewed", issuer=ca[:2], client=True)
    dialler.reload()
    listener, dialled = _endpoint_pair(server, dialler)
    assert listener.received == b"hello" and dialled.received == b"hello"
    peer = listener.transport.getPeerCertificate().to_cryptography()
    assert peer.subject.rfc4514_string() == "CN=b-renewed"
    listener, dialled = _endpoint_pair(server, dialler, host="mesh.example.org")
    assert listener.received == b"" and dialled.received == b"" and dialled.lost


def test_a_file_that_cannot_be_used_says_which_key_it_is(tmp_path: Path, ca) -> None:
    _, _, cert, key = issue(tmp_path, "a", "a", issuer=ca[:2])
    for files, key_name in (((str(tmp_path / "missing.crt"), str(key)), "certificate"),
                            ((str(cert), str(cert)), "private_key"),
                            ((str(cert), str(key), str(key)), "ca_certificate")):
        with pytest.raises(TlsError) as refused:
            TlsMaterial(*files, **({} if len(files) == 3 else {"ca_certificate": None}))  # type: ignore[arg-type]
        assert refused.value.key == key_name


def test_every_ca_of_a_bundle_is_trusted_while_a_ca_is_replaced(tmp_path: Path, ca, caplog) -> None:
    new_ca = issue(tmp_path, "new-ca", "new CA", ca=True)
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes(Path(ca[2]).read_bytes() + Path(new_ca[2]).read_bytes())
    _, _, cert, key = issue(tmp_path, "a", "a", issuer=ca[:2], client=True)
    listener = TlsMaterial(str(cert), str(key), str(bundle))
    for signer, stem in ((ca, "old"), (new_ca, "new")):  # a peer with a certificate of either CA gets in
        _, _, peer_cert, peer_key = issue(tmp_path, stem, stem, issuer=signer[:2], client=True)
        server, client, _, _ = _pair(listener, TlsMaterial(str(peer_cert), str(peer_key), str(bundle)), caplog)
        assert server.received == b"hello" and client.received == b"hello", stem


def test_the_certificate_file_may_carry_its_chain(tmp_path: Path, ca, caplog) -> None:
    intermediate = issue(tmp_path, "intermediate", "intermediate CA", issuer=ca[:2], ca=True)
    _, _, cert, key = issue(tmp_path, "a", "a-via-intermediate", issuer=intermediate[:2], client=True)
    chained = tmp_path / "chained.crt"
    chained.write_bytes(cert.read_bytes() + Path(intermediate[2]).read_bytes())
    listener = TlsMaterial(str(chained), str(key), str(ca[2]))
    assert listener.certificate.subject == "CN=a-via-intermediate"
    server, client, _, _ = _pair(listener, _material(tmp_path, ca, "b"), caplog)
    assert server.received == b"hello" and client.received == b"hello"


@pytest.mark.parametrize(("table", "more"), [
    ("stomp.tls", {}),
    ("stomp.websocket.tls", {"stomp.websocket.bind": "127.0.0.1:0"}),
    ("amqp.tls", {"amqp.bind": "127.0.0.1:0"}),
    ("ha.tls", {"ha.mode": "replicated", "ha.peer": "127.0.0.1:1", "ha.replication_bind": "127.0.0.1:2",
                "ha.password": "x"}),
])
def test_a_key_that_does_not_match_is_refused_at_load_naming_the_key_and_the_files(tmp_path: Path, ca, table,
                                                                                   more) -> None:
    from meshgate.config import ConfigError, load_config

    _, _, cert, _ = issue(tmp_path, "a", "a", issuer=ca[:2], client=True)
    _, _, _, other_key = issue(tmp_path, "b", "b", issuer=ca[:2], client=True)
    files = {f"{table}.certificate": str(cert), f"{table}.private_key": str(other_key),
             f"{table}.ca_certificate": str(ca[2])}
    if table != "ha.tls":
        files[f"{table}.bind"] = "127.0.0.1:0"
    with pytest.raises(ConfigError) as refused:
        load_config(None, {**more, **files})
    assert refused.value.key == f"{table}.private_key"
    assert f"'{other_key}' does not match the certificate '{cert}'" in str(refused.value)
