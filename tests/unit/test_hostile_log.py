"""gateway/hostile_log.py: lines about a peer's bad input are bounded in size and
rate-limited per peer address (what is held back is counted, then said); an internal
error's traceback is logged once per place, bounded, and never its text after that."""

from __future__ import annotations

import logging

import pytest
from twisted.internet.task import Clock

from gateway.hostile_log import LINE_LIMIT, OTHERS, PER_MINUTE, QUOTE_LIMIT, TRACEBACK_LIMIT, PeerLog, quote


@pytest.fixture
def logged(caplog):
    """A PeerLog on a logger caplog sees, its clock, and the lines logged so far."""
    caplog.set_level(logging.INFO, logger="test.hostile")
    clock = Clock()
    peer_log = PeerLog(logging.getLogger("test.hostile"), clock.seconds)
    return peer_log, clock, lambda: [r.getMessage() for r in caplog.records if r.name == "test.hostile"]


def test_a_peer_gets_per_minute_lines_then_its_count_of_held_back_ones(logged):
    peer_log, clock, lines = logged
    for i in range(PER_MINUTE + 25):
        peer_log.info("10.0.0.1", "bad frame %d from %s", i, "10.0.0.1:4000")
    assert len(lines()) == PER_MINUTE
    assert lines()[0] == "bad frame 0 from 10.0.0.1:4000"
    assert lines()[-1].endswith("(more about 10.0.0.1 held back for a minute)")
    peer_log.info("10.0.0.2", "another peer has its own budget")
    assert lines()[-1] == "another peer has its own budget"
    clock.advance(59)
    peer_log.info("10.0.0.1", "still held back")
    assert len(lines()) == PER_MINUTE + 1
    clock.advance(1)
    peer_log.info("10.0.0.1", "a new minute")
    assert lines()[-2:] == ["10.0.0.1: 26 more lines about it were held back in the minute before", "a new minute"]


def test_lines_and_quoted_values_are_cut(logged):
    peer_log, _, lines = logged
    peer_log.info("10.0.0.1", "unknown mechanism %s; then %s", quote("é" * 100_000), "x" * 100_000)
    (line,) = lines()
    assert len(line) <= LINE_LIMIT + len("... (cut)")
    assert line.startswith("unknown mechanism " + repr("é" * QUOTE_LIMIT) + "... (100000 in all)")
    assert quote(b"\x00" * 10) == repr(b"\x00" * 10)


def test_past_max_peers_new_peers_share_one_budget_and_quiet_ones_are_forgotten(caplog):
    caplog.set_level(logging.INFO, logger="test.hostile")
    clock = Clock()
    peer_log = PeerLog(logging.getLogger("test.hostile"), clock.seconds, per_minute=1, max_peers=3)
    for peer in ("a", "b", "c", "d", "e"):
        peer_log.info(peer, "from %s", peer)
        peer_log.info(peer, "again from %s", peer)  # held back
    assert [r.getMessage() for r in caplog.records] == [
        "from a (more about a held back for a minute)", "from b (more about b held back for a minute)",
        "from c (more about c held back for a minute)", f"from d (more about {OTHERS} held back for a minute)"]
    clock.advance(60)
    caplog.clear()
    peer_log.info("f", "from f")  # a, b, c held one each; d and e shared OTHERS, which held 3
    assert [r.getMessage() for r in caplog.records] == ["6 more lines about 4 peers were held back",
                                                        "from f (more about f held back for a minute)"]


def _raise_deep(depth: int) -> None:
    if depth:
        _raise_deep(depth - 1)
    raise KeyError("a client's key " + "k" * 100_000)


def test_an_internal_error_has_its_traceback_logged_once_per_place_and_bounded(logged):
    peer_log, _, lines = logged
    for peer in ("10.0.0.1", "10.0.0.2"):
        try:
            _raise_deep(500)
        except KeyError as error:
            peer_log.internal_error(peer, f"amqp: closing {peer}:5000", error)
    first, second = lines()
    assert first.startswith("amqp: closing 10.0.0.1:5000: internal error (KeyError at test_hostile_log.py:")
    assert "Traceback" in first and len(first) < LINE_LIMIT + TRACEBACK_LIMIT + 100
    assert second.startswith("amqp: closing 10.0.0.2:5000: internal error (KeyError at test_hostile_log.py:")
    assert "Traceback" not in second and "a client's key" not in second and len(second) <= LINE_LIMIT
