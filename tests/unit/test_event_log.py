"""management/events.py: the node's event log (stamping, counting per window, the ring, queries, sinks)."""

from __future__ import annotations

import pytest
from twisted.internet.testing import MemoryReactorClock

from management.events import EventLog
from model.events import ConsumerAttached, DeadLetter, Expired, LinkDown, LinkUp, NodeJoined, Redistribution

START = 1_700_000_000.0


@pytest.fixture
def clock():
    clock = MemoryReactorClock()
    clock.advance(START)
    return clock


def dead_letter(queue="orders", reason="max-delivery-attempts"):
    return DeadLetter(queue=queue, reason=reason, dead_letter_queue="DLQ", count=0)


def test_emit_stamps_time_and_node(clock):
    log = EventLog("node-1", clock)
    event = LinkUp(peer="n-2", peer_name="beta", dialled=True)
    log.emit(event)
    assert (event.time, event.node) == (START, "node-1")
    clock.advance(2.5)
    later = LinkDown(peer="n-2", peer_name="beta", reason="closed")
    log.emit(later)
    assert (later.time, later.node) == (START + 2.5, "node-1")
    assert list(log.recent) == [event, later]


def test_emit_overrides_what_the_reporter_filled_in(clock):
    log = EventLog("node-1", clock)
    event = NodeJoined(subject="n-2", name="beta", time=5.0, node="someone-else")
    log.emit(event)
    assert (event.time, event.node) == (START, "node-1")


def test_counted_events_become_one_event_per_window(clock):
    log = EventLog("node-1", clock)
    seen = []
    log.sinks.append(seen.append)
    for _ in range(3):
        log.count(dead_letter())
        clock.advance(0.2)
    assert seen == [] and list(log.recent) == []  # nothing until the window closes
    clock.advance(0.4)  # one second since the first count
    assert len(seen) == 1
    event = seen[0]
    assert type(event) is DeadLetter
    assert (event.queue, event.reason, event.dead_letter_queue, event.count) == (
        "orders", "max-delivery-attempts", "DLQ", 3)
    assert event.time == pytest.approx(START + 1.0, abs=1e-6) and event.node == "node-1"
    assert list(log.recent) == [event]
    clock.advance(5)
    assert len(seen) == 1  # nothing counted since: nothing more


def test_count_adds_n(clock):
    log = EventLog("node-1", clock)
    log.count(Redistribution(queue="q", source="a", target="b", count=0), 40)
    log.count(Redistribution(queue="q", source="a", target="b", count=0), 2)
    clock.advance(1.0)
    assert [e.count for e in log.recent] == [42]


def test_different_subjects_are_counted_apart(clock):
    log = EventLog("node-1", clock)
    log.count(dead_letter("orders"))
    log.count(dead_letter("audit"))
    log.count(dead_letter("orders"))
    log.count(dead_letter("orders", reason="expired"))
    log.count(Expired(queue="orders", count=0))
    log.count(Expired(queue="orders", count=0), 4)
    clock.advance(1.0)
    got = {(type(e).__name__, e.queue, getattr(e, "reason", None)): e.count for e in log.recent}
    assert got == {
        ("DeadLetter", "orders", "max-delivery-attempts"): 2,
        ("DeadLetter", "audit", "max-delivery-attempts"): 1,
        ("DeadLetter", "orders", "expired"): 1,
        ("Expired", "orders", None): 5,
    }
    assert len(log.recent) == 4


def test_one_queue_name_in_two_vhosts_is_counted_apart_and_the_default_vhost_is_left_out_of_the_json(clock):
    import msgspec

    log = EventLog("node-1", clock)
    log.count(Expired(queue="orders", count=0), 2)
    log.count(Expired(queue="orders", count=0, vhost="team-a"), 3)
    clock.advance(1.0)
    assert {(e.vhost, e.count) for e in log.recent} == {("/", 2), ("team-a", 3)}
    encoded = {e.vhost: msgspec.json.decode(msgspec.json.encode(e)) for e in log.recent}
    assert "vhost" not in encoded["/"] and encoded["team-a"]["vhost"] == "team-a"
    old = b'{"kind":"expiry","time":1.0,"node":"n","queue":"orders","count":1}'  # from a node before vhosts
    assert msgspec.json.decode(old, type=Expired).vhost == "/"


def test_a_new_window_starts_after_a_flush(clock):
    log = EventLog("node-1", clock)
    log.count(dead_letter())
    clock.advance(1.0)
    log.count(dead_letter())
    log.count(dead_letter())
    clock.advance(0.5)
    assert [e.count for e in log.recent] == [1]
    clock.advance(0.5)
    assert [e.count for e in log.recent] == [1, 2]
    assert [e.time for e in log.recent] == [START + 1.0, START + 2.0]


def test_count_window_is_configurable(clock):
    log = EventLog("node-1", clock, count_window=5.0)
    log.count(dead_letter())
    clock.advance(4.9)
    assert list(log.recent) == []
    clock.advance(0.1)
    assert [e.count for e in log.recent] == [1]


def test_flush_emits_at_once_and_cancels_the_pending_call(clock):
    log = EventLog("node-1", clock)
    log.count(dead_letter())
    log.count(dead_letter())
    assert len(clock.getDelayedCalls()) == 1
    log.flush()
    assert [e.count for e in log.recent] == [2]
    assert [e.time for e in log.recent] == [START]
    assert [c for c in clock.getDelayedCalls() if c.active()] == []
    clock.advance(2.0)
    assert len(log.recent) == 1  # the cancelled call did not flush again
    log.flush()  # nothing counted: nothing emitted
    assert len(log.recent) == 1


def test_query_returns_oldest_first_and_honours_since_kinds_and_limit(clock):
    log = EventLog("node-1", clock)
    events = []
    for i in range(10):
        event = (LinkUp(peer=f"p{i}", peer_name="x", dialled=True) if i % 2 == 0
                 else ConsumerAttached(destination="/queue/q", connection=f"c{i}", consumers=i))
        log.emit(event)
        events.append(event)
        clock.advance(1.0)
    assert log.query() == events
    assert log.query(since=START + 6.0) == events[7:]  # strictly after since
    assert log.query(since=START + 6.5) == events[7:]
    assert log.query(since=START + 9.0) == []
    assert log.query(kinds=["link_up"]) == events[0::2]
    assert log.query(kinds=["consumer_attached", "link_up"]) == events
    assert log.query(kinds=["dead_letter"]) == []
    assert log.query(limit=3) == events[7:]  # the newest three, oldest first
    assert log.query(kinds=["consumer_attached"], limit=2) == [events[7], events[9]]
    assert log.query(since=START + 4.0, kinds=["link_up"], limit=10) == [events[6], events[8]]
    assert log.query(limit=0) == []
    assert log.query(kinds=[]) == events  # no kinds: every kind


def test_the_ring_keeps_only_the_newest(clock):
    log = EventLog("node-1", clock, keep=5)
    events = []
    for i in range(12):
        event = NodeJoined(subject=f"n{i}", name=f"n{i}")
        log.emit(event)
        events.append(event)
        clock.advance(0.1)
    assert list(log.recent) == events[-5:]
    assert log.query(limit=100) == events[-5:]


def test_sinks_receive_every_emitted_event(clock):
    log = EventLog("node-1", clock, keep=2)
    first, second = [], []
    log.sinks.append(first.append)
    log.sinks.append(second.append)
    emitted = [NodeJoined(subject=f"n{i}", name="x") for i in range(4)]
    for event in emitted:
        log.emit(event)
    log.count(Expired(queue="q", count=0), 3)
    log.flush()
    assert first == second
    assert first[:4] == emitted  # more than the ring keeps
    assert type(first[4]) is Expired and first[4].count == 3 and first[4].node == "node-1"
    assert len(first) == 5


def test_a_failing_sink_does_not_fail_the_reporter_nor_the_other_sinks():
    clock = MemoryReactorClock()
    clock.advance(1)
    log = EventLog("n1", clock)
    seen = []

    def broken(event):
        raise RuntimeError("sink down")

    log.sinks.extend([broken, seen.append])
    log.emit(Expired(queue="q", count=1))
    assert len(seen) == 1 and len(log.recent) == 1
