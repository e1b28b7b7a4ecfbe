"""Quorum votes (mesh.quorum, docs/ha.md "Takeover and quorum"): a backup without a
witness asks the mesh's other nodes, over a connection to their mesh listener that
never becomes a link, whether they still hear its primary's node id. A peer says yes
only if it has no link to that node id and has heard nothing from it for the
takeover time; a yes records the new epoch, which fences the old primary's links."""

from __future__ import annotations

import logging

import msgspec
import pytest
from twisted.internet import defer
from twisted.test import iosim

from mesh.codec import LinkParser
from mesh.link import LinkProtocol, LinkState
from mesh.quorum import answer_vote, check_voted, make_vote, voted_proof
from mesh.wire import FrameType, decode_control
from meshgate.replication.quorum import MeshQuorum, _Ask, _AskFactory
from tests.protocol.mesh_harness import MeshHarness, SimNode

PASSWORD = "quorum-secret"


def mesh(**config) -> MeshHarness:
    return MeshHarness(insecure_cluster=False, cluster_password=PASSWORD, **config)


def ask(harness: MeshHarness, peer: SimNode, node_id: str, epoch: int, *, op: str = "vote", after_ms: int = 1000,
        password: str = PASSWORD) -> dict:
    """What the backup's side gets from ``peer`` for one question (over iosim)."""
    factory = _AskFactory(password=password, user="meshgate", op=op, node_id=node_id, epoch=epoch,
                          after_ms=after_ms)
    server = LinkProtocol(peer.mesh.links, dialled=False)
    client = _Ask(factory)
    pump = iosim.connect(server, iosim.FakeTransport(server, True), client, iosim.FakeTransport(client, False),
                         clock=harness.clock)
    harness.pumps.append(pump)
    harness.settle()
    harness.pumps.remove(pump)
    assert factory.done.called
    answers: list[dict] = []
    factory.done.addCallback(answers.append)
    assert peer.mesh.peers.get(client.nonce) is None and server.state is not LinkState.ESTABLISHED, "a vote made a link"
    return answers[0]


def primary_and_peer(harness: MeshHarness, epoch: int = 3) -> tuple[SimNode, SimNode, iosim.IOPump]:
    primary, peer = harness.node("primary"), harness.node("c")
    primary.mesh.epoch = epoch
    pump = harness.link(primary, peer)
    harness.clock.advance(5)  # both up for longer than the takeover time
    return primary, peer, pump


def test_the_hello_says_the_node_answers_votes_and_a_vote_and_its_answer_are_proven():
    harness = mesh()
    peer = harness.node("c")
    hello = peer.mesh.identity.hello("n1")
    assert hello.votes is True
    vote = make_vote(PASSWORD, "n1", op="vote", node_id="x", epoch=2, after_ms=1000, user="meshgate", nonce="v1")
    harness.clock.advance(5)
    reply = answer_vote(peer.mesh.votes, "n1", vote)
    assert reply["granted"] is True and reply["nonce"] == "v1" and reply["node_id"] == peer.mesh.node_id
    assert reply["proof"] == voted_proof(PASSWORD, "v1", reply)
    # Bound to the peer's link nonce: the same vote replayed on another connection proves nothing.
    replayed = answer_vote(peer.mesh.votes, "n2", vote)
    assert replayed["granted"] is False and "no valid proof" in replayed["reason"]


def test_a_peer_linked_with_the_primary_says_no_and_names_how_recently_it_heard_it(caplog):
    harness = mesh()
    primary, peer, _ = primary_and_peer(harness)
    harness.clock.advance(0.3)
    with caplog.at_level(logging.INFO):
        answer = ask(harness, peer, primary.mesh.node_id, 4)
    assert answer["granted"] is False
    assert answer["reason"].startswith("I hear the primary: linked with it at epoch 3, last frame"), answer
    assert answer["name"] == "c" and peer.mesh.peer_epochs[primary.mesh.node_id] == 3
    assert primary.mesh.node_id in peer.mesh.peers, "the vote touched the primary's link"
    assert any("quorum vote from a backup" in r.getMessage() and ": no, I hear the primary" in r.getMessage()
               for r in caplog.records)


def test_a_peer_that_lost_the_primary_says_no_until_the_takeover_time_passed_then_yes_and_fences_it():
    harness = mesh()
    primary, peer, pump = primary_and_peer(harness)
    node_id = primary.mesh.node_id
    harness.clock.advance(0.4)
    harness.cut(pump)
    soon = ask(harness, peer, node_id, 4)
    assert soon["granted"] is False and soon["reason"].startswith("I hear the primary: last frame 0."), soon
    assert peer.mesh.peer_epochs[node_id] == 3
    harness.clock.advance(1.0)
    answer = ask(harness, peer, node_id, 4)
    assert answer["granted"] is True, answer
    assert peer.mesh.peer_epochs[node_id] == 4, "a yes records the new epoch"
    # Asked again for the same epoch (the backup had no majority yet): still yes; an older one: no.
    assert ask(harness, peer, node_id, 4)["granted"] is True
    stale = ask(harness, peer, node_id, 3)
    assert stale["granted"] is False and "not above epoch 4" in stale["reason"]
    # The old primary (epoch 3) comes back: refused, and it learns it was replaced.
    fenced: list[str] = []
    primary.mesh.on_fenced = fenced.append
    harness.link(primary, peer)
    assert node_id not in peer.mesh.peers and len(fenced) == 1 and "epoch 4" in fenced[0]


def test_a_peer_that_just_started_cannot_tell_and_says_no():
    harness = mesh()
    peer = harness.node("c")
    harness.clock.advance(0.2)
    answer = ask(harness, peer, "some-node-id", 2)
    assert answer["granted"] is False and "up only 0.2 s" in answer["reason"]
    assert "some-node-id" not in peer.mesh.peer_epochs


def test_a_vote_without_the_cluster_password_gets_no_and_its_answer_is_not_believed(caplog):
    harness = mesh()
    primary, peer, pump = primary_and_peer(harness)
    harness.cut(pump)
    harness.clock.advance(5)
    with caplog.at_level(logging.WARNING):
        answer = ask(harness, peer, primary.mesh.node_id, 4, password="not-the-password")
    assert answer["granted"] is False and "without a valid proof" in answer["reason"], answer
    assert peer.mesh.peer_epochs[primary.mesh.node_id] == 3, "a stranger's vote fenced the primary"
    assert any("without a valid proof of the cluster password" in r.getMessage() for r in caplog.records)


def test_a_peer_of_an_older_meshgate_is_asked_nothing_and_counts_as_no(monkeypatch):
    harness = mesh()
    peer = harness.node("c")
    harness.clock.advance(5)
    old_hello = peer.mesh.identity.hello
    monkeypatch.setattr(peer.mesh.identity, "hello", lambda nonce: {
        k: v for k, v in msgspec.to_builtins(old_hello(nonce)).items() if k != "votes"})
    sent = []
    original = LinkProtocol._handle
    monkeypatch.setattr(LinkProtocol, "_handle", lambda self, kind, payload: (sent.append(kind),
                                                                              original(self, kind, payload)))
    answer = ask(harness, peer, "some-node-id", 2)
    assert answer["granted"] is False and "answers no quorum votes" in answer["reason"]
    assert FrameType.VOTE not in sent and "some-node-id" not in peer.mesh.peer_epochs


def test_an_older_peer_that_gets_a_vote_anyway_refuses_it_as_an_unknown_frame():
    """A VOTE is a frame type an older node does not know: it refuses the connection (no answer: a no)."""
    harness = mesh()
    peer = harness.node("c")
    link = LinkProtocol(peer.mesh.links, dialled=True)  # a dialled link does not answer votes, as an older node
    transport = iosim.FakeTransport(link, False)
    link.makeConnection(transport)
    vote = make_vote(PASSWORD, "n", op="vote", node_id="x", epoch=2, after_ms=1000, user="meshgate", nonce="v")
    from mesh.codec import encode_control

    link.dataReceived(encode_control(FrameType.VOTE, vote))
    frames = LinkParser().feed(b"".join(transport.stream))
    kinds = [kind for kind, _ in frames]
    assert FrameType.VOTED not in kinds and FrameType.REFUSE in kinds
    refusal = decode_control(dict(frames)[FrameType.REFUSE])
    assert "unexpected link frame type 22" in refusal["reason"]


def test_asking_the_epoch_a_peer_has_seen_of_a_node():
    harness = mesh()
    primary, peer, _ = primary_and_peer(harness, epoch=7)
    answer = ask(harness, peer, primary.mesh.node_id, 0, op="epoch", after_ms=0)
    assert answer["known"] == 7 and answer["granted"] is False
    assert peer.mesh.peer_epochs[primary.mesh.node_id] == 7


class CannedQuorum(MeshQuorum):
    def __init__(self, answers: dict) -> None:
        super().__init__(None, tuple(answers), PASSWORD, "meshgate")
        self.answers = answers

    def _ask_one(self, address, **fields):
        return defer.succeed({**self.answers[address], "address": f"{address[0]}:{address[1]}"})


def verdict(answers: dict) -> dict:
    results: list[dict] = []
    CannedQuorum(answers).vote("node", 2, 1.0).addCallback(results.append)
    return results[0]


def test_a_strict_majority_of_the_configured_peers_decides_and_the_unreachable_count_as_no():
    yes = {"granted": True, "reason": "gone", "name": "c"}
    no = {"granted": False, "reason": "I hear the primary: last frame 0.3 s ago", "name": "d"}
    away = {"granted": False, "reason": "cannot be reached (ConnectionRefusedError)", "error": True}
    a, b, c, d = ("h", 1), ("h", 2), ("h", 3), ("h", 4)
    assert verdict({a: {**yes, "node_id": "1"}, b: {**yes, "node_id": "2"}})["granted"] is True
    assert verdict({a: {**yes, "node_id": "1"}, b: no})["granted"] is False  # 1 of 2 is no majority
    assert verdict({a: {**yes, "node_id": "1"}, b: away})["granted"] is False
    assert verdict({a: {**yes, "node_id": "1"}, b: {**yes, "node_id": "2"}, c: away})["granted"] is True
    assert verdict({a: {**yes, "node_id": "1"}, b: away, c: away, d: {**yes, "node_id": "4"}})["granted"] is False
    # One node reached by two configured addresses counts once.
    assert verdict({a: {**yes, "node_id": "1"}, b: {**yes, "node_id": "1"}, c: away})["granted"] is False
    refused = verdict({a: {**yes, "node_id": "1"}, b: no})
    assert "1 of the 2 other node(s) of [mesh] static agree, a majority needs 2" in refused["reason"]
    assert "d (h:2): no, I hear the primary: last frame 0.3 s ago" in refused["reason"]


@pytest.mark.parametrize("proof", ["é" * 64, 5, None, ["x"]])
def test_a_vote_whose_proof_is_no_ascii_string_is_refused_not_raised(proof):
    harness = mesh()
    primary, peer, _ = primary_and_peer(harness)
    vote = make_vote(PASSWORD, "n1", op="takeover", node_id=primary.mesh.node_id, epoch=4, after_ms=0,
                     user="meshgate", nonce="v1")
    answer = answer_vote(peer.mesh.votes, "n1", {**vote, "proof": proof})
    assert answer["granted"] is False and "no valid proof" in answer["reason"], answer
    assert check_voted(PASSWORD, "v1", {**answer, "proof": proof}) is None
