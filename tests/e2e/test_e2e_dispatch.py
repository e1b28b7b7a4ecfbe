"""Dispatch: prefetch, redelivery of unacked messages, dead-lettering after
max_delivery_attempts, expiry, priority and selectors."""

from __future__ import annotations

import time

import pytest
from e2e_support import now_ms, queue, unique

pytestmark = pytest.mark.shared_broker


# -- prefetch -------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["activemq.prefetchSize", "prefetch-count"])
def test_prefetch_one_consumer_gets_one_while_other_gets_the_rest(broker, connect, header):
    destination = queue()
    slow = connect(broker)
    slow.subscribe(destination, ack="client-individual", headers={header: "1"})
    fast = connect(broker)
    fast.subscribe(destination)
    producer = connect(broker)
    for i in range(10):
        producer.send(destination, f"m{i}")
    # Wait for all ten (on two sockets read by two threads), then count who got what.
    fast.listener.wait_until(lambda: len(fast.listener.messages) + len(slow.listener.messages) >= 10,
                             "all 10 messages")
    assert sorted(m.body for m in fast.listener.messages + slow.listener.messages) == sorted(
        f"m{i}" for i in range(10))
    assert len(slow.listener.messages) == 1
    assert len(fast.listener.messages) == 9


def test_prefetch_window_refills_as_messages_are_acked(broker, connect, version):
    destination = queue()
    producer = connect(broker)
    for i in range(4):
        producer.send(destination, f"m{i}", receipt=True)
    consumer = connect(broker, version)
    consumer.subscribe(destination, ack="client", headers={"activemq.prefetchSize": "1"})
    for i in range(4):
        message = consumer.listener.wait_for(i + 1)[i]
        assert message.body == f"m{i}"
        consumer.ack(message)


def test_prefetch_two_gets_two_unacked(broker, connect):
    destination = queue()
    limited = connect(broker)
    limited.subscribe(destination, ack="client", headers={"activemq.prefetchSize": "2"})
    other = connect(broker)
    other.subscribe(destination, ack="auto")
    producer = connect(broker)
    for i in range(12):
        producer.send(destination, f"m{i}")
    other.listener.wait_until(lambda: len(other.listener.messages) + len(limited.listener.messages) >= 12,
                              "all 12 messages")
    assert len(limited.listener.messages) == 2
    assert len(other.listener.messages) == 10


def test_invalid_prefetch_is_an_error(broker, connect):
    client = connect(broker)
    client.conn.subscribe(queue(), id="s", headers={"activemq.prefetchSize": "-3", "receipt": "p"})
    client.listener.wait_error()


# -- redelivery -----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["disconnect", "drop", "unsubscribe", "nack"])
def test_unacked_message_returns_marked_redelivered(broker, connect, how):
    destination = queue()
    first = connect(broker)
    sub_id = first.subscribe(destination, ack="client-individual")
    first.send(destination, "once more")
    [message] = first.listener.wait_for(1)
    assert "redelivered" not in message.headers
    second = connect(broker)
    if how == "nack":
        # NACK with another consumer present: the message may go to either; both must see redelivered:true.
        second.subscribe(destination, ack="client-individual")
        first.nack(message, receipt=True)
        first.listener.wait_until(lambda: len(first.listener.messages) + len(second.listener.messages) >= 2,
                                  "the redelivery")
        again = (first.listener.messages[1:] + second.listener.messages)[0]
    else:
        if how == "disconnect":
            first.disconnect()
        elif how == "drop":
            first.drop()
        else:
            first.unsubscribe(sub_id)
        second.subscribe(destination, ack="client-individual")
        [again] = second.listener.wait_for(1)
    assert again.body == "once more"
    assert again.headers.get("redelivered") == "true", again.headers
    assert again.headers["message-id"] == message.headers["message-id"]


def test_redelivery_keeps_order_ahead_of_newer_messages(broker, connect):
    destination = queue()
    first = connect(broker)
    first.subscribe(destination, ack="client")
    for i in range(3):
        first.send(destination, f"old{i}")
    first.listener.wait_for(3)
    first.send(destination, "new", receipt=True)  # prefetch is large: "new" went to first too
    first.listener.wait_for(4)
    first.disconnect()
    second = connect(broker)
    second.subscribe(destination)
    assert [m.body for m in second.listener.wait_for(4)] == ["old0", "old1", "old2", "new"]


# -- dead-letter queue ----------------------------------------------------------------------


@pytest.fixture
def dlq_broker(broker_factory):
    return broker_factory(sets=["broker.max_delivery_attempts=2"])


def _moved_message(connect, broker, destination: str, to: str):
    """The one message a new consumer receives from ``to``, checked to be one the broker
    moved there from ``destination``."""
    [moved] = connect(broker).receive(to, 1)
    assert moved.headers.get("original-destination") == destination, moved.headers
    return moved


def test_nacked_message_goes_to_dlq_after_max_delivery_attempts(dlq_broker, connect):
    destination = "/queue/" + unique("poison")
    consumer = connect(dlq_broker)
    consumer.subscribe(destination, ack="client-individual")
    consumer.send(destination, "poison", headers={"x-keep": "me"})
    first = consumer.listener.wait_for(1)[0]
    consumer.nack(first, receipt=True)
    second = consumer.listener.wait_for(2)[1]
    assert second.body == "poison" and second.headers.get("redelivered") == "true"
    consumer.nack(second, receipt=True)
    consumer.send(destination, "fence")
    assert [m.body for m in consumer.listener.wait_for_body("fence")] == ["poison", "poison", "fence"]
    dead = _moved_message(connect, dlq_broker, destination, "/queue/DLQ")
    assert dead.body == "poison"
    assert dead.headers.get("x-keep") == "me"
    assert dead.headers["destination"] == "/queue/DLQ"


def test_message_left_unacked_twice_goes_to_dlq(dlq_broker, connect):
    destination = "/queue/" + unique("crash")
    for attempt in range(2):
        consumer = connect(dlq_broker)
        consumer.subscribe(destination, ack="client")
        if attempt == 0:
            consumer.send(destination, "crashes consumers")
        [message] = consumer.listener.wait_for(1)
        assert message.body == "crashes consumers"
        consumer.drop()
    survivor = connect(dlq_broker)
    assert [m.body for m in survivor.fenced(destination)] == ["fence"]
    assert _moved_message(connect, dlq_broker, destination, "/queue/DLQ").body == "crashes consumers"


def test_default_max_delivery_attempts_is_ten(broker, connect):
    destination = "/queue/" + unique("ten")
    consumer = connect(broker)
    consumer.subscribe(destination, ack="client-individual")
    consumer.send(destination, "stubborn")
    for attempt in range(1, 10):
        message = consumer.listener.wait_for(attempt)[attempt - 1]
        consumer.nack(message)
    tenth = consumer.listener.wait_for(10)[9]
    assert tenth.body == "stubborn"
    consumer.nack(tenth, receipt=True)
    consumer.send(destination, "fence")
    assert [m.body for m in consumer.listener.wait_for_body("fence")][-2:] == ["stubborn", "fence"]
    assert len(consumer.listener.messages) == 11


# -- expiry ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["queue", "topic"])
def test_expired_message_is_never_delivered(broker, connect, kind):
    destination = f"/{kind}/" + unique("exp")
    consumer = connect(broker)
    consumer.subscribe(destination)
    producer = connect(broker)
    producer.send(destination, "stale", expires=str(now_ms() - 10_000))
    producer.send(destination, "fresh", expires=str(now_ms() + 60_000))
    producer.send(destination, "fence")
    assert [m.body for m in consumer.listener.wait_for_body("fence")] == ["fresh", "fence"]


def test_message_expiring_while_queued_is_not_delivered(broker, connect):
    destination = queue()
    producer = connect(broker)
    producer.send(destination, "short-lived", receipt=True, expires=str(now_ms() + 300))
    producer.send(destination, "long-lived", receipt=True, expires=str(now_ms() + 60_000))
    time.sleep(0.5)  # let the first one's expiry time pass (not synchronisation)
    consumer = connect(broker)
    assert [m.body for m in consumer.fenced(destination)] == ["long-lived", "fence"]


def test_expired_message_is_not_dead_lettered_by_default(broker_factory, connect):
    broker = broker_factory()
    destination = queue()
    producer = connect(broker)
    producer.send(destination, "stale", receipt=True, expires=str(now_ms() - 1000))
    dlq = connect(broker)
    assert [m.body for m in dlq.fenced("/queue/DLQ")] == ["fence"]


# -- priority -------------------------------------------------------------------------------


def test_higher_priority_delivered_first(broker, connect, version):
    destination = queue()
    producer = connect(broker, version)
    sends = [("low-1", "0"), ("high-1", "9"), ("mid-1", None), ("low-2", "0"), ("high-2", "9"), ("mid-2", "4"),
             ("high-3", "9")]
    for body, priority in sends:
        headers = {"priority": priority} if priority is not None else {}
        producer.send(destination, body, headers=headers)
    producer.sync()
    consumer = connect(broker, version)
    consumer.subscribe(destination)
    assert [m.body for m in consumer.listener.wait_for(7)] == [
        "high-1", "high-2", "high-3", "mid-1", "mid-2", "low-1", "low-2"]


@pytest.mark.parametrize("priority", ["10", "-1", "high"])
def test_invalid_priority_is_an_error(broker, connect, priority):
    client = connect(broker)
    client.send(queue(), "x", headers={"priority": priority, "receipt": "bad-priority"}, wait=False)
    error = client.listener.wait_error()
    assert error.headers.get("receipt-id") == "bad-priority"


# -- selectors ------------------------------------------------------------------------------

SELECTOR = "color = 'red' AND size > 3"
CANDIDATES = [
    ("red-5", {"color": "red", "size": "5"}, True),
    ("red-2", {"color": "red", "size": "2"}, False),
    ("blue-9", {"color": "blue", "size": "9"}, False),
    ("red-10", {"color": "red", "size": "10"}, True),
    ("nothing", {}, False),
    ("red-big", {"color": "red", "size": "big"}, False),
    ("red-3.5", {"color": "red", "size": "3.5"}, True),
]


def _send_candidates(producer, destination: str) -> list[str]:
    """Send every candidate, then a fence that matches: returns what the selector picks, fence last."""
    for body, headers, _ in CANDIDATES:
        producer.send(destination, body, headers=headers)
    producer.send(destination, "fence", headers={"color": "red", "size": "100"})
    return [body for body, _, match in CANDIDATES if match] + ["fence"]


def test_selector_filters_on_queue(broker, connect, version):
    destination = queue()
    picky = connect(broker, version)
    picky.subscribe(destination, headers={"selector": SELECTOR})
    expected = _send_candidates(connect(broker), destination)
    assert [m.body for m in picky.listener.wait_for_body("fence")] == expected
    # What did not match stays on the queue for other consumers.
    anyone = connect(broker, version)
    anyone.subscribe(destination)
    rest = [body for body, _, match in CANDIDATES if not match]
    assert [m.body for m in anyone.listener.wait_for(len(rest))] == rest


def test_selector_filters_on_topic(broker, connect, version):
    destination = "/topic/" + unique("sel")
    picky = connect(broker, version)
    picky.subscribe(destination, headers={"selector": SELECTOR})
    everything = connect(broker, version)
    everything.subscribe(destination)
    expected = _send_candidates(connect(broker), destination)
    assert [m.body for m in picky.listener.wait_for_body("fence")] == expected
    assert [m.body for m in everything.listener.wait_for_body("fence")] == [b for b, _, _ in CANDIDATES] + ["fence"]


def test_selector_on_priority_header(broker, connect):
    destination = queue()
    urgent = connect(broker)
    urgent.subscribe(destination, headers={"selector": "JMSPriority > 6"})
    producer = connect(broker)
    producer.send(destination, "normal")
    producer.send(destination, "urgent", headers={"priority": "8"})
    producer.send(destination, "fence", headers={"priority": "9"})
    assert [m.body for m in urgent.listener.wait_for_body("fence")] == ["urgent", "fence"]


def jms_cases(destination: str) -> list[tuple[str, dict, dict]]:
    """(selector, headers of a message it matches, headers of one it does not) per JMS
    header the selector knows (docs/stomp.md lists them)."""
    return [
        (f"JMSDestination = '{destination}'", {}, None),  # every message here is on it
        ("JMSMessageID IS NOT NULL", {}, None),
        ("JMSPriority = 7", {"priority": "7"}, {"priority": "3"}),
        ("JMSCorrelationID = 'order-1'", {"correlation-id": "order-1"}, {"correlation-id": "order-2"}),
        ("JMSType = 'invoice'", {"type": "invoice"}, {"type": "receipt"}),
        ("JMSTimestamp > 1000", {"timestamp": "2000"}, {"timestamp": "500"}),
        ("JMSExpiration = 0", {}, {"expires": str(int(time.time() * 1000) + 3_600_000)}),
        ("JMSDeliveryMode = 'PERSISTENT'", {"persistent": "true"}, {}),
        ("JMSReplyTo = '/queue/answers'", {"reply-to": "/queue/answers"}, {"reply-to": "/queue/other"}),
    ]


@pytest.mark.parametrize("kind", ["queue", "topic"])
def test_selectors_on_every_jms_header(broker, connect, kind):
    for index in range(len(jms_cases(""))):
        destination = f"/{kind}/" + unique("jms")
        selector, matching, other = jms_cases(destination)[index]
        picky = connect(broker)
        picky.subscribe(destination, headers={"selector": selector})
        producer = connect(broker)
        if other is not None:
            producer.send(destination, "other", headers=other, receipt=True)
        producer.send(destination, "match", headers=matching, receipt=True)
        fence = {**matching, "persistent": "true"} if "PERSISTENT" in selector else matching
        producer.send(destination, "fence", headers=fence, receipt=True)
        received = [m.body for m in picky.listener.wait_for_body("fence")]
        assert received == ["match", "fence"], (selector, received)
        # the JMS headers the selector read are the ones the MESSAGE carries
        message = picky.listener.messages[0]
        assert message.headers["destination"] == destination and message.headers["message-id"]
        picky.disconnect()
        producer.disconnect()


def test_invalid_selector_is_an_error(broker, connect):
    client = connect(broker)
    client.conn.subscribe(queue(), id="s", headers={"selector": "color = = 'red'", "receipt": "sel"})
    error = client.listener.wait_error()
    assert error.headers.get("receipt-id") == "sel"


# -- configurable names and defaults ----------------------------------------------------------


def test_configured_dead_letter_queue_name(broker_factory, connect):
    broker = broker_factory(sets=["broker.max_delivery_attempts=1", "broker.dead_letter_queue=graveyard"])
    destination = queue()
    consumer = connect(broker)
    consumer.subscribe(destination, ack="client-individual")
    consumer.send(destination, "once only")
    consumer.nack(consumer.listener.wait_for(1)[0], receipt=True)
    assert _moved_message(connect, broker, destination, "/queue/graveyard").body == "once only"


def test_expiry_queue_receives_expired_messages(broker_factory, connect):
    broker = broker_factory(sets=["broker.expiry_queue=expired"])
    destination = queue()
    producer = connect(broker)
    producer.send(destination, "will expire", receipt=True, expires=str(now_ms() + 300), x="y")
    time.sleep(0.5)  # let it expire while queued (not synchronisation)
    consumer = connect(broker)
    assert [m.body for m in consumer.fenced(destination)] == ["fence"]
    message = _moved_message(connect, broker, destination, "/queue/expired")
    assert message.body == "will expire"
    assert message.headers.get("x") == "y"


def test_default_prefetch_setting(broker_factory, connect):
    broker = broker_factory(sets=["broker.default_prefetch=1"])
    destination = queue()
    slow = connect(broker)
    slow.subscribe(destination, ack="client")
    fast = connect(broker)
    fast.subscribe(destination)
    for i in range(6):
        fast.send(destination, f"m{i}")
    fast.listener.wait_until(lambda: len(fast.listener.messages) + len(slow.listener.messages) >= 6, "6 messages")
    assert len(slow.listener.messages) == 1
