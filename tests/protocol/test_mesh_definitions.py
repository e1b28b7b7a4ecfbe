"""Mesh-wide definitions over iosim links: durable subscriptions and queue
settings made on one node are held by every node, nodes that were away catch
up, deletions reach everyone, conflicting changes resolve alike on both sides;
a durable subscription's messages wait where they were published and follow
its subscriber to whichever node it connects to."""

from __future__ import annotations

from gateway.broker.message import TOPIC
from model.definitions import DURABLE_SUBSCRIPTION, QUEUE_SETTINGS, QueueSettings
from tests.protocol.mesh_harness import MeshHarness, Sink
from tests.protocol.test_mesh_in_doubt import lose

FEED = "reader.feed"


def durable_subscriber(node, name: str = FEED, topic: str = "news.>", selector: str | None = None):
    sink = Sink()
    session = node.broker.open_session(sink, f"{node.name}-reader")
    session.subscribe("1", TOPIC, topic, "auto", None, selector, name)
    return session, sink


def held(node, name: str = FEED) -> list[bytes]:
    binding = node.broker.bindings.get(name)
    return None if binding is None else [m.body for m in binding.queue]


def definitions(node) -> list[tuple]:
    return [(r.kind, r.name, r.version, r.origin, r.deleted) for r in node.broker.definitions.records()]


def triangle():
    mesh = MeshHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    mesh.link(a, b)
    mesh.link(b, c)
    mesh.link(a, c)
    return mesh, a, b, c


def test_a_durable_subscription_made_on_one_node_is_held_by_every_node():
    mesh, a, b, c = triangle()
    session, _ = durable_subscriber(b, selector="region = 'eu'")
    mesh.settle()
    for node in (a, b, c):
        binding = node.broker.bindings[FEED]
        assert binding.durable and binding.pattern == "news.>" and binding.selector_text == "region = 'eu'"
    assert definitions(a) == definitions(b) == definitions(c) != []


def test_what_is_published_while_the_subscriber_is_away_waits_where_published_and_follows_it_anywhere():
    mesh, a, b, c = triangle()
    session, _ = durable_subscriber(b)
    mesh.settle()
    session.close()  # away; the subscription stays on every node
    _, watcher = b.consumer("news.>", kind=TOPIC)  # draws live copies to b: not into b's part
    mesh.settle()
    a.send("news.eu", b"a1", kind=TOPIC)
    c.send("news.eu", b"c1", kind=TOPIC)
    b.send("news.eu", b"b1", kind=TOPIC)
    a.send("news.eu", b"a2", kind=TOPIC, persistent=False)
    mesh.settle()
    assert (held(a), held(b), held(c)) == ([b"a1", b"a2"], [b"b1"], [b"c1"])  # one copy each, where published
    assert sorted(watcher.bodies) == [b"a1", b"a2", b"b1", b"c1"]
    _, sink = durable_subscriber(c)  # back, on another node
    mesh.settle()
    assert sorted(sink.bodies) == [b"a1", b"a2", b"b1", b"c1"]
    assert (held(a), held(b), held(c)) == ([], [], [])
    assert not any(a.stored + b.stored + c.stored)  # consumed: nothing left in any store
    a.send("news.eu", b"live", kind=TOPIC)  # while it is connected, straight through
    mesh.settle()
    assert sink.bodies[-1] == b"live" and len(sink.bodies) == 5


def test_a_subscriber_on_its_own_node_takes_its_part_there_and_the_rest_from_other_nodes():
    mesh, a, b, c = triangle()
    session, _ = durable_subscriber(a)
    session.close()
    mesh.settle()
    for i in range(3):
        a.send("news.eu", b"a%d" % i, kind=TOPIC)
        b.send("news.eu", b"b%d" % i, kind=TOPIC)
    mesh.settle()
    _, sink = durable_subscriber(a)
    mesh.settle()
    assert sorted(sink.bodies) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2"]
    # Each node's messages arrive in the order they were published there.
    assert [m for m in sink.bodies if m.startswith(b"b")] == [b"b0", b"b1", b"b2"]


def test_a_node_away_when_definitions_were_made_learns_them_when_it_links_again():
    mesh = MeshHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    mesh.link(a, b)
    to_c = mesh.link(b, c)
    session, _ = durable_subscriber(a, name="app.gone")
    session.unsubscribe("1", remove_durable=True)  # made and deleted while c is here
    mesh.settle()
    mesh.cut(to_c)  # c is away from here on
    durable_subscriber(a)[0].close()
    a.broker.define_queue("orders", QueueSettings(max_delivery_attempts=2, dead_letter_queue="orders.dlq"))
    mesh.settle()
    assert FEED not in c.broker.bindings and "orders" not in c.broker.queue_settings
    mesh.link(c, b)
    mesh.settle()
    assert held(c) == [] and c.broker.queue_settings["orders"].dead_letter_queue == "orders.dlq"
    assert "orders" in c.broker.queues and "app.gone" not in c.broker.bindings
    assert definitions(a) == definitions(b) == definitions(c)


def test_a_durable_subscription_deleted_on_one_node_goes_from_every_node_with_what_waited_there():
    mesh, a, b, c = triangle()
    durable_subscriber(a)[0].close()
    mesh.settle()
    b.send("news.eu", b"b1", kind=TOPIC)
    c.send("news.eu", b"c1", kind=TOPIC)
    mesh.settle()
    session, _ = durable_subscriber(b)
    session.unsubscribe("1", remove_durable=True)
    mesh.settle()
    assert all(FEED not in node.broker.bindings for node in (a, b, c))
    assert not any(a.stored + b.stored + c.stored)
    assert all(node.broker.definitions.get(DURABLE_SUBSCRIPTION, FEED).deleted for node in (a, b, c))


def test_conflicting_changes_on_both_sides_of_a_partition_resolve_alike():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    link = mesh.link(a, b)
    a.broker.define_queue("orders", QueueSettings(max_delivery_attempts=5))
    mesh.settle()
    mesh.cut(link)
    # Apart: a changes it twice, b once and also deletes what a keeps changing.
    a.broker.define_queue("orders", QueueSettings(max_delivery_attempts=6))
    a.broker.define_queue("orders", QueueSettings(max_delivery_attempts=7))
    b.broker.define_queue("orders", QueueSettings(max_delivery_attempts=9))
    b.broker.define_queue("payments", QueueSettings(max_delivery_attempts=3))
    a.broker.define_queue("invoices", QueueSettings(message_ttl_ms=1000))  # version 4 on both sides
    b.broker.define_queue("invoices", None)
    mesh.link(a, b)
    mesh.settle()
    assert definitions(a) == definitions(b)
    # The higher version wins: a's second change (version 3) over b's (version 2) ...
    assert a.broker.queue_settings["orders"].max_delivery_attempts == 7
    assert b.broker.queue_settings["orders"].max_delivery_attempts == 7
    # ... and at equal versions, the higher node id, whichever it is.
    invoices = a.broker.definitions.get(QUEUE_SETTINGS, "invoices")
    assert invoices.version == 4 and invoices.origin == max(a.mesh.node_id, b.mesh.node_id)
    a_won = a.mesh.node_id > b.mesh.node_id
    for node in (a, b):
        assert ("invoices" in node.broker.queue_settings) == a_won


def test_queue_settings_made_on_one_node_apply_on_every_node():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    a.broker.define_queue("orders", QueueSettings(max_delivery_attempts=1, dead_letter_queue="orders.dlq"))
    mesh.settle()
    sink = Sink()
    session = b.broker.open_session(sink, "worker")
    session.subscribe("s", "queue", "orders", "client-individual", None, None)
    b.send("orders", b"poison")
    mesh.settle()
    (message,) = sink.messages
    session.settle(session.subscriptions["s"], message.id, cumulative=False, accept=False)  # NACK
    assert [m.body for m in b.broker.queues["orders.dlq"]] == [b"poison"]


def test_a_queue_ttl_setting_expires_what_is_sent_without_one():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    a.broker.define_queue("quotes", QueueSettings(message_ttl_ms=5000, expiry_queue=""))
    mesh.settle()
    b.send("quotes", b"stale soon")
    b.broker.send("queue", "quotes", {}, b"own expiry", expires=b.broker.now_ms() + 60_000)
    mesh.clock.advance(6)
    assert b.broker.sweep_expired() == 1
    assert [m.body for m in b.broker.queues["quotes"]] == [b"own expiry"]


def test_definitions_survive_a_restart():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    link = mesh.link(a, b)
    durable_subscriber(a)[0].close()
    a.broker.define_queue("orders", QueueSettings(max_delivery_attempts=3))
    mesh.settle()
    before = definitions(b)
    mesh.cut(link)
    b.restart()
    assert definitions(b) == before and FEED in b.broker.bindings
    assert b.broker.queue_settings["orders"].max_delivery_attempts == 3


def test_a_durable_message_in_flight_when_its_link_went_is_not_sent_twice_when_the_subscriber_moves():
    mesh = MeshHarness(in_doubt_timeout_ms=5000)
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    to_b = mesh.link(a, b)
    mesh.link(a, c)
    mesh.link(b, c)
    reader, at_b = durable_subscriber(b)
    mesh.settle()
    a.send("news.eu", b"once", kind=TOPIC)
    mesh.clock.advance(0)  # on the a-b link
    to_b.pump()  # b takes it and delivers it; its STORED never reaches a
    lose(mesh, to_b, a, b)
    assert at_b.bodies == [b"once"]
    reader.close()
    _, at_c = durable_subscriber(c)  # the subscriber moves while a does not know b has it
    mesh.settle()
    assert at_c.bodies == [] and a.broker.bindings[FEED].queue.mesh.in_doubt == 1
    mesh.link(a, b)  # b lists its markers: the message was b's (and delivered), so a drops its copy
    mesh.settle()
    mesh.clock.advance(5)  # past in_doubt_timeout_ms: nothing waits any more
    mesh.settle()
    assert at_c.bodies == [] and a.broker.bindings[FEED].queue.mesh.in_doubt == 0 and not a.stored


def test_a_durable_message_the_peer_never_got_follows_the_subscriber_after_the_wait():
    mesh = MeshHarness(in_doubt_timeout_ms=5000)
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    to_b = mesh.link(a, b)
    mesh.link(a, c)
    reader, at_b = durable_subscriber(b)
    mesh.settle()
    a.send("news.eu", b"lost on the way", kind=TOPIC)
    mesh.clock.advance(0)  # in a's buffer only
    lose(mesh, to_b, a, b)
    reader.close()
    _, at_c = durable_subscriber(c)
    mesh.settle()
    assert at_c.bodies == []
    mesh.clock.advance(5)  # b never answers: a stops waiting
    mesh.settle()
    assert at_c.bodies == [b"lost on the way"] and at_c.messages[0].redelivered and at_b.bodies == []
