"""Forgetting a node that crashed for good: an administrator's word, passed to
every node, ends the waits for it and drops what was kept for it."""

from __future__ import annotations

from gateway.broker.message import TOPIC
from tests.protocol.mesh_harness import MeshHarness
from tests.protocol.test_mesh_in_doubt import lose

STALE_AFTER = 3 * 15 + 1  # seconds: 3 x connection_ttl_ms (default), and one more


def crashed_for_good():
    """a linked with b and c; c had a topic subscriber, then crashed and never came
    back; a restarted holding a message, and b has answered for it: c has not."""
    mesh = MeshHarness(in_doubt_timeout_ms=600_000)
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    to_b = mesh.link(a, b)
    to_c = mesh.link(a, c)
    c.consumer("news", kind=TOPIC)
    mesh.settle()
    a.mesh.topology.gossip()  # as every check_period_ms: a tells b of c
    mesh.settle()
    lose(mesh, to_c, a, c)
    a.send("news", b"for c", kind=TOPIC)  # kept on a for c's subscriber
    a.send("orders", b"kept")
    lose(mesh, to_b, a, b)
    a.restart()
    mesh.link(a, b)
    mesh.settle()
    assert a.broker.queues["orders"].mesh.in_doubt == 1  # still waiting for c
    return mesh, a, b, c


def let_time_pass(mesh: MeshHarness, seconds: int, *nodes) -> None:
    """Seconds go by, and the nodes gossip as their check_period_ms loop would."""
    for _ in range(seconds):
        mesh.clock.advance(1)
        for node in nodes:
            node.mesh.topology.gossip()
        mesh.settle()


def test_a_forgotten_node_is_not_waited_for_and_nothing_is_kept_for_it():
    mesh, a, b, c = crashed_for_good()
    c_id = c.mesh.node_id
    assert ("link/" + c_id) in a.broker.bindings and c_id in a.mesh.custody.known_peers
    refusal = b.mesh.forget(c_id)
    assert refusal is not None and "still in the mesh" in refusal  # b heard of c lately
    let_time_pass(mesh, STALE_AFTER, a, b)  # c drops out of every node's view of the mesh
    _, at_b = b.consumer("orders")
    mesh.settle()
    assert at_b.messages == []
    assert b.mesh.forget(c_id) is None  # asked on b; b passes the word to a
    mesh.settle()
    assert at_b.bodies == [b"kept"] and at_b.messages[0].redelivered
    assert a.broker.queues["orders"].mesh.in_doubt == 0
    assert c_id not in a.mesh.custody.known_peers and ("P:", c_id) not in a.broker.store.messages
    assert ("link/" + c_id) not in a.broker.bindings and a.stored == []
    assert c_id not in a.mesh.topology.entries and c_id not in b.mesh.topology.entries


def test_a_node_linked_with_the_asked_one_or_with_another_is_not_forgotten():
    mesh = MeshHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    mesh.link(a, b)
    mesh.link(a, c)
    refusal = b.mesh.forget(a.mesh.node_id)
    assert refusal is not None and "linked with this node" in refusal
    assert "cannot forget itself" in b.mesh.forget(b.mesh.node_id)
    c.consumer("news", kind=TOPIC)
    mesh.settle()
    # b has not heard of c lately (no gossip yet), but a has a link with it: a keeps it.
    assert c.mesh.node_id not in b.mesh.topology.entries and b.mesh.forget(c.mesh.node_id) is None
    mesh.settle()
    assert c.mesh.node_id in a.mesh.custody.known_peers and ("link/" + c.mesh.node_id) in a.broker.bindings


def test_a_dead_node_drops_out_of_the_view_and_is_not_handed_back():
    mesh = MeshHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    to_b = mesh.link(a, b)
    to_c = mesh.link(a, c)
    a.mesh.topology.gossip()
    mesh.settle()
    lose(mesh, to_c, a, c)  # c dies
    let_time_pass(mesh, 10)
    lose(mesh, to_b, a, b)
    a.restart()  # a starts with an empty view and hears of c from b, 10 s after c's last word
    mesh.link(a, b)
    b.mesh.topology.gossip()
    mesh.settle()
    assert c.mesh.node_id in a.mesh.topology.entries
    # a and b gossip out of step: neither may hand the other its old news of c as new.
    for second in range(STALE_AFTER + 10):
        mesh.clock.advance(1)
        (a if second % 2 else b).mesh.topology.gossip()
        mesh.settle()
    assert c.mesh.node_id not in a.mesh.topology.entries and c.mesh.node_id not in b.mesh.topology.entries


WEEK = 7 * 24 * 3600


class Recorder:
    def __init__(self) -> None:
        self.events = []

    def emit(self, event) -> None:
        self.events.append(event)

    def count(self, event, n: int = 1) -> None:
        pass


def recording(*nodes) -> None:
    for node in nodes:
        node.recorder = node.mesh.departures.events = Recorder()


def forgotten_events(node) -> list:
    return [e for e in node.recorder.events if type(e).__name__ == "NodeLeft" and "peer_retention_s" in e.reason]


def test_a_peer_not_heard_of_for_peer_retention_is_forgotten_with_its_topic_backlog():
    mesh = MeshHarness()
    a, c = mesh.node("a"), mesh.node("c")
    recording(a)
    to_c = mesh.link(a, c)
    c.consumer("news", kind=TOPIC)
    mesh.settle()
    lose(mesh, to_c, a, c)
    c_id = c.mesh.node_id
    a.send("news", b"for c", kind=TOPIC)  # kept on a for c's subscriber: the backlog that would grow
    assert ("link/" + c_id) in a.broker.bindings and a.stored
    mesh.clock.advance(WEEK - 60)
    assert a.mesh.forget_departed() == []  # a day short of nothing: still waited for
    mesh.clock.advance(61)
    assert a.mesh.forget_departed() == [c_id]
    assert c_id not in a.mesh.custody.known_peers and ("P:", c_id) not in a.broker.store.messages
    assert ("link/" + c_id) not in a.broker.bindings and a.stored == []
    (event,) = forgotten_events(a)
    assert event.subject == c_id and "7.0 d" in event.reason


def test_peer_retention_counts_from_the_last_link_across_a_restart_and_a_live_peer_is_kept():
    mesh = MeshHarness(peer_retention_s=3600)
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    to_b, to_c = mesh.link(a, b), mesh.link(a, c)
    mesh.clock.advance(1800)
    lose(mesh, to_c, a, c)
    lose(mesh, to_b, a, b)
    mesh.clock.advance(1800)
    a.restart()  # the record says when the link went: the clock does not start again
    recording(a)
    to_b = mesh.link(a, b)
    mesh.clock.advance(1900)
    # b links with a again (and so is heard of); c was last linked 1 h 3 min ago.
    assert a.mesh.forget_departed() == [c.mesh.node_id]
    assert b.mesh.node_id in a.mesh.custody.known_peers
    mesh.clock.advance(7200)
    assert a.mesh.forget_departed() == []  # b is linked: never forgotten


def test_a_node_that_stopped_while_linked_counts_from_its_restart_not_an_older_link():
    mesh = MeshHarness(peer_retention_s=3600)
    a, c = mesh.node("a"), mesh.node("c")
    mesh.clock.advance(100)
    lose(mesh, mesh.link(a, c), a, c)
    assert a.mesh.custody.last_linked(c.mesh.node_id) == 100  # the old link went at t=100
    mesh.clock.advance(3000)
    to_c = mesh.link(a, c)
    assert a.mesh.custody.last_linked(c.mesh.node_id) == 0  # linked again: the old time no longer holds
    mesh.clock.advance(3000)
    a.mesh.custody.unlinked = lambda *_: None  # a dies while linked: it writes nothing more
    mesh.cut(to_c)
    a.mesh.link_down_since.clear()
    a.restart()
    mesh.clock.advance(3000)
    assert a.mesh.forget_departed() == []  # 3000 s since a's restart, not 6000 since the old link
    mesh.clock.advance(700)
    assert a.mesh.forget_departed() == [c.mesh.node_id]
