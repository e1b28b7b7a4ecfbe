"""A mesh link port takes connections from anyone who can reach it. What a peer that
has not proven the cluster password sends is refused with a reason, logged within
bounds, and never acted upon: no proof to relay, no fencing proof, no stop of the
node. What a proven peer sends that does not have the shape of its frame type is
refused too, never a Python exception out of the protocol (bench/fuzz found each)."""

from __future__ import annotations

import json
import logging
import struct

import pytest

from gateway.hostile_log import LINE_LIMIT
from mesh.codec import encode_frame
from mesh.link import LinkState
from mesh.wire import MAX_MESSAGE_ID, MAX_MESSAGE_KEY, MAX_NAME, MAX_PATH, MAX_REQUEST_ID, FrameType
from model.names import DEFAULT_VHOST, MAX_NAME_BYTES
from tests.protocol.mesh_harness import MeshHarness
from tests.protocol.mesh_peer_support import RawPeer, chunked, demand, hello, message, proof, route, up_to

PASSWORD = "hostile-test-secret"


def harness() -> MeshHarness:
    return MeshHarness(insecure_cluster=False, cluster_password=PASSWORD)


def test_a_listener_proves_the_password_only_after_the_dialler_did():
    node = harness().node("b")
    peer = RawPeer(node)
    peer.send(FrameType.HELLO, hello("intruder", "a-nonce-of-someone-else"))
    assert peer.of(FrameType.AUTH) == [] and not peer.closed  # nothing to relay elsewhere
    peer.send(FrameType.AUTH, {"proof": proof(PASSWORD, peer.node_hello["nonce"], "intruder")})
    auths = peer.of(FrameType.AUTH)
    assert auths == [{"proof": proof(PASSWORD, "a-nonce-of-someone-else", node.mesh.node_id)}]
    assert peer.link.state is LinkState.ESTABLISHED


def test_one_nodes_proof_cannot_be_relayed_to_pass_for_it_at_another():
    """The attack: hand node B the nonce node A's listener gave you; relay what B
    proves back to A, claiming to be B. A must not link with the relay."""
    mesh = harness()
    a, b = mesh.node("a"), mesh.node("b")
    at_a, at_b = RawPeer(a), RawPeer(b)
    at_a.send(FrameType.HELLO, hello(b.mesh.node_id, "relay-nonce"))
    at_b.send(FrameType.HELLO, hello("relay", at_a.node_hello["nonce"]))
    for auth in at_b.of(FrameType.AUTH):
        at_a.send(FrameType.AUTH, auth)
    assert at_a.link.state is not LinkState.ESTABLISHED and a.mesh.peers == {}


def test_an_unproven_hello_with_the_nodes_own_id_stops_nothing():
    node = harness().node("a")
    fatal, fenced = [], []
    node.mesh.on_fatal, node.mesh.on_fenced = fatal.append, fenced.append
    peer = RawPeer(node)
    # As a copy of its data dir started earlier would say, or at a later epoch.
    peer.send(FrameType.HELLO, hello(node.mesh.node_id, "other-nonce", started=0.0, epoch=node.mesh.epoch + 5))
    peer.send(FrameType.AUTH, {"proof": "0" * 64})
    assert fatal == [] and fenced == []
    assert peer.refusal() == "wrong cluster_password" and peer.closed


def test_a_fencing_refusal_is_made_only_for_a_proven_peer():
    node = harness().node("b")
    node.mesh.peer_epochs["old-node"] = 5
    peer = RawPeer(node)
    peer.send(FrameType.HELLO, hello("old-node", "any-nonce", epoch=1))
    peer.send(FrameType.AUTH, {"proof": "0" * 64})
    refusals = peer.of(FrameType.REFUSE)
    assert refusals == [{"reason": "wrong cluster_password"}]  # no "fenced", no proof to replay elsewhere


@pytest.mark.parametrize("bad", [
    {"node_id": ["a list"]}, {"node_id": ""}, {"nonce": None}, {"nonce": 7}, {"name": "n" * 5000},
    {"name": {"a": 1}}, {"user": ["meshgate"]}, {"started": "soon"}, {"started": float("inf")},
    {"link": "127.0.0.1:1"}, {"stomp": [1, 2, 3]},
])
def test_a_malformed_hello_is_refused_with_a_reason(bad):
    peer = RawPeer(harness().node("b"))
    body = {**hello("peer-node", "n"), **bad}
    peer.raw(encode_frame(FrameType.HELLO, json.dumps(body).encode()))
    reason = peer.refusal()
    assert ("HELLO" in reason or "protocol version" in reason) and peer.closed
    assert len(reason) < 100


def test_a_hello_without_a_nonce_is_refused():
    peer = RawPeer(harness().node("b"))
    body = hello("peer-node", "n")
    del body["nonce"]
    peer.send(FrameType.HELLO, body)
    assert peer.refusal() == "a HELLO without a valid nonce"


@pytest.mark.parametrize("kind, body", [
    (FrameType.STORED, 5), (FrameType.RELEASED, [["a"]]), (FrameType.MARKERS, [None]), (FrameType.BUSY, {"a": 1}),
    (FrameType.ASK, "ids"), (FrameType.HAVE, [1]),
    (FrameType.DEMAND, [{"kind": "queue", "address": "q"}]), (FrameType.DEMAND, [{"kind": "queue", "address": "q",
                                                                                  "path": ["x"], "consumers": "2"}]),
    (FrameType.DEMAND, {"kind": "queue"}), (FrameType.DURABLE, []), (FrameType.DURABLE, {"link": "x"}),
    (FrameType.FORGET, {"node": 1, "id": "i"}), (FrameType.FORGET, {"node": "x" * 5000, "id": "i"}),
    (FrameType.FORGET, {"node": "n", "id": "i" * 5000}), (FrameType.REQUEST, {"id": ["i"], "route": []}),
    (FrameType.REPLY, {"id": "i", "route": "r"}), (FrameType.DEFINITIONS, {"a": 1}),
])
def test_a_proven_peers_frame_of_the_wrong_shape_is_refused(kind, body):
    node = harness().node("b")
    peer = RawPeer(node)
    peer.establish(PASSWORD)
    peer.send(kind, body)
    assert f"malformed link frame of type {kind}: expected" in peer.refusal() and peer.closed


_IDS = (FrameType.STORED, FrameType.BUSY, FrameType.MARKERS, FrameType.ASK, FrameType.HAVE, FrameType.RELEASED)


@pytest.mark.parametrize("kind, bodies", [
    pytest.param(FrameType.DEMAND, (demand(kind="durable"), demand(kind="stream")), id="demand-kind"),
    pytest.param(FrameType.DEMAND, up_to(MAX_NAME_BYTES, lambda n: demand(address="a" * n)), id="demand-address"),
    pytest.param(FrameType.DEMAND, up_to(MAX_NAME, lambda n: demand(path=["x" * n, "peer-node"])),
                 id="demand-path-node"),
    pytest.param(FrameType.DEMAND, up_to(MAX_PATH, lambda n: demand(path=route(n))), id="demand-path-length"),
    pytest.param(FrameType.DEMAND, (demand(consumers=0), demand(consumers=-1)), id="demand-consumers"),
    pytest.param(FrameType.DURABLE, up_to(MAX_NAME_BYTES, lambda n: {"name": "d" * n, "topic": "t"}),
                 id="durable-name"),
    pytest.param(FrameType.DURABLE, up_to(MAX_NAME_BYTES, lambda n: {"name": "d", "topic": "t" * n}),
                 id="durable-topic"),
    pytest.param(FrameType.DURABLE, up_to(MAX_NAME_BYTES, lambda n: {"name": "l" * n, "link": "x", "patterns": []}),
                 id="handover-name"),
    pytest.param(FrameType.DURABLE, up_to(MAX_NAME, lambda n: {"link": "x" * n, "patterns": []}), id="handover-link"),
    pytest.param(FrameType.DURABLE, up_to(MAX_NAME_BYTES, lambda n: {"link": "x", "patterns": ["t" * n]}),
                 id="handover-pattern"),
    *(pytest.param(kind, bodies, id=f"{kind.name.lower()}-{field}") for kind in (FrameType.REQUEST, FrameType.REPLY)
      for field, bodies in [
          ("id", up_to(MAX_REQUEST_ID, lambda n: {"id": "i" * n, "route": ["a", "z"]})),
          ("route-node", up_to(MAX_NAME, lambda n: {"id": "i", "route": ["a", "z" * n]})),
          ("route-length", up_to(MAX_PATH, lambda n: {"id": "i", "route": route(n)}))]),
    *(pytest.param(kind, up_to(MAX_MESSAGE_KEY, lambda n: ["k" * n]), id=f"{kind.name.lower()}-id") for kind in _IDS),
])
def test_a_proven_peers_frame_past_what_a_node_sends_is_refused_in_a_short_line(kind, bodies, caplog):
    """Up to the bound the link stays (no node of any release sends more), past it
    the frame is malformed: what the node logs and passes on stays small."""
    fits, past = bodies
    peer = RawPeer(harness().node("b"))
    peer.establish(PASSWORD)
    with caplog.at_level(logging.DEBUG):
        peer.send(kind, fits)
        assert peer.of(FrameType.REFUSE) == [] and peer.link.state is LinkState.ESTABLISHED
        peer.send(kind, past)
    assert f"malformed link frame of type {kind}: expected" in peer.refusal() and peer.closed
    assert max(len(record.getMessage()) for record in caplog.records) <= LINE_LIMIT


LONG_ADDRESS, LONG_VHOST = "a" * MAX_NAME_BYTES, "v" * MAX_NAME_BYTES


@pytest.mark.parametrize("frames, address, vhost, why", [
    pytest.param(up_to(MAX_MESSAGE_ID, lambda n: message(message_id="i" * n)), "q", DEFAULT_VHOST, "a message id",
                 id="id"),
    pytest.param(up_to(MAX_NAME, lambda n: message(origin="o" * n)), "q", DEFAULT_VHOST, "an origin", id="origin"),
    pytest.param(up_to(MAX_NAME_BYTES, lambda n: message(address="a" * n)), LONG_ADDRESS, DEFAULT_VHOST,
                 "an address", id="address"),
    pytest.param(up_to(MAX_NAME, lambda n: message(path=("x" * n, "peer-node"))), "q", DEFAULT_VHOST,
                 "a path's node id", id="path-node"),
    pytest.param(up_to(MAX_PATH, lambda n: message(path=tuple(route(n)))), "q", DEFAULT_VHOST, "a path of more",
                 id="path-length"),
    pytest.param(up_to(MAX_NAME_BYTES, lambda n: message(target="t" * n)), "q", DEFAULT_VHOST, "a target",
                 id="target"),
    pytest.param(up_to(MAX_NAME_BYTES, lambda n: message(vhost="v" * n)), "q", LONG_VHOST, "a vhost", id="vhost"),
    pytest.param(tuple(map(chunked, up_to(MAX_MESSAGE_ID, lambda n: message(message_id="i" * n)))), "q",
                 DEFAULT_VHOST, "a message id", id="id-in-chunks"),
])
def test_a_proven_peers_message_past_what_a_node_sends_is_refused_in_a_short_line(frames, address, vhost, why,
                                                                                  caplog):
    """As its control frames: up to the bound the message arrives (a durable subscription
    that is not there routes it), past it the frame is malformed, saying which field."""
    fits, past = frames
    node = harness().node("b", vhosts=() if vhost == DEFAULT_VHOST else (vhost,))
    peer = RawPeer(node)
    peer.establish(PASSWORD)
    with caplog.at_level(logging.DEBUG):
        peer.raw(fits)
        assert len(node.vhosts.brokers[vhost].queues[address]) == 1
        assert peer.of(FrameType.REFUSE) == [] and peer.link.state is LinkState.ESTABLISHED
        peer.raw(past)
    assert peer.refusal().startswith(f"malformed message frame: {why}") and peer.closed
    assert max(len(record.getMessage()) for record in caplog.records) <= LINE_LIMIT


@pytest.mark.parametrize("kind, payload", [(FrameType.STORED, b'["\xff"]'), (FrameType.DURABLE, b'{"name": "\xb4"}')])
def test_a_proven_peers_frame_that_is_not_utf_8_is_refused(kind, payload):
    peer = RawPeer(harness().node("b"))
    peer.establish(PASSWORD)
    peer.raw(encode_frame(kind, payload))
    assert peer.refusal().startswith("malformed control frame") and peer.closed


def test_a_message_whose_json_fields_have_the_wrong_types_is_refused():
    peer = RawPeer(harness().node("b"))
    peer.establish(PASSWORD)
    block = json.dumps(["id-1", "origin", {"not": "an address"}, ["peer-node"], "", {}]).encode()
    head = struct.pack(">IIBBqBd", len(block), 0, 0, 4, 0, 4, 1.7e9)  # flag 4: the text block is JSON
    peer.raw(encode_frame(FrameType.MESSAGE, head + block))
    assert peer.refusal().startswith("malformed message frame") and peer.closed


def test_an_internal_error_closes_the_link_with_a_reason_and_the_node_goes_on(monkeypatch, caplog):
    node = harness().node("b")
    peer = RawPeer(node)
    peer.establish(PASSWORD)

    def broken(link, ids):
        raise KeyError("a bug")

    monkeypatch.setitem(node.mesh.frames.handlers, FrameType.STORED, broken)
    with caplog.at_level(logging.ERROR):
        peer.send(FrameType.STORED, ["x"])
    assert "internal error" in peer.refusal() and peer.closed
    assert any("internal error" in r.getMessage() and "KeyError" in r.getMessage() for r in caplog.records)


def test_a_refused_link_closes_even_while_its_socket_is_full():
    """Twisted resumes a paused producer instead of closing: unregistered, it closes."""
    peer = RawPeer(harness().node("b"))
    assert peer.transport.producer is peer.link
    peer.link.pauseProducing()
    peer.send(FrameType.HELLO, {"version": 1})
    assert peer.closed and peer.transport.producer is None


def test_what_unproven_peers_make_a_node_log_is_bounded(caplog):
    node = harness().node("b")
    with caplog.at_level(logging.INFO, logger="mesh"):
        for i in range(50):
            peer = RawPeer(node)
            peer.send(FrameType.HELLO, hello(f"peer-{i}", "n", name="x" * 150))
            peer.send(FrameType.REFUSE, {"reason": "r" * 100_000})
    lines = [r.getMessage() for r in caplog.records]
    assert 0 < len(lines) <= 11, len(lines)
    assert max(len(line) for line in lines) < 1000


def test_a_proof_of_other_characters_is_a_wrong_password():
    peer = RawPeer(harness().node("b"))
    peer.send(FrameType.HELLO, hello("peer-node", "n"))
    peer.send(FrameType.AUTH, {"proof": "é" * 64})
    assert peer.refusal() == "wrong cluster_password"


def test_demand_with_a_selector_that_does_not_parse_is_refused_saying_why():
    peer = RawPeer(harness().node("b"))
    peer.establish(PASSWORD)
    peer.send(FrameType.DEMAND, [{"kind": "queue", "address": "q", "selector": "a {", "consumers": 1,
                                  "path": ["peer-node"]}])
    assert "selector" in peer.refusal() and peer.closed


def test_a_message_with_an_accept_time_that_is_not_a_number_is_refused():
    peer = RawPeer(harness().node("b"))
    peer.establish(PASSWORD)
    block = "\0".join(("id-1", "origin", "q", "peer-node", "")).encode()
    head = struct.pack(">IIBBqBd", len(block), 0, 0, 4, 0, 0, float("nan"))
    peer.raw(encode_frame(FrameType.MESSAGE, head + block))
    assert "not a number" in peer.refusal() and peer.closed
