"""Tracing a destination by definition (docs/journeys.md, "Tracing a destination for a
while"): a definition of kind "trace" arms the broker's tracer, one message in
round(1 / rate), until its end time; deleting it, or the end passing, stops it; it is
armed again from the catalog at start, taken from a peer, and travels in the frame a
node before vhosts drops alone. The management action refuses hostile input with
bad_request. The broker core alone, on a MemoryStore, with a simulated clock."""

from __future__ import annotations

import msgspec
import pytest

from gateway.broker.broker import Broker
from gateway.broker.definitions import Definitions
from gateway.broker.tracing import Tracer
from gateway.store.memory import MemoryStore
from management.actions import LocalActions
from management.journeys import JourneyStore
from mesh.definitions import _frames
from model.definitions import TRACE, Definition, QueueSettings, TraceSpec
from model.requests import DefineTrace, ManagementError, decode_request
from tests.unit.test_journeys import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


def traced_broker(clock: Clock, store: MemoryStore) -> Broker:
    """A broker with journeys on (its records kept, unread: the tests ask its messages)."""
    records = JourneyStore(max_records=1000, max_bytes=10**6, max_age_s=3600, clock=clock.seconds)
    return Broker(store, clock=clock, tracer=Tracer(records, "node-1", "n1", clock.seconds))


@pytest.fixture
def broker(clock) -> Broker:
    return traced_broker(clock, MemoryStore())


def actions(broker: Broker) -> LocalActions:
    return LocalActions(node_id="n1", broker=broker, mesh=None, clock=None)


def traced(broker: Broker, count: int, queue: str = "q") -> list[bool]:
    """Send ``count`` messages without the header: which of them the node traced."""
    return [broker.send("queue", queue, {}, b"x").traced for _ in range(count)]


def test_a_definition_traces_one_in_round_1_over_rate_until_its_end(broker, clock):
    done = actions(broker).define_trace(DefineTrace(destination="/queue/q", rate=0.5, for_s=60), "alice")
    assert "one message in 2 for 60 s" in done.detail
    record = broker.definitions.get(TRACE, "/queue/q")
    assert record.trace == TraceSpec(rate=0.5, until=clock.now + 60, by="alice")
    assert traced(broker, 4) == [False, True, False, True]
    clock.now += 61  # past its end: the next turn finds it over
    assert traced(broker, 2) == [False, False] and broker.tracer.arms() == {}
    assert broker.definitions.get(TRACE, "/queue/q").trace is not None  # still listed, with its end time


def test_deleting_it_disarms_at_once(broker):
    local = actions(broker)
    local.define_trace(DefineTrace(destination="/topic/prices", for_s=60), "alice")
    assert ("topic", "prices") in broker.tracer.arms()
    done = local.delete_definition(TRACE, "/topic/prices")
    assert done.target == "tracing of /topic/prices" and broker.tracer.arms() == {}
    assert broker.definitions.get(TRACE, "/topic/prices").deleted


def test_a_peers_definition_arms_and_the_catalog_arms_again_at_start_unless_ended(broker, clock):
    peer = Definitions("node-b")
    live = peer.change(TRACE, "/queue/q", clock.now, trace=TraceSpec(until=clock.now + 60))
    ended = peer.change(TRACE, "/queue/old", clock.now, trace=TraceSpec(until=clock.now - 1))
    assert broker.merge_definition(live) and broker.merge_definition(ended)
    assert list(broker.tracer.arms()) == [("queue", "q")] and traced(broker, 1) == [True]

    restarted = traced_broker(clock, broker.store)
    restarted.recover()
    assert list(restarted.tracer.arms()) == [("queue", "q")] and traced(restarted, 1) == [True]


def test_without_a_tracer_the_definition_is_kept_and_arms_nothing(clock):
    off = Broker(MemoryStore(), clock=clock)
    done = actions(off).define_trace(DefineTrace(destination="/queue/q", until=clock.now + 60), "alice")
    assert "journeys are off on this node" in done.detail
    assert off.definitions.get(TRACE, "/queue/q").trace.until == clock.now + 60 and traced(off, 1) == [False]


def test_trace_records_travel_in_the_frame_a_node_before_vhosts_drops_alone():
    queue = Definition(kind="queue", name="orders", version=1, origin="n", changed_at=0.0, queue=QueueSettings())
    trace = Definition(kind=TRACE, name="/queue/orders", version=2, origin="n", changed_at=0.0,
                       trace=TraceSpec(until=60.0))
    known, newer = _frames([queue, trace])
    assert [r["kind"] for r in msgspec.json.decode(known)] == ["queue"]
    assert [r["kind"] for r in msgspec.json.decode(newer)] == ["trace"]


@pytest.mark.parametrize("request_json", [
    '{"action": "define_trace", "destination": "/queue/q", "rate": 0, "for_s": 60}',
    '{"action": "define_trace", "destination": "/queue/q", "rate": 1.5, "for_s": 60}',
    '{"action": "define_trace", "destination": "/queue/q", "rate": "all", "for_s": 60}',
    '{"action": "define_trace", "destination": "/queue/q", "for_s": 0}',
    '{"action": "define_trace", "destination": "/queue/q", "for_s": 1e300}',
    '{"action": "define_trace", "destination": "/queue/q", "until": 999}',  # in the past
    '{"action": "define_trace", "destination": "/queue/q", "until": 1e12}',  # too far ahead
    '{"action": "define_trace", "destination": "/queue/q", "until": 1e400}',  # infinite
    '{"action": "define_trace", "destination": "/queue/q", "until": NaN}',  # not JSON
    '{"action": "define_trace", "destination": "/queue/q", "until": 1060, "for_s": 60}',
    '{"action": "define_trace", "destination": "/queue/q"}',  # no end
    '{"action": "define_trace", "destination": "/queue/", "for_s": 60}',
    '{"action": "define_trace", "destination": "/queue/a.*", "for_s": 60}',
    '{"action": "define_trace", "destination": "/exchange/amq.topic/x", "for_s": 60}',
    '{"action": "define_trace", "destination": "queue/q", "for_s": 60}',
    '{"action": "define_trace", "destination": "/queue/a\\u0000b", "for_s": 60}',
    '{"action": "define_trace", "destination": "/queue/' + "x" * 5000 + '", "for_s": 60}',
    '{"action": "define_trace", "destination": "/queue/q", "for_s": 60, "vhost": "nowhere"}',
])
def test_hostile_input_is_a_bad_request(broker, request_json):
    with pytest.raises(ManagementError) as refused:
        actions(broker).define_trace(decode_request(request_json), "mallory")
    assert refused.value.code == "bad_request"
    assert broker.definitions.records() == [] and broker.tracer.arms() == {}
