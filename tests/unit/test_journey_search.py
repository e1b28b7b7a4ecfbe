"""Finding traced messages (docs/journeys.md, "Finding a traced message"): what a received
record keeps for search (headers and the body's first bytes, bounded), the store's search
on one node, and the merge of every node's hits. The broker core alone, on a MemoryStore."""

from __future__ import annotations

import argparse
import time

import msgspec
import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import Broker
from gateway.broker.tracing import Tracer
from gateway.store.memory import MemoryStore
from management.journeys import RECORD_OVERHEAD, JourneyStore
from meshgate.cli_args import moment
from meshgate.trace_cli import format_traces
from model.definitions import BindingSpec, ExchangeSpec
from model.journey_requests import MAX_HITS, JourneySearch
from model.journeys import MAX_FIELD, MAX_HEADERS, JourneySummary, fields_size, kept_headers, merge_summaries


@pytest.fixture
def clock() -> Clock:
    clock = Clock()
    clock.advance(1000)
    return clock


@pytest.fixture
def store(clock) -> JourneyStore:
    return JourneyStore(max_records=10_000, max_bytes=10**8, max_age_s=3600, clock=clock.seconds)


def broker_of(store: JourneyStore, clock: Clock, **limits) -> Broker:
    return Broker(MemoryStore(), clock=clock, tracer=Tracer(store, "node-1", "n1", clock.seconds, **limits))


# -- what a received record keeps ----------------------------------------------------------------


def test_a_received_record_keeps_the_headers_and_the_bodys_first_bytes(store, clock):
    broker = broker_of(store, clock, body_preview=8)
    broker.send("queue", "orders", {"trace": "true", "customer": "c-42"}, "héllo wörld".encode())
    received = store.steps()[0]
    assert received.headers == {"trace": "true", "customer": "c-42"}
    assert received.body_preview == "héllo w"  # 8 bytes: ö's first byte alone is not UTF-8
    assert store.steps()[1].headers is None and store.steps()[1].body_preview is None  # queued


def test_a_body_preview_of_0_keeps_no_body(store, clock):
    broker_of(store, clock, body_preview=0).send("queue", "q", {"trace": "true"}, b"secret")
    assert store.steps()[0].body_preview is None


def test_kept_headers_are_bounded_however_many_and_long_they_are():
    def kept(headers: dict, max_bytes: int) -> dict[str, str]:
        kept, size = kept_headers(headers, max_bytes)
        assert size == fields_size({"headers": kept}) - fields_size({"headers": {}})  # as the store counts them
        return kept

    assert [len(name) + len(value) for name, value in kept({"n" * 5000: "v" * 5000, "small": "1"}, 2048).items()] == [
        2 * MAX_FIELD, 6]
    assert len(kept({f"h{i}": str(i) for i in range(10_000)}, 10**6)) == MAX_HEADERS
    assert sum(len(n) + len(v) for n, v in kept({f"h{i}": "x" * 150 for i in range(100)}, 1000).items()) == 1000
    assert kept({"priority": 4, "flag": True}, 100) == {"priority": "4", "flag": "True"}
    assert kept({"a": "b"}, 0) == {}
    fitting = {"a": "b", "c": "d"}
    assert kept_headers(fitting, 100)[0] is fitting  # kept as it is, not copied


def test_the_store_counts_the_kept_text(store, clock):
    broker_of(store, clock).send("queue", "q", {"trace": "true", "k": "v" * 150}, b"b" * 1000)
    received, queued = store.records
    fields = received[6]
    assert fields is not None and fields["headers"]["k"] == "v" * 150 and len(fields["body_preview"]) == 256
    plain = {name: value for name, value in fields.items() if name not in ("headers", "body_preview")}
    assert fields_size(fields) >= fields_size(plain) + 256 + 150 + 1
    assert store.bytes == 2 * RECORD_OVERHEAD + len(received[4]) + fields_size(fields) + len(queued[4]) + len("q")


# -- the store's search ------------------------------------------------------------------------


def sent(broker: Broker, clock: Clock, queue: str, body: bytes, headers: dict | None = None) -> str:
    clock.advance(1)
    message = broker.send("queue", queue, {"trace": "true", **(headers or {})}, body)
    assert message is not None
    return message.id


def test_search_finds_by_queue_header_body_and_time_newest_first(store, clock):
    broker = broker_of(store, clock)
    first = sent(broker, clock, "orders", b'{"order": 1042}', {"customer": "c-42"})
    second = sent(broker, clock, "orders", b'{"order": 1043}', {"customer": "c-7"})
    other = sent(broker, clock, "audit", b"order 1042 seen")
    broker.send("queue", "orders", {"customer": "c-42"}, b"1042, untraced")

    def roots(**filters) -> list[str]:
        return [hit.root for hit in store.search(**filters)]

    assert roots() == [other, second, first]
    assert roots(queue="orders") == [second, first]
    assert roots(header=("customer", "c-42")) == [first]
    assert roots(header=("customer", "c-4")) == []  # a header's value matches whole
    assert roots(body="1042") == [other, first]
    assert roots(queue="orders", body="1042") == [first]
    assert roots(since=1002, until=1002.5) == [second]
    assert roots(vhost="/", queue="audit") == [other] and roots(vhost="shop") == []
    assert roots(limit=2) == [other, second]
    [hit] = store.search(header=("customer", "c-42"))
    assert hit == JourneySummary(root=first, id=first, node="node-1", node_name="n1", time=1001.0,
                                 destination="/queue/orders", last_step="queued", last_time=1001.0, steps=2,
                                 headers={"trace": "true", "customer": "c-42"}, body_preview='{"order": 1042}')


def test_search_by_queue_finds_a_fanout_copy_put_in_it(store, clock):
    broker = broker_of(store, clock)
    broker.declare_exchange("fan", ExchangeSpec(type="fanout"))
    for queue in ("a", "b"):
        broker.queue(queue)
        broker.bind(BindingSpec(source="fan", destination=queue))
    broker.publish("fan", "", {"x-trace": "true"}, b"x")
    [hit] = store.search(queue="b")
    assert (hit.id, hit.destination, hit.steps) == (hit.root + ".1", "/exchange/fan/", 3)
    assert store.search(queue="c") == []


def test_search_answers_at_most_max_hits(store, clock):
    broker = broker_of(store, clock)
    for _ in range(MAX_HITS + 5):
        broker.send("queue", "q", {"trace": "true"}, b"")
    assert len(store.search(limit=10_000)) == MAX_HITS
    assert store.bytes < (MAX_HITS + 5) * 2 * (RECORD_OVERHEAD + 400)


# -- every node's hits, merged ---------------------------------------------------------------------


def hit(root: str, node: str, time: float, last_step="queued", last_time: float | None = None, steps=2,
        destination="") -> JourneySummary:
    return JourneySummary(root=root, id=root, node=node, node_name=node.upper(), time=time, destination=destination,
                          last_step=last_step, last_time=time if last_time is None else last_time, steps=steps)


def test_hits_are_merged_one_per_journey_its_earliest_named_newest_first():
    hits = [hit("m1", "b", 10.5, "acked", 11.0, 4), hit("m2", "a", 20.0),
            hit("m1", "a", 10.0, "peer_stored", 11.5, 4, "/queue/orders"), hit("m3", "b", 5.0)]
    merged = merge_summaries(hits, 10)
    assert [(h.root, h.node) for h in merged] == [("m2", "a"), ("m1", "a"), ("m3", "b")]
    assert (merged[1].steps, merged[1].last_step, merged[1].destination) == (8, "peer_stored", "/queue/orders")
    assert [h.root for h in merge_summaries(hits, 1)] == ["m2"]


# -- the request's bounds --------------------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    {"limit": 0}, {"limit": 201}, {"queue": "q" * 201}, {"body": ""}, {"body": "b" * 201},
    {"header": "no-equals"}, {"header": "=v"}, {"header": "k=" + "v" * 300}, {"since": 10.0, "until": 5.0},
    {"since": -1.0},
])
def test_a_search_out_of_bounds_is_refused(fields):
    with pytest.raises((msgspec.ValidationError, ValueError)):
        msgspec.convert({"action": "journey_search", **fields}, JourneySearch)


def test_a_search_asks_every_node_by_default():
    search = msgspec.convert({"action": "journey_search", "header": "k=v=w"}, JourneySearch)
    assert search.node == "*" and search.header_pair() == ("k", "v=w") and search.limit == 50


# -- meshgate traces ---------------------------------------------------------------------------------


def test_since_and_until_are_a_duration_ago_or_an_iso_time():
    assert abs(moment("10m") - (time.time() - 600)) < 5
    assert moment("2026-11-28T09:30") == moment("2026-11-28T09:30:00+00:00") == 1795858200.0
    for bad in ("yesterday", "-5m", "x" * 10_000):
        with pytest.raises(argparse.ArgumentTypeError) as refused:
            moment(bad)
        assert len(str(refused.value)) < 200


def test_a_hit_is_one_line_whatever_its_destination_holds():
    line = format_traces([hit("m1", "a", 1795858200.5, "acked", steps=3, destination="/queue/\x1b[2Jx\nnext")])
    assert line == "2026-11-28 09:30:00.500  m1  A  '/queue/\\x1b[2Jx\\nnext'  acked  3 steps"
    assert format_traces([]).startswith("no traced message matches")
