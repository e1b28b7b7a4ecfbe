"""Putting a message's records from several nodes in causal order (management.journey_view):
each node's steps by their sequence, a link's arrival after the forward that sent it,
whatever the nodes' clocks say; and the timeline ``meshgate trace`` prints."""

from __future__ import annotations

from management.journey_view import format_journey, timeline
from model.journeys import JourneyStep


def step(node: str, seq: int, time: float, kind, **fields) -> JourneyStep:
    return JourneyStep(root="m-1-1", id="m-1-1", node=node, node_name=node.upper(), seq=seq, time=time, step=kind,
                       **fields)


def journey(skew_b: float = 0.0) -> list[JourneyStep]:
    """A → B → A (it comes back: a revisit), B's clock ``skew_b`` seconds off."""
    return [
        step("a", 1, 100.0, "received", destination="/queue/q", protocol="stomp", connection="A-1"),
        step("a", 2, 100.001, "stored", queue="q"),
        step("a", 3, 100.002, "forwarded", queue="q", peer="b", reason="demand", visit=1),
        step("b", 1, 100.003 + skew_b, "link_received", peer="a", visit=1),
        step("b", 2, 100.004 + skew_b, "stored", queue="q"),
        step("b", 3, 100.005 + skew_b, "forwarded", queue="q", peer="a", reason="redistribution", visit=2),
        step("a", 4, 100.006, "peer_stored", queue="q", peer="b"),
        step("a", 5, 100.007, "link_received", peer="b", visit=2, reason="redistribution"),
        step("a", 6, 100.008, "delivered", queue="q", consumer="s", protocol="stomp", connection="A-2"),
        step("a", 7, 100.009, "acked", queue="q"),
        step("b", 4, 100.010 + skew_b, "peer_stored", queue="q", peer="a"),
    ]


def order(steps: list[JourneyStep]) -> list[tuple[str, str]]:
    return [(s.node, s.step) for s in timeline(steps)]


def causal(ordered: list[tuple[str, str]]) -> bool:
    where = {item: i for i, item in enumerate(ordered)}
    own = {node: [kind for n, kind in ordered if n == node] for node in "ab"}
    return (own["a"] == ["received", "stored", "forwarded", "peer_stored", "link_received", "delivered", "acked"]
            and own["b"] == ["link_received", "stored", "forwarded", "peer_stored"]
            and where["a", "forwarded"] < where["b", "link_received"]
            and where["b", "forwarded"] < where["a", "link_received"])


def test_a_journey_with_clocks_that_agree_is_in_time_order():
    assert order(list(reversed(journey()))) == [(s.node, s.step) for s in journey()]


def test_a_node_whose_clock_is_behind_or_ahead_does_not_break_the_order():
    for skew in (-30.0, -0.0045, 0.0045, 30.0):
        assert causal(order(journey(skew))), skew


def test_a_forward_to_a_node_that_recorded_nothing_leaves_a_gap_not_a_hang():
    without_b = [s for s in journey() if s.node != "b"]  # an older node, or journeys off there
    ordered = order(without_b)
    assert ordered[:3] == [("a", "received"), ("a", "stored"), ("a", "forwarded")] and len(ordered) == 7
    printed = format_journey("m-1-1", without_b)
    assert "(no record from b: an older release, or journeys off there" in printed


def test_the_timeline_names_the_nodes_and_says_when_there_is_nothing():
    printed = format_journey("m-1-1", journey())
    assert printed.splitlines()[0].startswith("message m-1-1: 11 steps on 2 nodes")
    assert "to B (demand)" in printed and "to A (redistribution)" in printed
    assert "no node has records of message x" in format_journey("x", [])
