"""Epoch fencing on mesh links (docs/ha.md): a node id presenting an older epoch
than its peer has seen is refused, and the refused process learns, from a refusal
it can verify, that it was replaced."""

from __future__ import annotations

import logging

from mesh.link import PROTOCOL_VERSION
from mesh.wire import FrameType
from tests.protocol.mesh_harness import MeshHarness, SimNode
from tests.protocol.mesh_peer_support import RawPeer, hello


def at_epoch(node: SimNode, epoch: int, fenced: list[str]) -> SimNode:
    node.mesh.epoch = epoch
    node.mesh.on_fenced = fenced.append
    return node


def same_node(harness: MeshHarness, original: SimNode, epoch: int, fenced: list[str]) -> SimNode:
    """Another process of ``original``'s node (its data dir, taken over or copied)."""
    twin = harness.node(original.name, node_id=original.mesh.node_id)
    return at_epoch(twin, epoch, fenced)


def test_the_hello_carries_the_epoch_in_a_hello_a_node_of_protocol_version_4_takes():
    harness = MeshHarness()
    a = at_epoch(harness.node("a"), 7, [])
    hello = a.mesh.identity.hello("n")
    assert hello.version == 4 and hello.speaks == PROTOCOL_VERSION == 5 and hello.epoch == 7


def test_a_peer_refuses_a_node_id_at_an_older_epoch_and_the_old_process_is_fenced(caplog):
    harness = MeshHarness()
    fenced_new, fenced_old = [], []
    b = harness.node("b")
    a1 = at_epoch(harness.node("a"), 1, fenced_old)
    a2 = same_node(harness, a1, 2, fenced_new)
    harness.cut(harness.link(a2, b))  # b has seen epoch 2 of a's node id
    assert b.mesh.peer_epochs[a1.mesh.node_id] == 2
    with caplog.at_level(logging.INFO):
        harness.link(a1, b)  # the old process comes back
    assert b.mesh.peers == {} and a1.mesh.peers == {}
    assert fenced_new == []
    assert len(fenced_old) == 1 and "epoch 2" in fenced_old[0] and "replaced" in fenced_old[0]
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # The refusing peer says why, and so does the dialler that was refused.
    assert any("refused" in m and "presented epoch 1" in m and "seen epoch 2" in m for m in messages), messages
    assert any("refused the link" in m and "presented epoch 1" in m for m in messages), messages


def test_the_new_process_takes_the_old_processs_place_on_a_live_link():
    harness = MeshHarness()
    fenced_new, fenced_old = [], []
    b = harness.node("b")
    a1 = at_epoch(harness.node("a"), 1, fenced_old)
    harness.link(a1, b)
    _, sink = b.consumer("orders")
    harness.settle()
    assert b.mesh.peers[a1.mesh.node_id].link.hello.epoch == 1
    a2 = same_node(harness, a1, 2, fenced_new)  # took the data dir over while a1 still had its link (a partition)
    harness.link(a2, b)
    assert b.mesh.peers[a1.mesh.node_id].link.hello.epoch == 2
    assert len(fenced_old) == 1 and fenced_new == []
    harness.settle()
    a2.send("orders", b"after the takeover")
    harness.settle()
    assert sink.bodies == [b"after the takeover"]


def test_a_fencing_refusal_without_a_valid_proof_stops_nothing(caplog):
    harness = MeshHarness()
    fenced = []
    a = at_epoch(harness.node("a"), 1, fenced)
    # A node refuses with a fencing proof only a peer that proved the password (test_mesh_hostile):
    # a forged refusal comes from a peer that did not.
    forger = RawPeer(a, node_dials=True)
    forger.send(FrameType.HELLO, hello("b-node", "n"))
    with caplog.at_level(logging.WARNING):
        forger.send(FrameType.REFUSE, {"reason": "you were replaced", "fenced": 5, "proof": "0" * 64})
    assert a.mesh.peers == {} and fenced == [] and forger.closed
    assert any("without a valid proof" in r.getMessage() for r in caplog.records)


def test_only_a_proven_peer_teaches_an_epoch():
    harness = MeshHarness()
    b = harness.node("b", cluster_password="right")
    intruder = at_epoch(harness.node("x", cluster_password="wrong"), 99, [])
    harness.link(intruder, b)
    assert b.mesh.peers == {} and b.mesh.peer_epochs == {}


def test_the_epochs_seen_survive_a_restart_of_the_peer():
    harness = MeshHarness()
    fenced_old = []
    b = harness.node("b")
    a1 = at_epoch(harness.node("a"), 3, fenced_old)
    a2 = same_node(harness, a1, 4, [])
    harness.cut(harness.link(a2, b))
    b.restart()  # recovers its peer records from the store
    assert b.mesh.peer_epochs[a1.mesh.node_id] == 4
    harness.link(a1, b)
    assert b.mesh.peers == {} and len(fenced_old) == 1


def test_a_forgotten_node_may_come_back_at_any_epoch():
    harness = MeshHarness()
    b = harness.node("b")
    a2 = at_epoch(harness.node("a"), 4, [])
    harness.cut(harness.link(a2, b))
    for _ in range(3 * 15 + 1):  # a drops out of b's view (3 x connection_ttl_ms)
        harness.clock.advance(1)
        b.mesh.topology.gossip()
        harness.settle()
    assert b.mesh.forget(a2.mesh.node_id) is None
    assert a2.mesh.node_id not in b.mesh.peer_epochs
    fenced = []
    a1 = same_node(harness, a2, 1, fenced)  # e.g. its data dir restored from an old backup
    harness.link(a1, b)
    assert a1.mesh.node_id in b.mesh.peers and fenced == []


def test_the_same_node_id_at_a_higher_epoch_fences_the_older_process_whoever_dials():
    for older_dials in (True, False):
        harness = MeshHarness()
        fenced_old, fenced_new = [], []
        old = at_epoch(harness.node("a"), 1, fenced_old)
        new = same_node(harness, old, 2, fenced_new)
        new.mesh.started_at = old.mesh.started_at + 10  # started later: a copied data dir's test would stop it
        harness.link(old, new) if older_dials else harness.link(new, old)
        assert old.mesh.peers == {} and new.mesh.peers == {}
        assert fenced_new == [], older_dials
        assert len(fenced_old) == 1 and "replaced" in fenced_old[0], older_dials


def test_equal_epochs_of_one_node_id_are_still_a_copied_data_dir():
    harness = MeshHarness()
    fatal, fenced = [], []
    a = at_epoch(harness.node("a"), 2, fenced)
    copy = same_node(harness, a, 2, fenced)
    copy.mesh.started_at = a.mesh.started_at + 1
    copy.mesh.on_fatal = fatal.append
    harness.link(copy, a)
    assert fenced == [] and fatal and "data dir was copied" in fatal[0]
