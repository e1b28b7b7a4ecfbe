"""Each vhost's own definitions over the mesh (docs/vhosts-mesh-design.md, §3 and §6):
queue settings, exchanges, bindings and durable subscriptions made in a vhost on one
node are held in that vhost on every node, and nowhere else; a node that was away
catches up; what a node away kept of a vhost deleted and made again meanwhile is not
brought back; a peer of link protocol 4 is sent nothing of another vhost, neither
definitions (frame type 24) nor topology rows."""

from __future__ import annotations

from gateway.broker.message import QUEUE, TOPIC
from mesh.wire import FrameType
from model.definitions import BindingSpec, ExchangeSpec, QueueSettings, VhostSpec
from model.names import DEFAULT_VHOST
from tests.protocol.mesh_harness import MeshHarness, Sink
from tests.protocol.mesh_peer_support import ABSENT, RawPeer

TEAM_A, TEAM_B = "team-a", "team-b"
PASSWORD = "vhost-definitions-secret"


def line():
    """a - b - c: what c gets of a comes through b."""
    mesh = MeshHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    ab, bc = mesh.link(a, b), mesh.link(b, c)
    return mesh, (a, b, c), (ab, bc)


def define_vhosts(node, *names: str) -> None:
    for name in names:
        node.vhosts.define(name, VhostSpec())


def what_is_defined(node, vhost: str) -> dict:
    """What a vhost's definitions made on a node: queue settings, exchanges, bindings, durable subscriptions."""
    broker = node.vhosts.brokers[vhost]
    return {"queues": dict(broker.queue_settings),
            "exchanges": sorted(name for name in broker.exchanges.exchanges if name.startswith("ex.")),
            "bindings": sorted(r.name for r in broker.definitions.records() if r.kind == "binding" and not r.deleted),
            "durable": sorted((name, b.pattern) for name, b in broker.bindings.items() if b.durable)}


def records(node, vhost: str) -> list[tuple]:
    return [(r.kind, r.name, r.version, r.origin, r.deleted) for r in node.vhosts.brokers[vhost].definitions.records()]


def define_everything(node, vhost: str) -> None:
    broker = node.vhosts.brokers[vhost]
    broker.define_queue("orders", QueueSettings(max_delivery_attempts=3))
    broker.declare_exchange("ex.orders", ExchangeSpec(type="direct"))
    broker.bind(BindingSpec(source="ex.orders", destination="orders", routing_key="eu"))
    session = broker.open_session(Sink(), f"{node.name}-reader")
    session.subscribe("1", TOPIC, "news.>", "auto", None, None, "reader.feed")


def test_what_is_defined_in_a_vhost_on_one_node_is_held_in_that_vhost_on_every_node_and_nowhere_else():
    mesh, (a, b, c), _ = line()
    define_vhosts(a, TEAM_A, TEAM_B)
    mesh.settle()
    define_everything(a, TEAM_A)
    mesh.settle()
    expected = {"queues": {"orders": QueueSettings(max_delivery_attempts=3)}, "exchanges": ["ex.orders"],
                "bindings": [BindingSpec(source="ex.orders", destination="orders", routing_key="eu").key()],
                "durable": [("reader.feed", "news.>")]}
    nothing = {"queues": {}, "exchanges": [], "bindings": [], "durable": []}
    for node in (a, b, c):
        assert what_is_defined(node, TEAM_A) == expected, node.name
        assert what_is_defined(node, TEAM_B) == nothing, node.name
        assert what_is_defined(node, DEFAULT_VHOST) == nothing, node.name
        assert [r.kind for r in node.broker.definitions.records()] == ["vhost", "vhost"]  # "/" holds the vhosts alone
    assert records(a, TEAM_A) == records(b, TEAM_A) == records(c, TEAM_A) != []


def test_a_node_that_was_away_catches_up_both_ways_when_it_links_again():
    mesh, (a, b, c), (_, bc) = line()
    define_vhosts(a, TEAM_A)
    mesh.settle()
    mesh.cut(bc)
    a.vhosts.brokers[TEAM_A].define_queue("made-while-c-was-away", QueueSettings(max_length=5))
    c.vhosts.brokers[TEAM_A].define_queue("made-on-c-meanwhile", QueueSettings(max_length=7))
    mesh.link(b, c)
    for node in (a, b, c):
        settings = node.vhosts.brokers[TEAM_A].queue_settings
        assert settings == {"made-while-c-was-away": QueueSettings(max_length=5),
                            "made-on-c-meanwhile": QueueSettings(max_length=7)}, node.name
        assert node.broker.queue_settings == {}, node.name
    assert records(a, TEAM_A) == records(b, TEAM_A) == records(c, TEAM_A)


def line_with_a_team_a_queue(queue: str):
    """a - b - c with team-a made on a and a setting of ``queue`` in it held by all three."""
    mesh, nodes, (_, bc) = line()
    define_vhosts(nodes[0], TEAM_A)
    mesh.settle()
    nodes[0].vhosts.brokers[TEAM_A].define_queue(queue, QueueSettings(max_length=1))
    mesh.settle()
    return mesh, nodes, bc


def test_what_a_node_away_kept_of_a_vhost_deleted_and_made_again_meanwhile_is_not_brought_back():
    mesh, (a, b, c), bc = line_with_a_team_a_queue("old-orders")
    assert "old-orders" in c.vhosts.brokers[TEAM_A].queue_settings
    mesh.cut(bc)
    a.vhosts.undefine(TEAM_A)
    define_vhosts(a, TEAM_A)
    mesh.settle()
    a.vhosts.brokers[TEAM_A].define_queue("new-orders", QueueSettings(max_length=2))
    c.vhosts.brokers[TEAM_A].define_queue("old-too", QueueSettings(max_length=3))  # c still has the old vhost
    mesh.settle()
    mesh.link(b, c)
    for node in (a, b, c):
        assert node.vhosts.brokers[TEAM_A].queue_settings == {"new-orders": QueueSettings(max_length=2)}, node.name
        assert set(node.vhosts.brokers[TEAM_A].queues) == {"new-orders"}, node.name
    assert records(a, TEAM_A) == records(b, TEAM_A) == records(c, TEAM_A)
    # And it stays so: c's next link up sends nothing of the old vhost either.
    mesh.cut(mesh.pumps[-1])
    mesh.link(b, c)
    assert a.vhosts.brokers[TEAM_A].queue_settings == {"new-orders": QueueSettings(max_length=2)}


def test_a_change_of_a_vhosts_limits_keeps_its_definitions_flowing():
    mesh, (a, b, c), bc = line_with_a_team_a_queue("orders")
    mesh.cut(bc)
    b.vhosts.define(TEAM_A, VhostSpec(max_queues=10))  # not a new vhost: c keeps what it holds of it
    c.vhosts.brokers[TEAM_A].define_queue("on-c", QueueSettings(max_length=3))
    mesh.link(b, c)
    for node in (a, b, c):
        assert set(node.vhosts.brokers[TEAM_A].queue_settings) == {"orders", "on-c"}, node.name
        assert node.vhosts.incarnation(TEAM_A) == a.vhosts.incarnation(TEAM_A) is not None


def test_a_vhost_of_the_configuration_on_one_side_only_gets_the_definitions_once_both_have_it():
    mesh = MeshHarness()
    a, b = mesh.node("a", vhosts=[TEAM_A]), mesh.node("b")
    mesh.link(a, b)
    a.vhosts.brokers[TEAM_A].define_queue("orders", QueueSettings(max_length=1))
    mesh.settle()
    assert TEAM_A not in b.vhosts.brokers  # b has no such vhost: ignored
    define_vhosts(b, TEAM_A)  # now defined mesh-wide: a sends what it holds of it again
    mesh.settle()
    assert b.vhosts.brokers[TEAM_A].queue_settings == {"orders": QueueSettings(max_length=1)}


# -- what goes to a peer of link protocol 4, and to one of 5 -------------------------------------


def peer_of(node, **hello) -> RawPeer:
    peer = RawPeer(node)
    peer.establish(PASSWORD, **hello)
    return peer


def node_with_team_a():
    mesh = MeshHarness(insecure_cluster=False, cluster_password=PASSWORD)
    node = mesh.node("b")
    define_vhosts(node, TEAM_A)
    team_a = node.vhosts.brokers[TEAM_A]
    team_a.define_queue("orders", QueueSettings(max_length=1))
    team_a.open_session(Sink(), "client").subscribe("s", QUEUE, "orders", "auto", None, None)
    node.broker.create_queue("orders")
    return mesh, node


def queue_rows(peer: RawPeer) -> list[list]:
    return [row for summaries in peer.of(FrameType.TOPOLOGY) for summary in summaries for row in summary["queues"]]


def test_a_peer_of_protocol_4_gets_no_definitions_and_no_topology_rows_of_another_vhost():
    mesh, node = node_with_team_a()
    old, new = peer_of(node, speaks=ABSENT), peer_of(node, node_id="new-node")
    node.vhosts.brokers[TEAM_A].define_queue("later", QueueSettings(max_length=2))  # a change, sent as made
    node.mesh.topology.gossip()
    assert old.link.protocol == 4 and new.link.protocol == 5
    assert old.of(FrameType.VHOST_DEFINITIONS) == []
    assert all(row[0] == "orders" and row[-1] == DEFAULT_VHOST for row in queue_rows(old)) and queue_rows(old)
    assert not any(r["name"] == "later" for frame in old.of(FrameType.DEFINITIONS) for r in frame)
    # The same node tells a peer of protocol 5 all of it (so the filter above is not an empty test).
    sent = new.of(FrameType.VHOST_DEFINITIONS)
    assert [frame["vhost"] for frame in sent] == [TEAM_A, TEAM_A]
    assert sent[0]["incarnation"] == list(node.vhosts.incarnation(TEAM_A))
    assert [r["name"] for frame in sent for r in frame["records"]] == ["orders", "later"]
    assert ["orders", 0, 1, 0, 0, TEAM_A] in queue_rows(new) and ["orders", 0, 0, 0, 0, "/"] in queue_rows(new)


def test_definitions_of_a_vhost_are_taken_only_in_the_incarnation_this_node_has_and_only_from_protocol_5():
    mesh, node = node_with_team_a()
    peer = peer_of(node)
    incarnation = list(node.vhosts.incarnation(TEAM_A))
    record = {"kind": "queue", "name": "theirs", "version": 50, "origin": "peer-node", "changed_at": 0.0,
              "queue": {"max_length": 9}}
    peer.send(FrameType.VHOST_DEFINITIONS, {"vhost": TEAM_A, "incarnation": [1, "elsewhere"], "records": [record]})
    peer.send(FrameType.VHOST_DEFINITIONS, {"vhost": "team-z", "incarnation": None, "records": [record]})
    assert "theirs" not in node.vhosts.brokers[TEAM_A].queue_settings and not peer.closed
    vhost_record = {**record, "kind": "vhost", "name": "smuggled", "vhost": {}}
    del vhost_record["queue"]
    peer.send(FrameType.VHOST_DEFINITIONS, {"vhost": TEAM_A, "incarnation": incarnation,
                                            "records": [record, vhost_record]})
    assert node.vhosts.brokers[TEAM_A].queue_settings["theirs"] == QueueSettings(max_length=9)
    assert "smuggled" not in node.vhosts.brokers and node.broker.queue_settings == {}
    assert [r.kind for r in node.vhosts.brokers[TEAM_A].definitions.records()] == ["queue", "queue"]
    old = peer_of(node, speaks=ABSENT, node_id="old-node")
    old.send(FrameType.VHOST_DEFINITIONS, {"vhost": TEAM_A, "incarnation": incarnation, "records": []})
    assert old.closed and "VHOST_DEFINITIONS" in old.refusal()


def test_a_malformed_vhost_definitions_frame_is_refused_naming_its_type():
    for body in ({"vhost": 5, "incarnation": None, "records": []}, {"vhost": TEAM_A, "records": []},
                 {"vhost": TEAM_A, "incarnation": [1], "records": []}, [1, 2], {"vhost": "", "incarnation": None,
                                                                                "records": []}, "x" * 10):
        _, node = node_with_team_a()
        peer = peer_of(node)
        peer.send(FrameType.VHOST_DEFINITIONS, body)
        assert peer.closed and "VHOST_DEFINITIONS" in peer.refusal(), body
    _, node = node_with_team_a()
    peer = peer_of(node)
    peer.send(FrameType.VHOST_DEFINITIONS, {"vhost": TEAM_A, "incarnation": None, "records": [{"kind": 1}]})
    assert not peer.closed  # well formed: of another incarnation, ignored (and a bad record alone is skipped)


# -- the view of the mesh -------------------------------------------------------------------------


def test_gossip_lists_a_nodes_queues_of_every_vhost_each_with_its_vhost():
    mesh = MeshHarness()
    a, b = mesh.node("a", vhosts=[TEAM_A]), mesh.node("b", vhosts=[TEAM_A])
    mesh.link(a, b)
    a.vhosts.brokers[TEAM_A].create_queue("orders")
    a.vhosts.brokers[TEAM_A].send(QUEUE, "orders", {}, b"x", True)
    a.broker.create_queue("orders")
    a.mesh.topology.gossip()
    mesh.settle()
    rows = {(row.vhost, row.name): row.depth for row in b.mesh.topology.entries[a.mesh.node_id].summary.queues}
    assert rows == {(TEAM_A, "orders"): 1, (DEFAULT_VHOST, "orders"): 0}
