"""The mesh carries every vhost (docs/vhosts-mesh-design.md): a vhost's messages,
demand and custody travel with their vhost between nodes of link protocol 5 and
stay inside it; a peer of protocol 4 is sent nothing of any vhost but "/", and
what it says is taken as "/"'s."""

from __future__ import annotations

import msgspec

from gateway.broker.message import TOPIC
from mesh.codec import decode_message
from mesh.forwarding import BUSY_RETRY_S
from mesh.wire import DemandRecord, FrameType
from tests.protocol.mesh_harness import MeshHarness, Sink
from tests.protocol.mesh_peer_support import ABSENT, RawPeer
from tests.protocol.test_mesh_in_doubt import lose

TEAMS = ("team-a", "team-b")
PASSWORD = "vhosts-test-secret"


def pair(**config):
    mesh = MeshHarness(**config)
    a, b = mesh.node("a", vhosts=TEAMS), mesh.node("b", vhosts=TEAMS)
    return mesh, a, b, mesh.link(a, b)


def test_a_queue_message_reaches_the_consumer_of_its_vhost_and_no_other():
    mesh, a, b, _ = pair()
    sinks = {vhost: b.consumer("orders", vhost=vhost)[1] for vhost in ("/", *TEAMS)}
    mesh.settle()
    a.send("orders", b"for team-a", vhost="team-a")
    a.send("orders", b"for /")
    mesh.settle()
    assert sinks["team-a"].bodies == [b"for team-a"]
    assert sinks["/"].bodies == [b"for /"]
    assert sinks["team-b"].bodies == []
    assert a.stored == [] and b.stored == []  # consumed where it went; custody settled


def test_a_topic_message_reaches_the_subscribers_of_its_vhost_and_no_other():
    mesh, a, b, _ = pair()
    sinks = {vhost: b.consumer("news.>", kind=TOPIC, vhost=vhost)[1] for vhost in ("/", *TEAMS)}
    mesh.settle()
    a.send("news.eu", b"team-a news", kind=TOPIC, vhost="team-a")
    mesh.settle()
    assert sinks["team-a"].bodies == [b"team-a news"]
    assert sinks["/"].bodies == sinks["team-b"].bodies == []


def test_what_was_in_flight_in_a_vhost_when_the_link_died_is_delivered_once_after_a_restart():
    mesh, a, b, to_b = pair(in_doubt_timeout_ms=60_000)
    session, _ = b.consumer("orders", ack="client", vhost="team-a")  # never acked: stays stored at b
    mesh.settle()
    for n in range(5):
        a.send("orders", b"m%d" % n, vhost="team-a")
    mesh.clock.advance(0)  # on the link, still in a's buffer
    to_b.pump()  # b stores them; its STORED never reaches a
    lose(mesh, to_b, a, b)
    assert len(b.stored) == 5 and len(a.stored) == 5
    session.close()
    b.restart()
    a.restart()  # a's copies come back from its store, held in doubt until b says what it has
    assert a.mesh.custody.in_doubt_for(b.mesh.node_id) == 5
    mesh.link(a, b)
    _, sink = b.consumer("orders", vhost="team-a")
    mesh.settle()
    assert sorted(sink.bodies) == [b"m%d" % n for n in range(5)]  # b's own copies; a's were dropped as b had them
    assert a.stored == [] and a.mesh.custody.in_doubt_for(b.mesh.node_id) == 0


def test_a_message_for_a_vhost_the_receiver_no_longer_has_stays_with_the_sender():
    mesh, a, b, _ = pair()
    b.consumer("orders", vhost="team-a")
    mesh.settle()
    b.vhosts.remove("team-a")  # b's demand without team-a is on its way after this
    a.send("orders", b"kept", vhost="team-a")  # forwarded at once: it reaches b first
    mesh.settle()
    mesh.clock.advance(BUSY_RETRY_S)
    mesh.settle()
    assert [m.body for m in a.vhosts.brokers["team-a"].queues["orders"]] == [b"kept"]
    assert len(a.stored) == 1 and b.stored == []


# -- a peer of link protocol 4 ------------------------------------------------------------------

def old_peer(node):
    peer = RawPeer(node, node_dials=True)
    peer.establish(PASSWORD, speaks=ABSENT)  # a HELLO of version 4: no "speaks"
    return peer


def test_a_peer_of_protocol_4_is_sent_nothing_of_another_vhost():
    mesh = MeshHarness(insecure_cluster=False, cluster_password=PASSWORD)
    node = mesh.node("b", vhosts=TEAMS)
    peer = old_peer(node)
    _, own = node.consumer("orders", vhost="team-a")
    node.consumer("news.>", kind=TOPIC, vhost="team-a")
    node.consumer("audit")  # "/" demand, which it is told of
    mesh.settle()
    # It advertises consumers of "orders" (of "/", as it knows no other): only "/" messages may go to it.
    peer.send(FrameType.DEMAND, [{"kind": "queue", "address": "orders", "path": ["peer-node"], "consumers": 5}])
    for n in range(3):
        node.send("orders", b"team-a %d" % n, vhost="team-a")
        node.send("news.eu", b"news", kind=TOPIC, vhost="team-a")
    mesh.settle()
    demand = [record for records in peer.of(FrameType.DEMAND) for record in records]
    assert demand and {record["address"] for record in demand} == {"audit"} and all("vhost" not in r for r in demand)
    messages = [decode_message(payload) for payload in peer.of(FrameType.MESSAGE)]
    assert all(vhost == "" for *_, vhost in messages)
    assert own.bodies == [b"team-a %d" % n for n in range(3)]


def test_what_a_peer_of_protocol_4_says_of_another_vhost_is_not_believed():
    mesh = MeshHarness(insecure_cluster=False, cluster_password=PASSWORD)
    node = mesh.node("b", vhosts=TEAMS)
    peer = old_peer(node)
    peer.send(FrameType.DEMAND, [msgspec.to_builtins(DemandRecord(kind="queue", address="orders",
                                                                  path=["peer-node"], vhost="team-a"))])
    node.send("orders", b"stays", vhost="team-a")
    mesh.settle()
    assert peer.of(FrameType.MESSAGE) == []
    assert [m.body for m in node.vhosts.brokers["team-a"].queues["orders"]] == [b"stays"]
    assert set(node.mesh.peers["peer-node"].channels) == {"/"}


def durable_reader(node, vhost: str):
    sink = Sink()
    session = node.vhosts.brokers[vhost].open_session(sink, f"{node.name}-reader")
    session.subscribe("1", TOPIC, "news.>", "auto", None, None, "reader.feed")
    return session, sink


def test_a_vhosts_durable_subscription_is_held_mesh_wide_and_follows_its_subscriber_inside_the_vhost():
    mesh = MeshHarness()
    a, b, c = (mesh.node(name, vhosts=TEAMS) for name in "abc")
    mesh.link(a, b)
    mesh.link(b, c)
    mesh.link(a, c)
    session, _ = durable_reader(b, "team-a")
    mesh.settle()
    session.close()  # away; the subscription stays, in team-a on every node
    assert all("reader.feed" in node.vhosts.brokers["team-a"].bindings for node in (a, b, c))
    assert not any("reader.feed" in node.vhosts.brokers[other].bindings
                   for node in (a, b, c) for other in ("/", "team-b"))
    a.send("news.eu", b"a1", kind=TOPIC, vhost="team-a")
    c.send("news.eu", b"c1", kind=TOPIC, vhost="team-a")
    a.send("news.eu", b"team-b's", kind=TOPIC, vhost="team-b")
    mesh.settle()
    _, sink = durable_reader(c, "team-a")
    mesh.settle()
    assert sorted(sink.bodies) == [b"a1", b"c1"]


def test_scale_down_hands_every_vhosts_messages_and_durable_subscriptions_to_a_node_that_knows_vhosts():
    mesh, a, b, _ = pair()
    session, _ = durable_reader(a, "team-a")
    mesh.settle()
    session.close()
    for vhost in ("/", *TEAMS):
        a.send("orders", vhost.encode(), vhost=vhost)
    a.send("news.eu", b"for the reader", kind=TOPIC, vhost="team-a")
    mesh.settle()
    assert mesh.scale_down(a)
    assert a.stored == []
    for vhost in ("/", *TEAMS):
        assert [m.body for m in b.vhosts.brokers[vhost].queues["orders"]] == [vhost.encode()]
    _, sink = durable_reader(b, "team-a")
    mesh.settle()
    assert sink.bodies == [b"for the reader"]


def test_scale_down_towards_a_node_of_protocol_4_alone_keeps_the_other_vhosts_messages(caplog):
    mesh = MeshHarness(insecure_cluster=False, cluster_password=PASSWORD)
    node = mesh.node("b", vhosts=TEAMS)
    peer = old_peer(node)
    node.send("orders", b"team-a's", vhost="team-a")
    mesh.settle()
    with caplog.at_level("WARNING", logger="mesh"):
        mesh.scale_down(node)
    assert [m.body for m in node.vhosts.brokers["team-a"].queues["orders"]] == [b"team-a's"]
    assert all(vhost == "" for *_, vhost in map(decode_message, peer.of(FrameType.MESSAGE)))
    assert any("cannot keep vhost 'team-a'" in r.getMessage() for r in caplog.records)
