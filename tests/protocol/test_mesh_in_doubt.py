"""Custody in doubt: a queue message whose link went before the peer confirmed
it, or that a node recovered after a restart, may already be the peer's. It
waits, out of its queue, until the peer says (or in_doubt_timeout_ms); sending
it elsewhere at once would deliver it twice, once unmarked."""

from __future__ import annotations

from gateway.broker.tracing import Tracer
from management.journeys import JourneyStore
from tests.protocol.mesh_harness import MeshHarness

TIMEOUT_MS = 5000


def lose(mesh: MeshHarness, pump, *nodes) -> None:
    """The link dies with whatever is still in its buffers: neither side sees more."""
    mesh.pumps.remove(pump)
    for node in nodes:
        for peer in list(node.mesh.peers.values()):
            if peer.link.transport in (pump.client.transport, pump.server.transport):
                peer.link.connectionLost(None)


def forward_on_a_dying_link(body: bytes, peer_stores_it: bool, persistent: bool = True):
    """a, linked to b and c, forwards one message to b (where the consumer is);
    the a-b link dies before b's STORED reaches a."""
    mesh = MeshHarness(in_doubt_timeout_ms=TIMEOUT_MS)
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    to_b = mesh.link(a, b)
    mesh.link(a, c)
    _, at_b = b.consumer("orders")
    mesh.settle()
    a.send("orders", body, persistent=persistent)
    mesh.clock.advance(0)  # on the link, still in a's buffer
    if peer_stores_it:
        to_b.pump()  # b stores and delivers it; its STORED never reaches a
    lose(mesh, to_b, a, b)
    return mesh, a, b, c, at_b


def test_a_forward_the_peer_stored_before_the_link_went_goes_nowhere_else():
    mesh, a, b, c, at_b = forward_on_a_dying_link(b"once", peer_stores_it=True)
    (sent,) = at_b.messages
    _, at_c = c.consumer("orders")
    mesh.settle()
    queue = a.broker.queues["orders"]
    assert at_c.messages == [] and queue.mesh.in_doubt == 1 and a.broker.store.holds(sent.id)
    mesh.link(a, b)  # b lists its markers: the message is b's, so a forgets it
    mesh.settle()
    assert at_b.bodies == [b"once"] and at_c.messages == []
    assert queue.mesh.in_doubt == 0 and len(queue) == 0 and a.stored == []
    assert b.mesh.custody.markers[a.mesh.node_id] == {}  # a said RELEASED once its copy was gone
    mesh.clock.advance(TIMEOUT_MS / 1000)
    mesh.settle()
    assert at_c.messages == [] and at_b.bodies == [b"once"]


def test_a_forward_the_peer_never_got_goes_out_again_marked_redelivered():
    mesh = MeshHarness(in_doubt_timeout_ms=TIMEOUT_MS)
    a, b = mesh.node("a"), mesh.node("b")
    to_b = mesh.link(a, b)
    _, at_b = b.consumer("orders")
    mesh.settle()
    a.send("orders", b"in flight")
    mesh.clock.advance(0)  # on the link, still in a's buffer
    queue = a.broker.queues["orders"]
    assert queue.inflight == 1
    lose(mesh, to_b, a, b)
    assert queue.inflight == 0 and len(queue) == 0 and queue.mesh.in_doubt == 1
    mesh.link(a, b)
    mesh.settle()
    (delivered,) = at_b.messages
    assert delivered.body == b"in flight" and delivered.redelivered and delivered.deliveries == 1
    assert queue.mesh.in_doubt == 0 and not a.stored


def test_a_non_persistent_forward_the_peer_got_goes_nowhere_else():
    mesh, a, b, c, at_b = forward_on_a_dying_link(b"once", peer_stores_it=True, persistent=False)
    _, at_c = c.consumer("orders")
    mesh.settle()
    queue = a.broker.queues["orders"]
    assert at_c.messages == [] and queue.mesh.in_doubt == 1 and len(queue) == 0
    mesh.link(a, b)  # a asks; b's recent window has it
    mesh.settle()
    assert at_b.bodies == [b"once"] and at_c.messages == []
    assert queue.mesh.in_doubt == 0 and len(queue) == 0 and queue.inflight == 0
    mesh.clock.advance(TIMEOUT_MS / 1000)
    mesh.settle()
    assert at_c.messages == [] and at_b.bodies == [b"once"]


def test_a_non_persistent_forward_the_peer_never_got_goes_out_again_marked():
    mesh, a, b, c, at_b = forward_on_a_dying_link(b"lost on the wire", peer_stores_it=False, persistent=False)
    assert at_b.messages == [] and a.broker.queues["orders"].mesh.in_doubt == 1
    mesh.link(a, b)
    mesh.settle()
    (delivered,) = at_b.messages
    assert delivered.body == b"lost on the wire" and delivered.redelivered
    assert a.broker.queues["orders"].mesh.in_doubt == 0


def test_a_peer_that_does_not_come_back_is_waited_for_only_so_long():
    mesh, a, b, c, _ = forward_on_a_dying_link(b"stranded?", peer_stores_it=False)
    _, at_c = c.consumer("orders")
    mesh.settle()
    mesh.clock.advance(TIMEOUT_MS / 1000 - 0.1)
    mesh.settle()
    assert at_c.messages == []
    mesh.clock.advance(0.1)
    mesh.settle()
    (delivered,) = at_c.messages
    assert delivered.body == b"stranded?" and delivered.redelivered
    assert a.broker.queues["orders"].mesh.in_doubt == 0


def test_after_a_restart_recovered_messages_wait_for_every_peer_known_before():
    mesh = MeshHarness(in_doubt_timeout_ms=TIMEOUT_MS)
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    to_b = mesh.link(a, b)
    to_c = mesh.link(a, c)
    b_session, at_b = b.consumer("orders")
    mesh.settle()
    a.send("orders", b"with b")
    mesh.clock.advance(0)
    to_b.pump()  # b has it; a dies before the STORED arrives
    lose(mesh, to_b, a, b)
    b_session.close()
    for i in range(3):
        a.send("orders", b"backlog %d" % i)
    lose(mesh, to_c, a, c)
    a.restart()
    queue = a.broker.queues["orders"]
    assert len(queue) == 0 and queue.mesh.in_doubt == 4
    _, at_c = c.consumer("orders")
    mesh.link(a, c)
    mesh.settle()
    assert at_c.messages == [] and queue.mesh.in_doubt == 4  # b has not said yet
    mesh.link(a, b)
    mesh.settle()
    assert at_b.bodies == [b"with b"]
    assert at_c.bodies == [b"backlog 0", b"backlog 1", b"backlog 2"] and all(m.redelivered for m in at_c.messages)
    assert queue.mesh.in_doubt == 0 and a.stored == []


def test_a_node_without_peers_holds_nothing_back_after_a_restart():
    mesh = MeshHarness(in_doubt_timeout_ms=TIMEOUT_MS)
    a = mesh.node("a")
    a.send("orders", b"kept")
    a.restart()
    _, sink = a.consumer("orders")
    assert sink.bodies == [b"kept"] and sink.messages[0].redelivered


def test_scale_down_hands_over_what_is_in_doubt():
    mesh, a, b, c, _ = forward_on_a_dying_link(b"in doubt", peer_stores_it=False)
    assert a.broker.queues["orders"].mesh.in_doubt == 1
    done = mesh.scale_down(a)
    assert done and [m.body for m in c.broker.queues["orders"]] == [b"in doubt"]
    assert a.stored == []


def test_a_node_that_scaled_down_is_not_waited_for_after_a_restart():
    mesh = MeshHarness(in_doubt_timeout_ms=TIMEOUT_MS)
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    to_b = mesh.link(a, b)
    to_c = mesh.link(c, a)
    c.send("orders", b"from c")
    assert mesh.scale_down(c)  # c hands its message to a and leaves for good
    assert [m.body for m in a.broker.queues["orders"]] == [b"from c"]
    mesh.cut(to_c)
    a.send("orders", b"from a")
    mesh.cut(to_b)
    a.restart()
    assert c.mesh.node_id not in a.mesh.custody.known_peers
    _, at_b = b.consumer("orders")
    mesh.link(a, b)
    mesh.settle()  # b answers at once; c is not waited for
    assert sorted(at_b.bodies) == [b"from a", b"from c"]
    assert a.broker.queues["orders"].mesh.in_doubt == 0 and a.stored == []


def traced_on(*nodes) -> JourneyStore:
    """Each node's broker records journeys into one store (gateway.broker.tracing)."""
    store = JourneyStore(max_records=10_000, max_bytes=10**8, max_age_s=3600, clock=lambda: 0.0)
    for node in nodes:
        node.broker.tracer = Tracer(store, node.mesh.node_id, node.name, lambda: 0.0)
    return store


def test_a_traced_message_held_in_doubt_records_the_doubt_and_how_it_ended():
    mesh = MeshHarness(in_doubt_timeout_ms=TIMEOUT_MS)
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    store = traced_on(a, b, c)
    to_b = mesh.link(a, b)
    mesh.link(a, c)
    _, at_b = b.consumer("orders")
    mesh.settle()
    a.send("orders", b"held", trace="true")
    mesh.clock.advance(0)  # on the link, still in a's buffer: b never gets it
    lose(mesh, to_b, a, b)
    mesh.link(a, b)  # b answers: it has none of a's messages
    mesh.settle()
    on_a = [(r.step, r.peer, r.reason) for r in store.steps() if r.node == a.mesh.node_id]
    b_id = b.mesh.node_id
    assert ("in_doubt", b_id, None) in on_a, on_a
    assert on_a.index(("in_doubt", b_id, None)) < on_a.index(("doubt_settled", b_id, "requeued")), on_a
    assert ("requeued", None, "in doubt released") in on_a, on_a
    assert at_b.bodies == [b"held"]  # then delivered, marked redelivered
