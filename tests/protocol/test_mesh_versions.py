"""Link protocol versions during a rolling upgrade (docs/vhosts-mesh-design.md, section 2):
a HELLO's "version" is the oldest protocol its node speaks (a node of version 4 refuses
any other), "speaks" the newest; a link speaks the lower of both sides' newest, and a
node of another range is refused saying so."""

from __future__ import annotations

import logging

import pytest

from mesh.identity import OLDEST_PROTOCOL, PROTOCOL_VERSION
from mesh.link import LinkState
from mesh.wire import FrameType
from tests.protocol.mesh_harness import MeshHarness
from tests.protocol.mesh_peer_support import ABSENT, RawPeer, hello

PASSWORD = "versions-test-secret"


def node_and_peer() -> RawPeer:
    return RawPeer(MeshHarness(insecure_cluster=False, cluster_password=PASSWORD).node("b"))


def test_this_nodes_hello_says_version_4_which_a_node_of_version_4_demands():
    peer = node_and_peer()
    assert peer.node_hello["version"] == OLDEST_PROTOCOL == 4
    assert peer.node_hello["speaks"] == PROTOCOL_VERSION == 5


def test_a_node_of_version_4_is_linked_at_protocol_4_and_named_in_the_log(caplog):
    peer = node_and_peer()
    with caplog.at_level(logging.INFO, logger="mesh"):
        peer.establish(PASSWORD, name="old", speaks=ABSENT)  # a node of version 4 has no "speaks"
    assert peer.link.protocol == 4
    assert any("old speaks link protocol 4 (an older release); this node speaks 5" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("speaks, protocol", [(PROTOCOL_VERSION, PROTOCOL_VERSION),
                                              (PROTOCOL_VERSION + 3, PROTOCOL_VERSION)])
def test_a_link_speaks_the_lower_of_both_sides_newest_protocol(speaks, protocol):
    peer = node_and_peer()
    peer.establish(PASSWORD, speaks=speaks)
    assert peer.link.state is LinkState.ESTABLISHED and peer.link.protocol == protocol


@pytest.mark.parametrize("version", [OLDEST_PROTOCOL - 1, PROTOCOL_VERSION + 1, "4", True, None])
def test_a_node_whose_oldest_protocol_this_node_does_not_speak_is_refused(version):
    peer = node_and_peer()
    peer.send(FrameType.HELLO, hello("peer-node", "n", version=version))
    assert peer.refusal() == "not a Meshgate link peer of this protocol version" and peer.closed
