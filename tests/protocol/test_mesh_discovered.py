"""What a node does with the addresses its discoveries (multicast, DNS) report:
dial them, stop when none lists them any more (static peers excepted), and
recognise its own address when a discovery lists it."""

from __future__ import annotations

import logging

from twisted.test import iosim

from mesh.link import LinkProtocol
from tests.protocol.mesh_harness import MeshHarness

ADDRESS = ("10.0.0.7", 61616)


def dialled(node) -> list[tuple[str, int]]:
    return [connector.address for connector in node.mesh.connectors]


def test_an_address_is_dialled_while_some_discovery_lists_it():
    a = MeshHarness().node("a")
    a.mesh.found(ADDRESS, "dns")
    a.mesh.found(ADDRESS, "multicast")
    assert dialled(a) == [ADDRESS]
    a.mesh.lost(ADDRESS, "dns")
    assert dialled(a) == [ADDRESS]  # multicast still hears it
    a.mesh.lost(ADDRESS, "multicast")
    assert dialled(a) == [] and a.mesh.discovered == {}


def test_a_static_peer_stays_dialled_when_a_discovery_loses_it():
    a = MeshHarness().node("a", static=(ADDRESS,))
    a.mesh.start()
    a.mesh.found(ADDRESS, "dns")
    a.mesh.lost(ADDRESS, "dns")
    assert dialled(a) == [ADDRESS]


def test_direct_connections_only_dials_no_discovered_node():
    a = MeshHarness().node("a", allow_direct_connections_only=True)
    a.mesh.found(ADDRESS, "dns")
    assert dialled(a) == [] and a.mesh.discovered == {ADDRESS: {"dns"}}


def test_a_node_that_dials_its_own_address_stops_quietly_and_never_dials_it_again(caplog):
    harness = MeshHarness()
    a = harness.node("a")
    a.mesh.found(ADDRESS, "dns")  # DNS lists every node, this one too
    (connector,) = a.mesh.connectors
    server, client = LinkProtocol(a.mesh.links, dialled=False), LinkProtocol(a.mesh.links, dialled=True)
    client.connector = connector
    with caplog.at_level(logging.DEBUG):
        harness.pumps.append(iosim.connect(server, iosim.FakeTransport(server, True), client,
                                           iosim.FakeTransport(client, False), clock=harness.clock))
        harness.settle()
    assert a.mesh.peers == {}
    assert connector.stopped and dialled(a) == [] and ADDRESS in a.mesh.own_addresses
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("own link address" in r.getMessage() for r in caplog.records)
    a.mesh.lost(ADDRESS, "dns")
    a.mesh.found(ADDRESS, "multicast")
    assert dialled(a) == []


def test_a_copied_node_id_is_still_refused_as_before():
    harness = MeshHarness()
    a = harness.node("a")
    b = harness.node("b", node_id=a.mesh.node_id)  # a data dir copied,
    b.mesh.started_at = a.mesh.started_at + 1  # started later
    fatal = []
    b.mesh.on_fatal = fatal.append
    harness.link(b, a)
    assert a.mesh.peers == {} and b.mesh.peers == {}
    assert fatal and "data dir was copied" in fatal[0]
