"""The readiness rules of a node's /readyz (meshgate.health): what makes a node one
clients may be sent to, and what does not."""

from __future__ import annotations

from meshgate.health import HealthFacts, PeerFacts, readiness


def test_a_node_serving_with_its_peers_linked_or_being_dialled_is_ready():
    peers = [PeerFacts(address="10.0.0.2:61616", linked=True), PeerFacts(address="10.0.0.3:61616", linked=False)]
    answer = readiness(HealthFacts(serving=True, listeners=["stomp://0.0.0.0:61613"], peers=peers))
    assert answer.ready and answer.reasons == []
    assert answer.peers == peers  # shown, though a peer down does not make it unready


def test_starting_standby_stopping_and_scaling_down_are_each_not_ready_with_a_reason():
    cases = {
        "starting": HealthFacts(serving=False),
        "a standby": HealthFacts(serving=False, standby=True),
        "stopping": HealthFacts(serving=False, stopping=True),
        "scaling down": HealthFacts(serving=True, scaling_down=True),
    }
    for words, facts in cases.items():
        answer = readiness(facts)
        assert not answer.ready and len(answer.reasons) == 1 and words in answer.reasons[0], (words, answer)


def test_a_peer_given_up_on_makes_the_node_unready_until_it_is_linked_again():
    gone = PeerFacts(address="10.0.0.9:61616", linked=False, gave_up=True)
    assert readiness(HealthFacts(serving=True, peers=[gone])).reasons == [
        "gave up dialling peer 10.0.0.9:61616 (mesh.reconnect_attempts)"]
    back = PeerFacts(address="10.0.0.9:61616", linked=True, gave_up=True)  # it dialled us
    assert readiness(HealthFacts(serving=True, peers=[back])).ready
