"""Mesh behaviour between brokers linked over iosim: demand, forwarding,
custody, duplicates, hop limits and loops."""

from __future__ import annotations

from gateway.broker.message import TOPIC
from mesh.codec import encode_message
from tests.protocol.mesh_harness import MeshHarness, Sink


def test_queue_messages_go_where_the_consumers_are_and_leave_the_sender():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    _, sink = b.consumer("orders")
    mesh.settle()
    for i in range(20):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    assert sink.bodies == [b"m%d" % i for i in range(20)]
    assert a.depth("orders") == 0 and not a.stored  # custody passed on STORED


def test_local_consumers_with_capacity_come_first():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    _, local = a.consumer("orders")
    _, remote = b.consumer("orders")
    mesh.settle()
    for i in range(10):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    assert len(local.messages) == 10 and remote.messages == []


def test_busy_local_consumer_overflows_to_the_mesh():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    session, local = a.consumer("orders", ack="client-individual")
    session.subscriptions["s"].prefetch = 2
    _, remote = b.consumer("orders")
    mesh.settle()
    for i in range(10):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    assert len(local.messages) == 2 and len(remote.messages) == 8


def test_duplicate_forward_is_dropped_but_confirmed():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    pump = mesh.link(a, b)
    _, sink = b.consumer("orders")
    mesh.settle()
    a.send("orders", b"once")
    mesh.clock.advance(0)
    pump.pump()  # b has it and a marker for it; its STORED has not reached a yet
    (delivered,) = sink.messages
    replay = delivered.copy()  # what a resends after a reconnect
    b.mesh.peers[a.mesh.node_id].link.dataReceived(encode_message(replay, a.mesh.node_id, (a.mesh.node_id,)))
    mesh.settle()
    assert sink.bodies == [b"once"] and a.depth("orders") == 0


def test_markers_are_released_once_the_sender_forgot():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    b.consumer("orders")
    mesh.settle()
    a.send("orders", b"x")
    mesh.settle()
    assert b.mesh.custody.markers[a.mesh.node_id] == {}
    assert not any(key.startswith("S:") for key, _ in b.broker.store.messages)


def test_chain_hop_limit():
    for max_hops, delivered in ((1, 0), (2, 5)):
        mesh = MeshHarness(max_hops=max_hops)
        a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
        mesh.link(a, b)
        mesh.link(b, c)
        _, sink = c.consumer("orders")
        mesh.settle()
        for i in range(5):
            a.send("orders", b"m%d" % i)
        mesh.settle()
        assert len(sink.messages) == delivered
        assert a.depth("orders") + b.depth("orders") == 5 - delivered


def test_ring_topic_one_copy_each_and_no_loops():
    mesh = MeshHarness(max_hops=3)
    nodes = [mesh.node(name) for name in "abcd"]
    for left, right in zip(nodes, nodes[1:] + nodes[:1], strict=True):
        mesh.link(left, right)
    sinks = [node.consumer("prices.>", kind=TOPIC)[1] for node in nodes]
    mesh.settle()
    for i in range(5):
        nodes[0].send("prices.eu", b"p%d" % i, kind=TOPIC, persistent=False)
    mesh.settle()
    assert [sink.bodies for sink in sinks] == [[b"p%d" % i for i in range(5)]] * 4


def test_ring_queue_consumed_exactly_once():
    mesh = MeshHarness(max_hops=3)
    nodes = [mesh.node(name) for name in "abcd"]
    for left, right in zip(nodes, nodes[1:] + nodes[:1], strict=True):
        mesh.link(left, right)
    sinks = [nodes[i].consumer("work")[1] for i in (1, 2, 3)]
    mesh.settle()
    for i in range(30):
        nodes[0].send("work", b"w%d" % i)
    mesh.settle()
    received = sorted(body for sink in sinks for body in sink.bodies)
    assert received == sorted(b"w%d" % i for i in range(30))
    assert sum(node.depth("work") for node in nodes) == 0


def test_selector_demand_forwards_only_matching():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    _, sink = b.consumer("orders", selector="color = 'red'")
    mesh.settle()
    a.send("orders", b"red", color="red")
    a.send("orders", b"blue", color="blue")
    mesh.settle()
    assert sink.bodies == [b"red"] and a.depth("orders") == 1


def test_consumer_moving_pulls_the_backlog_after_it():
    mesh = MeshHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    mesh.link(a, b)
    mesh.link(a, c)
    mesh.link(b, c)
    for i in range(10):
        a.send("orders", b"m%d" % i)
    session, first = b.consumer("orders", ack="client-individual")
    session.subscriptions["s"].prefetch = 3
    mesh.settle()
    assert len(first.messages) == 3
    session.close()  # 3 unacked go back on b
    _, second = c.consumer("orders")
    mesh.settle()
    assert sorted(second.bodies) == sorted(b"m%d" % i for i in range(10))
    assert a.depth("orders") == b.depth("orders") == 0


def test_wrong_cluster_password_is_refused():
    mesh = MeshHarness()
    a = mesh.node("a", cluster_password="one", insecure_cluster=False)
    b = mesh.node("b", cluster_password="two", insecure_cluster=False)
    mesh.link(a, b)
    assert not a.mesh.peers and not b.mesh.peers


def test_off_mode_never_forwards():
    mesh = MeshHarness(message_load_balancing="OFF")
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    _, sink = b.consumer("orders")
    mesh.settle()
    a.send("orders", b"stays")
    mesh.settle()
    assert sink.messages == [] and a.depth("orders") == 1


def test_off_with_redistribution_moves_only_a_backlog_without_local_consumers():
    mesh = MeshHarness(message_load_balancing="OFF_WITH_REDISTRIBUTION")
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    session, local = a.consumer("orders", ack="client-individual")
    session.subscriptions["s"].prefetch = 1
    _, remote = b.consumer("orders")
    mesh.settle()
    for i in range(5):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    assert len(local.messages) == 1 and remote.messages == []  # busy local consumer: still nothing leaves
    session.close()
    mesh.settle()
    assert len(remote.messages) == 5 and a.depth("orders") == 0


def test_redistribution_delay_holds_the_backlog_then_lets_it_go():
    mesh = MeshHarness(redistribution_delay_ms=500)
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    session, _ = a.consumer("orders", ack="client-individual")
    session.subscriptions["s"].prefetch = 1
    mesh.settle()
    for i in range(3):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    session.close()
    _, remote = b.consumer("orders")
    mesh.settle()
    assert remote.messages == []
    mesh.clock.advance(0.6)
    mesh.settle()
    assert len(remote.messages) == 3


def test_scale_down_hands_every_message_over():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    for i in range(5):
        a.send("orders", b"p%d" % i)
        a.send("audit", b"n%d" % i, persistent=False)
    done = mesh.scale_down(a)
    assert done and a.depth("orders") == a.depth("audit") == 0
    assert b.depth("orders") == 5 and b.depth("audit") == 5


def test_nodes_scaling_down_together_hand_their_messages_to_the_node_that_stays():
    """A StatefulSet scaled in by two: a and c leave at once, each of them linked to the
    other first (its first choice before this rule), and b stays."""
    mesh = MeshHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    mesh.link(a, c)
    mesh.link(a, b)
    mesh.link(c, b)
    for i in range(5):
        a.send("orders", b"a%d" % i)
        c.send("orders", b"c%d" % i)
        c.send("only-on-c", b"c%d" % i)
    assert mesh.scale_down(a, c)
    assert a.depth("orders") == c.depth("orders") == c.depth("only-on-c") == 0
    assert b.depth("orders") == 10 and b.depth("only-on-c") == 5


def test_backlog_follows_a_consumer_back_to_the_node_it_came_from():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    session, first = b.consumer("orders", ack="client-individual")
    session.subscriptions["s"].prefetch = 1
    mesh.settle()
    for i in range(6):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    assert a.depth("orders") == 0 and b.depth("orders") == 6  # all went to b, where the consumer is
    session.close()
    _, back = a.consumer("orders")
    mesh.settle()
    assert sorted(back.bodies) == sorted(b"m%d" % i for i in range(6)) and b.depth("orders") == 0


def test_busy_nodes_do_not_bounce_messages_between_them():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    sessions = [a.consumer("orders", ack="client-individual")[0], b.consumer("orders", ack="client-individual")[0]]
    for session in sessions:
        session.subscriptions["s"].prefetch = 1
    mesh.settle()
    for i in range(10):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    forwarded = b.broker.queues["orders"].enqueued
    mesh.settle()
    assert b.broker.queues["orders"].enqueued == forwarded  # nothing keeps moving
    assert a.depth("orders") + b.depth("orders") == 10


def test_strict_round_robins_over_nodes_with_the_queue_consumers_or_not():
    mesh = MeshHarness(message_load_balancing="STRICT")
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    b.send("orders", b"seed")  # b has the queue, no consumer
    _, local = a.consumer("orders")
    mesh.settle()
    for i in range(20):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    assert len(local.messages) == 10 and b.depth("orders") == 11  # b's backlog never moves


def test_off_with_redistribution_holds_even_a_queue_that_never_had_consumers():
    mesh = MeshHarness(message_load_balancing="OFF_WITH_REDISTRIBUTION", redistribution_delay_ms=1000)
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    _, remote = b.consumer("orders")
    mesh.settle()
    for i in range(5):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    assert remote.messages == []
    mesh.clock.advance(1.1)
    mesh.settle()
    assert len(remote.messages) == 5


def test_ring_persistent_topic_copies_are_deduplicated_whichever_way_they_come():
    mesh = MeshHarness(max_hops=3)
    nodes = [mesh.node(name) for name in "abcd"]
    for left, right in zip(nodes, nodes[1:] + nodes[:1], strict=True):
        mesh.link(left, right)
    sinks = [node.consumer("news", kind=TOPIC)[1] for node in nodes]
    mesh.settle()
    for i in range(4):
        nodes[0].send("news", b"n%d" % i, kind=TOPIC, persistent=True)
    mesh.settle()
    assert [sink.bodies for sink in sinks] == [[b"n%d" % i for i in range(4)]] * 4


def test_links_share_by_the_consumers_beyond_them():
    mesh = MeshHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    mesh.link(a, b)
    mesh.link(a, c)
    one = [b.consumer("orders")[1]]
    three = [c.consumer("orders")[1] for _ in range(3)]
    mesh.settle()
    for i in range(40):
        a.send("orders", b"m%d" % i)
    mesh.settle()
    assert sum(len(s.messages) for s in one) == 10 and sum(len(s.messages) for s in three) == 30


def test_persistent_topic_messages_wait_for_a_lost_link_to_come_back():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    pump = mesh.link(a, b)
    _, sink = b.consumer("news", kind=TOPIC)
    mesh.settle()
    a.send("news", b"before", kind=TOPIC)
    mesh.settle()
    a.send("news", b"in flight", kind=TOPIC)
    mesh.clock.advance(0)
    mesh.pumps.remove(pump)
    a.mesh.peers[b.mesh.node_id].link.connectionLost(None)  # lost with the bytes in a's buffer
    b.mesh.peers[a.mesh.node_id].link.connectionLost(None)
    a.send("news", b"while down", kind=TOPIC)
    a.send("news", b"volatile while down", kind=TOPIC, persistent=False)
    assert a.broker.links.patterns == {b.mesh.node_id: ["news"]}
    mesh.link(a, b)
    mesh.settle()
    assert sink.bodies == [b"before", b"in flight", b"while down"]
    assert sink.messages[1].redelivered and not sink.messages[2].redelivered


def test_topic_queue_for_a_peer_goes_when_its_subscribers_go():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    session, _ = b.consumer("news", kind=TOPIC)
    mesh.settle()
    assert ("link/" + b.mesh.node_id) in a.broker.bindings
    session.close()
    mesh.settle()
    assert ("link/" + b.mesh.node_id) not in a.broker.bindings and a.broker.links.patterns == {}


def test_scale_down_hands_over_durable_subscription_backlogs():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    reader = a.broker.open_session(Sink(), "reader")
    reader.subscribe("1", TOPIC, "news.>", "auto", None, None, "app.feed")
    reader.close()  # away: its durable subscription keeps what is published
    other = a.broker.open_session(Sink(), "other")
    other.subscribe("1", TOPIC, "news.>", "auto", None, None, "app.audit")
    other.close()
    for i in range(3):
        a.send("news.eu", b"n%d" % i, kind=TOPIC)
    done = mesh.scale_down(a)
    assert done
    for name in ("app.feed", "app.audit"):
        assert not len(a.broker.bindings[name].queue)
        queue = b.broker.bindings[name].queue
        assert [m.body for m in queue] == [b"n0", b"n1", b"n2"] and [m.address for m in queue] == ["news.eu"] * 3


def test_scale_down_hands_over_what_waits_for_a_peer_whose_link_is_down():
    mesh = MeshHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    mesh.link(a, b)
    to_c = mesh.link(a, c)
    _, sink = c.consumer("news", kind=TOPIC, ack="auto")
    mesh.settle()
    mesh.cut(to_c)  # c is away; a keeps persistent news for it
    a.send("news", b"for c", kind=TOPIC)
    assert [m.body for m in a.broker.bindings["link/" + c.mesh.node_id].queue] == [b"for c"]
    done = mesh.scale_down(a)
    assert done and [m.body for m in b.broker.bindings["link/" + c.mesh.node_id].queue] == [b"for c"]
    mesh.link(b, c)
    mesh.settle()
    assert sink.bodies == [b"for c"]


def test_released_topic_markers_linger_to_catch_late_copies():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    _, sink = b.consumer("news", kind=TOPIC)
    mesh.settle()
    a.send("news", b"once", kind=TOPIC)
    mesh.settle()
    held = b.mesh.custody.markers[a.mesh.node_id]
    assert len(held) == 1  # released by a, but kept for a while
    b.mesh.custody.recent.clear()  # as after a restart of b
    late = sink.messages[0].copy()
    b.mesh.peers[a.mesh.node_id].link.dataReceived(encode_message(late, a.mesh.node_id, (a.mesh.node_id,)))
    mesh.settle()
    assert sink.bodies == [b"once"]
    mesh.clock.advance(61)
    assert held == {}


def test_a_message_that_comes_back_to_follow_consumers_is_not_taken_for_a_copy():
    mesh = MeshHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    mesh.link(a, b)
    mesh.link(b, c)
    at_b, first = b.consumer("orders", ack="client-individual")
    at_b.subscriptions["s"].prefetch = 1
    mesh.settle()
    a.send("orders", b"taken")
    a.send("orders", b"travels")
    mesh.settle()
    assert first.bodies == [b"taken"] and b.depth("orders") == 2  # b received both from a
    at_c, _ = c.consumer("orders", ack="client-individual")
    at_c.subscriptions["s"].prefetch = 0  # c wants the queue but takes nothing yet
    at_b.close()  # b's consumer leaves: its backlog follows c's demand
    mesh.settle()
    assert b.depth("orders") == 0 and c.depth("orders") == 2
    at_c.close()
    _, again = b.consumer("orders")  # and now back to b, where a consumer is again
    mesh.settle()
    assert sorted(again.bodies) == [b"taken", b"travels"] and c.depth("orders") == 0


def test_a_message_back_where_its_first_visit_is_not_yet_released_is_not_dropped():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    late_releases = []  # a's disk is slow: its RELEASED for the first visit comes last
    a.mesh.custody.release_when_durable = lambda peer_id, keys: late_releases.append((peer_id, keys))
    waiting, _ = b.consumer("orders", ack="client-individual")
    waiting.subscriptions["s"].prefetch = 0  # b wants the queue but takes nothing yet
    mesh.settle()
    a.send("orders", b"round trip")
    mesh.settle()
    assert b.depth("orders") == 1 and late_releases  # first visit: b keeps a marker for it
    waiting.close()
    back_at_a, _ = a.consumer("orders", ack="client-individual")
    back_at_a.subscriptions["s"].prefetch = 0
    mesh.settle()
    assert a.depth("orders") == 1 and b.depth("orders") == 0
    back_at_a.close()
    _, at_b = b.consumer("orders")  # second visit to b: not a resend of the first
    mesh.settle()
    assert at_b.bodies == [b"round trip"] and a.depth("orders") == 0
    del a.mesh.custody.release_when_durable
    for peer_id, keys in late_releases:
        a.mesh.custody.release_when_durable(peer_id, keys)
    mesh.settle()
    assert at_b.bodies == [b"round trip"] and a.stored == b.stored == []


def test_a_node_with_no_room_says_busy_and_the_sender_keeps_custody_and_tries_again():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    _, at_b = b.consumer("orders")
    mesh.settle()
    b.broker.store.blocked = "the disk is 95% full"  # b's store has no room
    a.send("orders", b"kept by a")
    mesh.settle()
    assert at_b.messages == [] and a.depth("orders") == 1 and len(a.stored) == 1  # a still holds it
    for _ in range(3):
        mesh.clock.advance(1)  # a tries again every second; b says BUSY while full
        mesh.settle()
    assert at_b.messages == [] and a.depth("orders") == 1
    b.broker.store.blocked = None
    mesh.clock.advance(1)
    mesh.settle()
    assert at_b.bodies == [b"kept by a"] and a.stored == [] and a.depth("orders") == 0


def test_a_topic_marker_released_again_and_again_waits_on_one_timer():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    b.consumer("news", kind=TOPIC)
    mesh.settle()
    a.send("news", b"n", kind=TOPIC, persistent=True)
    mesh.settle()
    custody = b.mesh.custody
    markers = custody.markers[a.mesh.node_id]
    keys = list(markers)
    assert len(keys) == 1  # released by a once stored, kept for the grace time
    before = len(mesh.clock.getDelayedCalls())
    for _ in range(100):  # a peer repeating RELEASED (or LEAVING) for the same marker
        custody.release_markers(a.mesh.node_id, keys)
    assert len(mesh.clock.getDelayedCalls()) == before
    mesh.clock.advance(61)
    mesh.settle()
    assert markers == {}
