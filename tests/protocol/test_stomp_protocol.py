"""StompProtocol against the broker core, with no sockets: StringTransport and
MemoryReactorClock, heart-beats driven by clock.advance()."""

from __future__ import annotations

import pytest

from gateway.stomp.protocol import StompSettings
from tests.protocol.stomp_harness import Harness


@pytest.fixture
def harness() -> Harness:
    return Harness()


def test_negotiates_highest_common_version(harness):
    assert harness.client("1.0,1.1,1.2").connected.headers["version"] == "1.2"
    assert harness.client("1.1,1.0").connected.headers["version"] == "1.1"
    headers = harness.client("1.2").connected.headers
    assert headers["server"].startswith("meshgate/") and headers["session"] and headers["heart-beat"]


def test_connect_without_accept_version_is_1_0(harness):
    from tests.protocol.stomp_harness import Client

    client = Client(harness)
    client.send("CONNECT", {"login": "x"})
    (frame,) = client.frames()
    assert frame.command == "CONNECTED" and frame.headers["version"] == "1.0"
    assert "heart-beat" not in frame.headers


def test_no_common_version_is_refused_with_version_header(harness):
    from tests.protocol.stomp_harness import Client

    client = Client(harness)
    client.send("STOMP", {"accept-version": "2.0,3.1", "host": "x"})
    (frame,) = client.frames()
    assert frame.command == "ERROR" and frame.headers["version"] == "1.0,1.1,1.2"
    assert client.closed


def test_first_frame_must_be_connect(harness):
    from tests.protocol.stomp_harness import Client

    client = Client(harness)
    client.send("SEND", {"destination": "/queue/a", "receipt": "r1"})
    (frame,) = client.frames()
    assert frame.command == "ERROR" and "expected CONNECT" in frame.headers["message"]
    assert frame.headers["receipt-id"] == "r1" and client.closed


def test_send_subscribe_message_headers(harness):
    consumer = harness.client()
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client"})
    producer = harness.client()
    producer.send("SEND", {"destination": "/queue/q", "content-type": "text/plain", "x:y": "a\nb", "receipt": "1"},
                  b"hi")
    assert [f.command for f in producer.frames()] == ["RECEIPT"]
    (message,) = consumer.messages()
    assert message.body == b"hi"
    headers = message.headers
    assert headers["destination"] == "/queue/q" and headers["subscription"] == "s"
    assert headers["content-type"] == "text/plain" and headers["x:y"] == "a\nb"
    assert headers["ack"] and headers["message-id"] and "redelivered" not in headers


def test_client_ack_is_cumulative_individual_is_not(harness):
    for mode, left in (("client", 0), ("client-individual", 2)):
        queue = f"/queue/{mode}"
        consumer = harness.client()
        consumer.send("SUBSCRIBE", {"id": "s", "destination": queue, "ack": mode})
        producer = harness.client()
        for i in range(3):
            producer.send("SEND", {"destination": queue}, str(i).encode())
        messages = consumer.messages()
        consumer.send("ACK", {"id": messages[2].headers["ack"]})
        assert harness.broker.queues[mode].inflight == left
        consumer.drop()
        assert len(harness.broker.queues[mode]) == left


def test_nack_redelivers_with_flag_and_dead_letters_after_max_attempts():
    harness = Harness(max_delivery_attempts=2)
    consumer = harness.client()
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client-individual"})
    harness.client().send("SEND", {"destination": "/queue/q"}, b"poison")
    (first,) = consumer.messages()
    consumer.send("NACK", {"id": first.headers["ack"]})
    (second,) = consumer.messages()
    assert second.headers["redelivered"] == "true"
    consumer.send("NACK", {"id": second.headers["ack"]})
    assert consumer.frames() == []
    dlq = harness.client()
    dlq.send("SUBSCRIBE", {"id": "d", "destination": "/queue/DLQ"})
    (dead,) = dlq.messages()
    assert dead.body == b"poison" and dead.headers["original-destination"] == "/queue/q"


def test_disconnect_returns_unacked_to_other_consumer(harness):
    first = harness.client()
    first.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client", "activemq.prefetchSize": "1"})
    second = harness.client()
    harness.client().send("SEND", {"destination": "/queue/q"}, b"m")
    assert len(first.messages()) == 1
    second.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client"})
    assert second.frames() == []
    first.drop()
    (again,) = second.messages()
    assert again.body == b"m" and again.headers["redelivered"] == "true"


def test_prefetch_limits_unacked_deliveries(harness):
    slow = harness.client()
    slow.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client", "activemq.prefetchSize": "1"})
    fast = harness.client()
    fast.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "auto"})
    producer = harness.client()
    for i in range(10):
        producer.send("SEND", {"destination": "/queue/q"}, str(i).encode())
    assert len(slow.messages()) == 1
    assert len(fast.messages()) == 9


def test_transactions_cover_sends_and_acks(harness):
    consumer = harness.client()
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client-individual"})
    producer = harness.client()
    producer.send("BEGIN", {"transaction": "t"})
    producer.send("SEND", {"destination": "/queue/q", "transaction": "t"}, b"a")
    assert consumer.frames() == []
    producer.send("COMMIT", {"transaction": "t"})
    (message,) = consumer.messages()
    producer.send("BEGIN", {"transaction": "t2"})
    producer.send("SEND", {"destination": "/queue/q", "transaction": "t2"}, b"b")
    producer.send("ABORT", {"transaction": "t2"})
    assert consumer.frames() == []
    consumer.send("BEGIN", {"transaction": "c"})
    consumer.send("ACK", {"id": message.headers["ack"], "transaction": "c"})
    consumer.send("ABORT", {"transaction": "c"})
    (redelivered,) = consumer.messages()
    assert redelivered.headers["redelivered"] == "true"
    consumer.send("BEGIN", {"transaction": "c2"})
    consumer.send("ACK", {"id": redelivered.headers["ack"], "transaction": "c2"})
    consumer.send("COMMIT", {"transaction": "c2"})
    assert len(harness.broker.queues["q"]) == 0 and harness.broker.queues["q"].inflight == 0


def test_open_transaction_aborted_on_disconnect(harness):
    producer = harness.client()
    producer.send("BEGIN", {"transaction": "t"})
    producer.send("SEND", {"destination": "/queue/q", "transaction": "t"}, b"a")
    producer.drop()
    assert "q" not in harness.broker.queues or len(harness.broker.queues["q"]) == 0


def test_priority_and_expiry(harness):
    producer = harness.client()
    now_ms = int(harness.clock.seconds() * 1000)
    producer.send("SEND", {"destination": "/queue/q", "priority": "0"}, b"low")
    producer.send("SEND", {"destination": "/queue/q", "priority": "9"}, b"high")
    producer.send("SEND", {"destination": "/queue/q", "expires": str(now_ms + 1000)}, b"expiring")
    harness.clock.advance(2)
    consumer = harness.client()
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q"})
    assert [m.body for m in consumer.messages()] == [b"high", b"low"]
    assert harness.broker.expired == 1


def test_selector_on_queue_and_topic(harness):
    red = harness.client()
    red.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "selector": "color = 'red' AND size > 3"})
    topic = harness.client()
    topic.send("SUBSCRIBE", {"id": "t", "destination": "/topic/t.*", "selector": "color = 'blue'"})
    producer = harness.client()
    for color, size in (("red", "5"), ("blue", "9"), ("red", "1")):
        producer.send("SEND", {"destination": "/queue/q", "color": color, "size": size}, color.encode())
        producer.send("SEND", {"destination": "/topic/t.x", "color": color, "size": size}, color.encode())
    assert [m.body for m in red.messages()] == [b"red"]
    assert [m.body for m in topic.messages()] == [b"blue"]
    assert len(harness.broker.queues["q"]) == 2


def test_topic_wildcards_and_fan_out(harness):
    star = harness.client()
    star.send("SUBSCRIBE", {"id": "1", "destination": "/topic/prices.*"})
    rest = harness.client()
    rest.send("SUBSCRIBE", {"id": "2", "destination": "/topic/prices.>"})
    producer = harness.client()
    producer.send("SEND", {"destination": "/topic/prices.eu"}, b"a")
    producer.send("SEND", {"destination": "/topic/prices.eu.de"}, b"b")
    producer.send("SEND", {"destination": "/topic/prices"}, b"c")
    assert [m.body for m in star.messages()] == [b"a"]
    assert [m.headers["destination"] for m in rest.messages()] == ["/topic/prices.eu", "/topic/prices.eu.de"]


def test_temp_queue_request_reply(harness):
    requester = harness.client()
    requester.send("SUBSCRIBE", {"id": "r", "destination": "/temp-queue/replies"})
    responder = harness.client()
    responder.send("SUBSCRIBE", {"id": "s", "destination": "/queue/service"})
    requester.send("SEND", {"destination": "/queue/service", "reply-to": "/temp-queue/replies"}, b"ping")
    (request,) = responder.messages()
    assert request.headers["reply-to"].startswith("/remote-temp-queue/")
    responder.send("SEND", {"destination": request.headers["reply-to"]}, b"pong")
    (reply,) = requester.messages()
    assert reply.body == b"pong" and reply.headers["destination"] == "/temp-queue/replies"
    requester.drop()
    assert not harness.broker.temp_queues


def test_durable_subscription_keeps_messages_while_away(harness):
    sub = harness.client(**{"client-id": "app"})
    sub.send("SUBSCRIBE", {"id": "1", "destination": "/topic/news", "activemq.subscriptionName": "feed"})
    sub.drop()
    harness.client().send("SEND", {"destination": "/topic/news"}, b"while away")
    back = harness.client(**{"client-id": "app"})
    back.send("SUBSCRIBE", {"id": "1", "destination": "/topic/news", "activemq.subscriptionName": "feed"})
    assert [m.body for m in back.messages()] == [b"while away"]
    back.send("UNSUBSCRIBE", {"id": "1", "activemq.subscriptionName": "feed"})
    assert "app.feed" not in harness.broker.bindings


def test_malformed_frame_gets_error_and_close_others_untouched(harness):
    bystander = harness.client()
    bystander.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q"})
    bad = harness.client()
    bad.raw(b"SEND\ndestination:/queue/q\nreceipt:r9\nbad\\t:x\n\nbody\0")
    (error,) = bad.frames()
    assert error.command == "ERROR" and "undefined escape" in error.headers["message"]
    assert error.headers["receipt-id"] == "r9" and bad.closed
    bad.send("SEND", {"destination": "/queue/q"}, b"after close")
    harness.client().send("SEND", {"destination": "/queue/q"}, b"ok")
    assert [m.body for m in bystander.messages()] == [b"ok"]


@pytest.mark.parametrize(
    "command, headers, problem",
    [
        ("SEND", {}, "'destination'"),
        ("SEND", {"destination": "/bogus/x"}, "invalid destination"),
        ("SUBSCRIBE", {"destination": "/queue/q"}, "'id'"),
        ("SUBSCRIBE", {"destination": "/queue/q", "id": "1", "ack": "sometimes"}, "unknown ack mode"),
        ("SUBSCRIBE", {"destination": "/queue/q", "id": "1", "selector": "a = = 1"}, "selector"),
        ("ACK", {"id": "nope#1"}, "does not name a delivery"),
        ("COMMIT", {"transaction": "none"}, "not active"),
        ("SEND", {"destination": "/queue/q", "priority": "12"}, "priority"),
        ("FLY", {}, "unknown command"),
    ],
)
def test_bad_requests_are_named_in_error(harness, command, headers, problem):
    client = harness.client()
    client.send(command, headers)
    (error,) = client.frames()
    assert error.command == "ERROR" and problem in error.headers["message"] and client.closed


def test_receipts_and_disconnect(harness):
    client = harness.client()
    client.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "receipt": "a"})
    client.send("DISCONNECT", {"receipt": "bye"})
    harness.clock.advance(0)
    assert [f.headers["receipt-id"] for f in client.frames()] == ["a", "bye"]
    assert client.closed


def test_heartbeats_sent_and_silent_client_dropped():
    harness = Harness(StompSettings(heartbeat_send_ms=100, heartbeat_receive_ms=100, heartbeat_grace=1.5))
    silent = harness.client(heart_beat="100,100")
    assert silent.connected.headers["heart-beat"] == "100,100"
    silent.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client"})
    harness.client().send("SEND", {"destination": "/queue/q"}, b"m")
    assert len(silent.messages()) == 1
    # MemoryReactorClock runs a due call at the end of an advance: step finely.
    harness.clock.pump([0.01] * 4)
    assert silent.transport.value() == b""  # it just got a MESSAGE, no beat needed yet
    harness.clock.pump([0.01] * 6)
    assert silent.transport.value() == b"\n"  # at most 100 ms after the last frame
    assert not silent.transport.disconnecting
    harness.clock.pump([0.01] * 10)  # by 200 ms: 1.5 x 100 ms of silence has been noticed
    assert silent.transport.disconnecting
    silent.drop()
    other = harness.client()
    other.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q"})
    (again,) = other.messages()
    assert again.headers["redelivered"] == "true"


def test_memory_limit_pauses_producer_until_drained():
    harness = Harness(memory_limit=20_000)
    producer = harness.client()
    for _ in range(40):
        producer.send("SEND", {"destination": "/queue/q"}, b"x" * 1000)
    assert producer.transport.producerState == "paused"
    consumer = harness.client()
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q"})
    assert len(consumer.messages()) == 40
    assert producer.transport.producerState == "producing"


def test_slow_consumer_transport_stops_dispatch(harness):
    consumer = harness.client()
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q"})
    consumer.protocol.pauseProducing()
    harness.client().send("SEND", {"destination": "/queue/q"}, b"m")
    assert consumer.frames() == [] and len(harness.broker.queues["q"]) == 1
    consumer.protocol.resumeProducing()
    assert len(consumer.messages()) == 1


def test_unsubscribing_topic_with_unacked_messages_frees_their_memory(harness):
    subscriber = harness.client()
    subscriber.send("SUBSCRIBE", {"id": "t", "destination": "/topic/news", "ack": "client"})
    harness.client().send("SEND", {"destination": "/topic/news"}, b"x" * 100)
    assert len(subscriber.messages()) == 1 and harness.broker.memory_used > 0
    subscriber.send("UNSUBSCRIBE", {"id": "t"})
    assert harness.broker.memory_used == 0 and not harness.broker.bindings


def test_memory_limit_counts_uncommitted_transactional_sends():
    harness = Harness(memory_limit=20_000)
    harness.client().send("SEND", {"destination": "/queue/q"}, b"x" * 15_000)  # others' queued messages
    producer = harness.client()
    producer.send("BEGIN", {"transaction": "t"})
    for _ in range(6):
        producer.send("SEND", {"destination": "/queue/q", "transaction": "t"}, b"x" * 1000)
    assert producer.transport.producerState == "paused"
    producer.drop()  # the open transaction aborts and gives its memory back
    assert harness.broker.memory_used == 15_000 + 400


def test_transaction_over_the_memory_limit_is_refused_not_stalled():
    harness = Harness(memory_limit=20_000)
    producer = harness.client()
    producer.send("BEGIN", {"transaction": "t"})
    for _ in range(40):
        producer.send("SEND", {"destination": "/queue/q", "transaction": "t"}, b"x" * 1000)
    (error,) = producer.frames()
    assert error.command == "ERROR" and "memory limit" in error.headers["message"]
    producer.drop()
    assert harness.broker.memory_used == 0


def test_only_the_owner_consumes_from_its_temp_queue(harness):
    owner = harness.client()
    owner.send("SUBSCRIBE", {"id": "r", "destination": "/temp-queue/private"})
    owner.send("SEND", {"destination": "/queue/service", "reply-to": "/temp-queue/private"}, b"req")
    responder = harness.client()
    responder.send("SUBSCRIBE", {"id": "s", "destination": "/queue/service"})
    (request,) = responder.messages()
    thief = harness.client()
    thief.send("SUBSCRIBE", {"id": "x", "destination": request.headers["reply-to"]})
    (error,) = thief.frames()
    assert error.command == "ERROR" and "belongs to another connection" in error.headers["message"]
