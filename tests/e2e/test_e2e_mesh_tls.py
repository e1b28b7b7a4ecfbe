"""[mesh.tls]: mutual TLS on mesh links between real ``meshgate broker`` processes,
with certificates made here: traffic both ways over TLS, the refusals (plaintext,
another CA, an expired certificate, a name mismatch) logged once each, and a relaying
proxy that never sees a message body."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from e2e_support import HOST, unique
from ha_support import Proxy
from mesh_support import QUIET, mesh_fixture, send_many  # noqa: F401 (mesh_fixture is the mesh fixture)
from tls_support import Certificates, issue

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    directory = tmp_path / "certificates"
    directory.mkdir()
    return Certificates(directory)


def _once(node, pattern: str) -> None:
    """``pattern`` is logged, and only once while the peers keep retrying (back-off 0.2 to 1 s)."""
    node.wait_log(pattern)
    time.sleep(2.5)
    assert node.count(pattern) == 1, node.stderr()[-3000:]


def _received_all(consumer, bodies: list[str]) -> None:
    consumer.listener.wait_for_body(bodies[-1])
    assert sorted(consumer.listener.bodies()) == sorted(bodies)


def _never_linked(*nodes) -> None:
    for node in nodes:
        assert not node.count(r"mesh: linked with "), node.stderr()[-3000:]


def test_three_nodes_over_mutual_tls_carry_queue_and_topic_traffic_both_ways(mesh, certificates) -> None:
    a, b, c = mesh(3, extra=[certificates.table(name) for name in "abc"])
    for consumer_node, producer_node in ((c, a), (a, c), (b, c)):
        queue = f"/queue/{unique('tls')}"
        consumer = consumer_node.subscriber(queue)  # what is sent before its demand arrives waits, then follows
        bodies = send_many(producer_node.client(), queue, [unique("q") for _ in range(20)])
        _received_all(consumer, bodies)
        topic = f"/topic/{unique('tls')}"
        subscriber = consumer_node.subscriber(topic)
        producer_node.reach(topic, subscriber)
    for node in (a, b, c):
        assert node.count(r"tls: ") == 0, node.stderr()[-3000:]


@pytest.mark.parametrize("tls_side", [0, 1])
def test_plaintext_and_tls_never_link_and_each_says_why(mesh, certificates, tls_side: int) -> None:
    a, b = mesh(2, topology=[(0, 1)], extra={tls_side: certificates.table("t")}, wait=False)
    tls_node, plain_node = (a, b) if tls_side == 0 else (b, a)
    _once(tls_node, r"tls: peer 127\.0\.0\.1(:\d+)? speaks plaintext; this node requires TLS")
    plain_node.wait_log(r"speaks TLS; this node has no \[mesh\.tls\]|closed before its HELLO: does it require TLS")
    _never_linked(a, b)


def test_a_certificate_of_another_ca_is_refused(mesh, certificates) -> None:
    other = issue(certificates.directory, "other-ca", "other CA", ca=True)
    a, b = mesh(2, topology=[(0, 1)], extra={0: certificates.table("a"), 1: certificates.table("b", ca=other)},
                wait=False)
    _once(a, rf"tls: certificate of 127\.0\.0\.1:{b.link} not signed by the mesh CA")
    b.wait_log(r"tls: 127\.0\.0\.1 refused this node's certificate: not signed by the mesh CA")
    _never_linked(a, b)


def test_an_expired_certificate_is_refused_and_nothing_queued_is_lost(mesh, certificates) -> None:
    a, b = mesh(2, topology=[(1, 0)], extra={0: certificates.table("a"), 1: certificates.table("b", expired=True)},
                wait=False)
    queue = f"/queue/{unique('tls')}"
    bodies = send_many(b.client(), queue, [unique("kept") for _ in range(5)])
    _once(a, r"tls: certificate of 127\.0\.0\.1 expired")
    b.wait_log(rf"tls: 127\.0\.0\.1:{a.link} refused this node's certificate: certificate expired")
    _never_linked(a, b)
    _received_all(b.subscriber(queue), bodies)


def test_a_certificate_not_naming_the_dialled_address_is_a_name_mismatch(mesh, certificates) -> None:
    a, b = mesh(2, topology=[(0, 1)],
                extra={0: certificates.table("a"), 1: certificates.table("b", names=("other.example",))},
                wait=False)
    _once(a, rf"tls: name mismatch: the certificate of 127\.0\.0\.1:{b.link} does not name 127\.0\.0\.1")
    _never_linked(a, b)


def test_a_tls_listener_drops_a_silent_connection_after_the_handshake_timeout(mesh, certificates) -> None:
    # connection_ttl_ms (which drops a silent link too) well above the handshake timeout
    (a,) = mesh(1, topology="none", extra=certificates.table("a"), sets=["mesh.connection_ttl_ms=30000"])
    with socket.create_connection((HOST, a.link)) as silent:
        silent.settimeout(10)
        started = time.monotonic()
        try:
            assert silent.recv(1024) == b""
        except ConnectionResetError:
            pass  # aborted by the node
        assert 4 < time.monotonic() - started < 9
    a.wait_log(r"tls: no TLS handshake within 5 s; dropped")


class RecordingProxy(Proxy):
    """The HA tests' proxy, keeping every byte it relays."""

    def __init__(self, target: int) -> None:
        super().__init__(target)
        self.seen = bytearray()

    def relayed(self, data: bytes) -> None:
        with self.lock:
            self.seen += data


def test_a_proxy_between_two_tls_nodes_sees_no_message_body(mesh, certificates) -> None:
    a, b = mesh(2, topology="none", extra=[certificates.table("a"), certificates.table("b")], start=False)
    proxy = RecordingProxy(b.link).start()
    try:
        a.write_config(a.config.replace("static = []", f'static = ["{HOST}:{proxy.port}"]'))
        a.start()
        b.start()
        mesh.wait_links([(a, b)])
        queue = f"/queue/{unique('secret')}"
        consumer = b.subscriber(queue)  # the message waits on A until B's demand has reached it
        body = "SECRET-" + unique("body") * 4
        a.client().send(queue, body, receipt=True)
        consumer.listener.wait_for_body(body)
        with proxy.lock:
            relayed = bytes(proxy.seen)
        assert len(relayed) > 1000  # the handshakes and the message went through it
        assert body.encode() not in relayed and b"SECRET-" not in relayed
        assert queue.encode() not in relayed
        assert relayed[:2] == b"\x16\x03"  # it began with a TLS handshake record (the dialler's ClientHello)
    finally:
        proxy.stop()


def test_discovery_tells_a_tls_node_and_a_plaintext_node_apart_and_neither_dials(mesh, certificates) -> None:
    a, b = mesh(2, discovery=True, extra={0: certificates.table("a")}, wait=False)
    # Said once per peer, though each hears the other's announcement every 200 ms.
    _once(a, rf"mesh: node {b.name} \(127\.0\.0\.1:{b.link}\) speaks plaintext; this node requires TLS "
             r"\(mesh\.tls\); not dialled")
    _once(b, rf"mesh: node {a.name} \(127\.0\.0\.1:{a.link}\) requires TLS; this node has no \[mesh\.tls\]; "
             r"not dialled")
    _never_linked(a, b)
    # Never dialled: no handshake was refused on either side.
    assert a.count(r"tls: ") == 0 and b.count(r"speaks TLS|closed before its HELLO") == 0, mesh.describe()

    # B restarts with [mesh.tls] (same node id, its announcement now says TLS): A dials it.
    b.write_config(b.config.replace("\n[mesh.discovery]", certificates.table("b") + "\n[mesh.discovery]"))
    b.restart()
    mesh.wait_links([(a, b)])
    a.wait_log(rf"mesh: node {b.name} \(127\.0\.0\.1:{b.link}\) now requires TLS as this node does; dialling it")
