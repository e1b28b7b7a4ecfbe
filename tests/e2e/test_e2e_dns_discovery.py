"""DNS discovery end to end: real ``meshgate broker`` processes find each other
through a real DNS server on loopback (twisted.names, tests/e2e/dns_support.py)
whose records the tests change: A records (every node on the same port, each on
an address of its own in 127.0.0.0/8), SRV records (``_meshgate._tcp.NAME``,
a port per node), nodes joining and leaving the records, and the server going
away."""

from __future__ import annotations

import pytest
from dns_support import DnsServer
from e2e_support import unique
from mesh_support import free_port, mesh_fixture, send_many  # noqa: F401


@pytest.fixture
def dns_server(tmp_path):
    server = DnsServer(tmp_path)
    yield server
    server.stop()


def configure(node, mesh, bind: str, dns: str, server: DnsServer) -> None:
    node.write_config("\n".join([
        "[mesh]", f'bind = "{bind}"', "static = []", f'cluster_password = "{mesh.password}"',
        "retry_interval_ms = 200", "max_retry_interval_ms = 1000", "check_period_ms = 500",
        "connection_ttl_ms = 2000",
        "", "[mesh.discovery]", f'dns = "{dns}"', f'dns_servers = ["{server.address}"]', "refresh_timeout_ms = 500",
    ]) + "\n")


def crosses(sender, receiver, count: int = 10) -> None:
    """Messages sent on ``sender`` reach a consumer on ``receiver``."""
    queue = "/queue/" + unique("dns")
    consumer = receiver.client()
    consumer.subscribe(queue)
    sent = send_many(sender.client(), queue, [f"m{i}" for i in range(count)])
    assert sorted(m.body for m in consumer.listener.wait_for(count, timeout=20)) == sorted(sent)
    consumer.disconnect()


def refused_warnings(node) -> int:
    return node.count(r"WARNING.*refused")


def test_nodes_listed_by_a_records_link_and_a_record_change_adds_a_node_and_keeps_live_links(mesh, dns_server):
    port = free_port()
    a, b, c, d = nodes = mesh(4, topology="none", start=False)
    ips = {node.name: f"127.0.0.{11 + i}" for i, node in enumerate(nodes)}
    dns_server.set(a={"mesh.test": [ips[n.name] for n in (a, b, c)]})
    for node in nodes:
        configure(node, mesh, f"{ips[node.name]}:{port}", f"mesh.test:{port}", dns_server)
    for node in (a, b, c):
        node.start()
    mesh.wait_links([(a, b), (a, c), (b, c)])
    for node in (a, b, c):
        assert refused_warnings(node) == 0  # the records list each node too: it does not dial itself
    crosses(a, c)

    dns_server.set(a={"mesh.test": [ips[n.name] for n in (a, b, d)]})  # c leaves the records, d joins
    d.start()
    mesh.wait_links([(a, d), (b, d), (c, d)])  # c still resolves the name: it finds d too
    for node in (a, b):
        assert node.count(rf"link with {c.name} lost") == 0  # no longer listed, but the live link stays
    crosses(a, c)
    crosses(d, b)


def test_srv_records_give_each_node_its_port_and_a_dns_outage_drops_nothing(mesh, dns_server):
    a, b, c = nodes = mesh(3, topology="none", start=False)
    ports = {node.name: free_port() for node in nodes}

    def records(members):
        dns_server.set(a={f"{n.name.lower()}.nodes.test": ["127.0.0.1"] for n in nodes},
                       srv={"_meshgate._tcp.mesh.test": [(f"{n.name.lower()}.nodes.test", ports[n.name])
                                                          for n in members]})

    records((a, b))
    for node in nodes:
        configure(node, mesh, f"127.0.0.1:{ports[node.name]}", "mesh.test", dns_server)
    a.start()
    b.start()
    mesh.wait_links([(a, b)])
    records((a, b, c))
    c.start()
    mesh.wait_links([(a, c), (b, c)])
    crosses(c, a)

    dns_server.stop()
    for node in nodes:
        node.wait_log(r"DNS discovery of mesh.test failed", timeout=30)
    crosses(a, b)
    for node in nodes:
        assert node.count(r"DNS discovery of mesh.test failed") == 1  # once per outage, not every refresh
        assert node.count(r"link with .* lost") == 0
