"""Message journeys on one node (docs/journeys.md): which messages are traced (the
decision at receive), the steps a traced message records as the broker core moves it,
and the bounded store that keeps the records. The broker core alone, on a MemoryStore,
with sessions whose sinks record what they are given."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.broker.broker import Broker
from gateway.broker.message import Message
from gateway.broker.queue import AUTO, CLIENT_INDIVIDUAL, Subscription
from gateway.broker.session import ConnectionInfo
from gateway.broker.tracing import Tracer, asks_trace
from gateway.store.memory import MemoryStore
from management.journeys import RECORD_OVERHEAD, JourneyStore
from meshgate.config import JourneysConfig, load_config
from model.definitions import BindingSpec, ExchangeSpec
from model.journeys import MAX_FIELD, fields_size
from tests.unit.config_support import error, load


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def seconds(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.given: list[tuple[Subscription, Message]] = []

    def deliver(self, subscription: Subscription, message: Message) -> None:
        self.given.append((subscription, message))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock) -> JourneyStore:
    return JourneyStore(max_records=10_000, max_bytes=10**8, max_age_s=3600, clock=clock.seconds)


@pytest.fixture
def broker(clock, store) -> Broker:
    return Broker(MemoryStore(), clock=clock, max_delivery_attempts=3, expiry_queue="EXPIRED",
                  tracer=Tracer(store, "node-1", "n1", clock.seconds))


def steps(store: JourneyStore) -> list[str]:
    return [record.step for record in store.steps()]


def consume(broker: Broker, queue: str, ack_mode: str = CLIENT_INDIVIDUAL, prefetch: int = 10):
    recorder = Recorder()
    session = broker.open_session(recorder, "c1")
    return session, recorder, session.subscribe("sub-1", "queue", queue, ack_mode, prefetch)


# -- the decision ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "TRUE", "True"])
def test_true_in_any_case_asks_for_a_trace(value):
    assert asks_trace(value)


@pytest.mark.parametrize("value", ["false", "", "1", "yes", "true ", "tru", "x" * 100_000, None, True, 1])
def test_any_other_value_is_simply_no_trace(value):
    assert not asks_trace(value)


def test_a_stomp_send_with_trace_true_is_traced_and_one_without_is_not(broker, store):
    traced = broker.send("queue", "q", {"trace": "true"}, b"a")
    plain = broker.send("queue", "q", {}, b"b")
    refused = broker.send("queue", "q", {"trace": "perhaps"}, b"c")  # not true: not traced, no error
    assert traced is not None and traced.traced
    assert plain is not None and not plain.traced
    assert refused is not None and not refused.traced
    assert [(r.id, r.step) for r in store.steps()] == [(traced.id, "received"), (traced.id, "queued")]
    received = store.steps()[0]
    assert (received.destination, received.size, received.node, received.node_name) == ("/queue/q", 1, "node-1", "n1")


def test_the_amqp_header_is_x_trace_and_stomp_trace_does_not_count_for_a_publish(broker, store):
    broker.queue("q")
    broker.publish("", "q", {"trace": "true"}, b"stomp's header")
    assert not store.steps()
    broker.publish("", "q", {"x-trace": "true"}, b"amqp's")
    assert steps(store) == ["received", "queued"]
    assert (store.steps()[0].destination, store.steps()[0].routing_key) == ("/queue/q", "q")


def test_an_arm_picks_one_in_every_on_each_receive_path_until_its_count_or_end(broker, store, clock):
    """The arm's countdown runs in the receive path itself (gateway.broker.routing): a
    STOMP send, an AMQP publish to the default exchange's queue, one to amq.topic."""
    broker.create_queue("q")
    broker.trace_next("queue", "q", 3, 2, 60)
    sent = [broker.send("queue", "q", {}, b"%d" % i) for i in range(9)]
    assert [m.traced for m in sent] == [False, False, True, False, False, True, False, False, False]  # 2, then gone
    assert not broker.tracer.arms()
    broker.trace_next("queue", "q", 2, None, 60)
    published = [broker.publish("", "q", {}, b"p") for _ in range(4)]
    assert published == [1] * 4
    broker.trace_next("topic", "prices", 1, None, 60)
    broker.publish("amq.topic", "prices", {}, b"t")
    received = [r for r in store.steps() if r.step == "received"]
    assert [r.destination for r in received] == ["/queue/q"] * 4 + ["/exchange/amq.topic/prices"]
    clock.now += 61  # past its end: the next turn finds it over and removes it
    assert [broker.send("queue", "q", {}, b"late").traced for _ in range(2)] == [False, False]
    assert ("queue", "q") not in broker.tracer.arms()


def test_a_queue_and_a_topic_of_one_name_are_armed_apart(broker):
    """Arms are kept by address per kind: one's end leaves the other, and a temporary
    queue of that name is never picked."""
    tracer = broker.tracer
    broker.trace_next("queue", "same", 1, None, 60)
    broker.trace_next("topic", "same", 1, 1, 60)
    assert tracer.armed == 2
    assert broker.send("topic", "same", {}, b"t").traced  # its one count: the topic's arm goes
    assert tracer.armed == 1 and list(tracer.arms()) == [("queue", "same")]
    assert not broker.send("topic", "same", {}, b"t").traced
    assert broker.send("queue", "same", {}, b"q").traced
    broker.trace_next("queue", "same", 1, 0, 0)
    assert tracer.armed == 0 and not broker.send("queue", "same", {}, b"q").traced


def test_a_queue_holds_its_arm_made_before_or_after_it_until_the_arm_goes(broker):
    """A SEND reads its queue's arm (Queue.arm), not the tracer's: the queue made after
    the arm takes it, one dropped and made again too, and a disarmed or replaced arm
    leaves it."""
    broker.trace_next("queue", "later", 2, None, 60)
    assert [broker.send("queue", "later", {}, b"m").traced for _ in range(4)] == [False, True, False, True]
    broker.drop_queue(broker.queues["later"])
    assert [broker.send("queue", "later", {}, b"m").traced for _ in range(2)] == [False, True]
    broker.trace_next("queue", "later", 1, 1, 60)  # replaces it: one message, then gone
    assert [broker.send("queue", "later", {}, b"m").traced for _ in range(2)] == [True, False]
    assert broker.queues["later"].arm is None and not broker.tracer.armed
    broker.trace_next("queue", "later", 1, None, 60)
    broker.trace_next("queue", "later", 1, 0, 0)
    assert broker.queues["later"].arm is None and not broker.send("queue", "later", {}, b"m").traced


def test_an_acked_record_keeps_the_latency_to_the_microsecond(broker, store):
    queue = broker.create_queue("q")
    message = broker.send("queue", "q", {"trace": "true"}, b"m")
    message.created = 100.0
    broker.tracer.acked(queue, message, 100.0123456)
    assert store.steps()[-1].latency_ms == 12.345


def test_a_broker_without_a_tracer_traces_nothing(clock):
    plain = Broker(MemoryStore(), clock=clock)
    message = plain.send("queue", "q", {"trace": "true"}, b"a")
    assert message is not None and not message.traced


def test_a_fanout_copy_keeps_the_trace_and_records_under_its_own_id(broker, store):
    broker.declare_exchange("fan", ExchangeSpec(type="fanout"))
    for queue in ("a", "b"):
        broker.queue(queue)
        broker.bind(BindingSpec(source="fan", destination=queue))
    broker.publish("fan", "", {"x-trace": "true"}, b"x", persistent=True)
    root = store.steps()[0].id
    assert [(r.step, r.id, r.queue) for r in store.steps()] == [
        ("received", root, None), ("stored", root, "a"), ("stored", root + ".1", "b")]
    assert store.steps()[0].destination == "/exchange/fan/"
    assert [r.id for r in store.steps_of([root])] == [root, root, root + ".1"]
    assert [r.id for r in store.steps_of([root + ".1"])] == [root + ".1"]


def test_a_traced_messages_copies_are_traced():
    plain = Message("m-1", "queue", "q", {}, b"")
    assert not plain.copy().traced
    plain.traced = True
    assert plain.copy().traced


# -- the steps ---------------------------------------------------------------------------------


def test_nack_redelivery_and_ack_are_recorded_in_order(broker, store):
    session, recorder, sub = consume(broker, "q")
    broker.send("queue", "q", {"trace": "true"}, b"a", persistent=True)
    message = recorder.given[-1][1]
    session.settle(sub, message.id, cumulative=False, accept=False)
    session.settle(sub, message.id, cumulative=False)
    assert steps(store) == ["received", "stored", "delivered", "requeued", "delivered", "acked"]
    delivered, requeued, redelivered, acked = store.steps()[2], store.steps()[3], store.steps()[4], store.steps()[5]
    assert (delivered.consumer, delivered.connection, delivered.redelivered) == ("sub-1", "c1", False)
    assert (requeued.reason, requeued.deliveries) == ("nack", 1)
    assert redelivered.redelivered and redelivered.deliveries == 2
    assert acked.latency_ms is not None
    assert [r.seq for r in store.steps()] == sorted(r.seq for r in store.steps())


def test_auto_ack_records_delivered_then_acked(broker, store):
    consume(broker, "q", ack_mode=AUTO)
    broker.send("queue", "q", {"trace": "true"}, b"a")
    assert steps(store) == ["received", "queued", "delivered", "acked"]


def test_a_rollback_and_a_consumer_gone_name_their_reason(broker, store):
    session, recorder, sub = consume(broker, "q")
    broker.send("queue", "q", {"trace": "true"}, b"a")
    session.begin("tx")
    session.settle(sub, recorder.given[-1][1].id, cumulative=False, transaction="tx")
    session.abort("tx")
    assert (store.steps()[-2].step, store.steps()[-2].reason) == ("requeued", "rollback")
    assert store.steps()[-1].step == "delivered"  # again, to the same consumer
    session.unsubscribe("sub-1")
    assert (store.steps()[-1].step, store.steps()[-1].reason) == ("requeued", "consumer gone")


def test_refused_for_good_without_a_dead_letter_exchange_it_is_dropped(broker, store):
    session, recorder, sub = consume(broker, "q")
    broker.send("queue", "q", {"trace": "true"}, b"a")
    message = sub.inflight.pop(recorder.given[-1][1].id)
    broker.dead_letter(sub.queue, message, "rejected")  # what an AMQP reject without requeue does
    assert (store.steps()[-1].step, store.steps()[-1].reason, store.steps()[-1].queue) == ("dropped", "rejected", "q")


def test_past_max_attempts_it_is_dead_lettered_to_a_traced_copy(broker, store):
    session, recorder, sub = consume(broker, "q")
    broker.send("queue", "q", {"trace": "true"}, b"a")
    for _ in range(3):
        session.settle(sub, recorder.given[-1][1].id, cumulative=False, accept=False)
    dead = [r for r in store.steps() if r.step == "dead_lettered"]
    assert len(dead) == 1 and dead[0].reason == "max-delivery-attempts" and dead[0].destination == "/queue/DLQ"
    copy = broker.queues["DLQ"]._levels[4][0]
    assert copy.traced and dead[0].next_id == copy.id
    received = [r for r in store.steps() if r.id == copy.id]
    assert [r.step for r in received] == ["received", "queued"]
    assert received[0].from_id == dead[0].id and received[0].seq > dead[0].seq


def test_expiry_is_recorded_then_the_move_to_the_expiry_queue(broker, store, clock):
    broker.send("queue", "q", {"trace": "true"}, b"a", expires=int(clock.now * 1000) + 10)
    clock.now += 1
    assert broker.sweep_expired() == 1
    assert steps(store) == ["received", "queued", "expired", "dead_lettered", "received", "queued"]
    assert store.steps()[3].destination == "/queue/EXPIRED"


def test_purge_and_queue_deletion_drop_with_their_reason(broker, store):
    broker.send("queue", "q", {"trace": "true"}, b"a")
    broker.purge(broker.queues["q"])
    broker.send("queue", "q", {"trace": "true"}, b"b")
    broker.delete_queue("q")
    assert [(r.step, r.reason) for r in store.steps() if r.step == "dropped"] == [
        ("dropped", "purge"), ("dropped", "queue deleted")]


def test_records_keep_long_client_text_short(broker, store):
    session = broker.open_session(Recorder(), "c" * 10_000)
    session.principal = type("P", (), {"name": "u" * 10_000})()
    name = "q" * 5000
    broker.queue(name)
    session.send("queue", name, {"trace": "true"}, b"a", False, 4, 0)
    received = store.steps()[0]
    assert received.user is not None and len(received.user) == MAX_FIELD
    assert received.connection is not None and len(received.connection) == MAX_FIELD
    assert received.destination is not None and len(received.destination) == MAX_FIELD
    assert store.bytes < 3 * (RECORD_OVERHEAD + 8 * MAX_FIELD)


def test_a_record_counts_its_fields_and_its_client_as_fields_size_does(broker, store):
    session, _, _ = consume(broker, "q", ack_mode=AUTO)
    session.connection = ConnectionInfo("stomp", "1.2", "127.0.0.1:40000", 0.0, lambda reason: None, name="conn-7")
    session.principal = type("P", (), {"name": "alice"})()
    session.send("queue", "q", {"trace": "true", "k": "v"}, b"body", False, 4, 0)
    assert steps(store) == ["received", "queued", "delivered", "acked"]
    client = {"protocol": "stomp", "connection": "conn-7", "remote": "127.0.0.1:40000", "user": "alice"}
    for named in (store.steps()[0], store.steps()[2]):  # received, delivered
        assert {name: getattr(named, name) for name in client} == client
    for _, _, _, step, message_id, queue, fields, size, named in store.records:
        assert size == (RECORD_OVERHEAD + len(message_id) + len(queue or "") + fields_size(fields or {})
                        + (fields_size(client) if named else 0)), step
    assert store.bytes == sum(record[7] for record in store.records)


def test_vhost_tracers_share_the_store_s_sequence_and_name_their_vhost(store, clock):
    tracer = Tracer(store, "node-1", "n1", clock.seconds)
    other = Broker(MemoryStore(), clock=clock, tracer=tracer.for_vhost("shop"))
    default = Broker(MemoryStore(), clock=clock, tracer=tracer)
    other.send("queue", "q", {"trace": "true"}, b"a")
    default.send("queue", "q", {"trace": "true"}, b"a")
    assert [(r.vhost, r.seq) for r in store.steps()] == [("shop", 1), ("shop", 2), ("/", 3), ("/", 4)]


# -- the store ---------------------------------------------------------------------------------


ORIGIN = ("n", "n", "/")


def record(store: JourneyStore, message_id: str) -> None:
    store.add(ORIGIN, "queued", message_id, None, None, 0, None)


def test_past_max_records_the_oldest_go(clock):
    store = JourneyStore(max_records=3, max_bytes=10**8, max_age_s=3600, clock=clock.seconds)
    for message_id in ["a", "b", "a", "c", "d"]:
        record(store, message_id)
    assert [r.id for r in store.steps()] == ["a", "c", "d"]
    assert [r.seq for r in store.steps_of(["a"])] == [3]
    assert store.steps_of(["b"]) == []
    assert store.evicted == 2 and store.recorded == 5


def test_past_max_bytes_the_oldest_go(clock):
    store = JourneyStore(max_records=1000, max_bytes=3 * (RECORD_OVERHEAD + 3), max_age_s=3600, clock=clock.seconds)
    for seq in range(1, 11):
        record(store, f"m{seq:02}")
    assert len(store) == 3 and store.bytes <= store.max_bytes
    assert [r.id for r in store.steps()] == ["m08", "m09", "m10"]


def test_the_sweep_drops_records_past_max_age(clock):
    store = JourneyStore(max_records=1000, max_bytes=10**8, max_age_s=60, clock=clock.seconds)
    clock.now -= 61
    record(store, "old")
    clock.now += 51
    record(store, "new")
    clock.now += 10
    assert store.sweep() == 1
    assert [r.id for r in store.steps()] == ["new"] and store.steps_of(["old"]) == []
    assert store.bytes == sum(RECORD_OVERHEAD + len(r.id) for r in store.steps())


def test_a_root_id_finds_every_copy_and_a_copy_id_itself_alone(clock):
    store = JourneyStore(max_records=1000, max_bytes=10**8, max_age_s=60, clock=clock.seconds)
    for message_id in ["m", "m.1", "m.2", "mm", "x"]:
        record(store, message_id)
    assert [r.id for r in store.steps_of(["m"])] == ["m", "m.1", "m.2"]
    assert [r.id for r in store.steps_of(["m.2", "x"])] == ["m.2", "x"]


def test_a_long_id_or_queue_name_is_kept_cut(clock):
    store = JourneyStore(max_records=1000, max_bytes=10**8, max_age_s=60, clock=clock.seconds)
    store.add(ORIGIN, "queued", "i" * 5000, "q" * 5000, None, 0, None)
    (step,) = store.steps()
    assert len(step.id) == MAX_FIELD and step.queue is not None and len(step.queue) == MAX_FIELD
    assert store.bytes == RECORD_OVERHEAD + 2 * MAX_FIELD


def test_a_message_id_finds_nothing_it_was_not_given():
    store = JourneyStore(max_records=10, max_bytes=10**8, max_age_s=60, clock=lambda: 0.0)
    assert store.steps_of(["nothing", "", "." * 1000]) == []


# -- the configuration -------------------------------------------------------------------------


def test_journeys_are_off_by_default():
    assert load_config(None).journeys == JourneysConfig()
    assert not JourneysConfig().enabled


def test_every_key_parses(tmp_path: Path):
    config = load(tmp_path, """
        [journeys]
        enabled = true
        max_records = 500
        max_bytes = "8MiB"
        max_age_s = 120
        body_preview = 0
        max_header_bytes = 512
        """).journeys
    assert config == JourneysConfig(enabled=True, max_records=500, max_bytes=8 * 1024 * 1024, max_age_s=120,
                                    body_preview=0, max_header_bytes=512)


def test_bad_values_name_their_key(tmp_path: Path):
    assert error(tmp_path, "[journeys]\nenabled = \"yes\"\n").startswith("journeys.enabled:")
    assert error(tmp_path, "[journeys]\nmax_records = 5\n").startswith("journeys.max_records:")
    assert error(tmp_path, "[journeys]\nbody_preview = -1\n").startswith("journeys.body_preview:")
    assert error(tmp_path, "[journeys]\nunknown = 1\n").startswith("journeys")
