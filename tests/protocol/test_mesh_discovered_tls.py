"""A node and the peers multicast discovery announces with another TLS requirement
than its own (``[mesh.tls]``): never dialled, said once per peer, dialled once the
peer's announcement matches (docs/mesh.md#security)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from gateway.tls import TlsMaterial
from mesh.discovery import Announcement
from tests.e2e.tls_support import Certificates, issue
from tests.protocol.mesh_harness import MeshHarness

LINK = ("10.0.0.7", 61616)


def dialled(node) -> list[tuple[str, int]]:
    return [connector.address for connector in node.mesh.connectors]


def peer(requires_tls: bool, node_id: str = "") -> Announcement:
    return Announcement(node_id or str(uuid.uuid4()), "far", LINK, ("10.0.0.7", 61613), "", requires_tls)


@pytest.fixture
def material(tmp_path: Path) -> TlsMaterial:
    certificates = Certificates(tmp_path)
    _, _, cert, key = issue(tmp_path, "near", "near", issuer=certificates.ca[:2], client=True)
    return TlsMaterial(str(cert), str(key), str(certificates.ca[2]), ca_name="the mesh CA")


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_plaintext_node_never_dials_a_tls_peer_and_says_so_once(caplog):
    a = MeshHarness().node("a")
    far = peer(requires_tls=True)
    with caplog.at_level(logging.INFO):
        for _ in range(3):  # the table reports a peer again only when its announcement changed; be sure anyway
            a.mesh.announced(far)
    assert dialled(a) == []
    assert warnings(caplog) == ["mesh: node far (10.0.0.7:61616) requires TLS; this node has no [mesh.tls]; "
                                "not dialled"]


def test_a_tls_node_never_dials_a_plaintext_peer_and_dials_it_once_it_restarts_with_tls(caplog, material):
    a = MeshHarness().node("a")
    a.mesh.tls = material
    plain = peer(requires_tls=False)
    with caplog.at_level(logging.INFO):
        a.mesh.announced(plain)
        a.mesh.announced(plain)
        assert dialled(a) == []
        assert warnings(caplog) == ["mesh: node far (10.0.0.7:61616) speaks plaintext; this node requires TLS "
                                    "(mesh.tls); not dialled"]
        a.mesh.announced(peer(requires_tls=True, node_id=plain.node_id))  # restarted with [mesh.tls]
    assert dialled(a) == [LINK]
    assert "now requires TLS as this node does; dialling it" in caplog.text


def test_a_peer_that_restarts_without_tls_is_no_longer_dialled(caplog, material):
    a = MeshHarness().node("a")
    a.mesh.tls = material
    far = peer(requires_tls=True)
    a.mesh.announced(far)
    assert dialled(a) == [LINK]
    with caplog.at_level(logging.INFO):
        a.mesh.announced(peer(requires_tls=False, node_id=far.node_id))
    assert dialled(a) == [] and a.mesh.discovered == {}
    assert len(warnings(caplog)) == 1 and "speaks plaintext; this node requires TLS" in warnings(caplog)[0]


def test_a_matching_peer_is_dialled_quietly(caplog):
    a = MeshHarness().node("a")
    with caplog.at_level(logging.INFO):
        a.mesh.announced(peer(requires_tls=False))
    assert dialled(a) == [LINK] and warnings(caplog) == []
