"""Queues (competing consumers), topics (fan-out, wildcards), temporary queues for
request/reply, and durable topic subscriptions in both the ActiveMQ and RabbitMQ forms."""

from __future__ import annotations

import pytest
from e2e_support import unique

pytestmark = pytest.mark.shared_broker


def test_queue_consumers_compete(broker, connect, version):
    destination = "/queue/" + unique("compete")
    consumers = [connect(broker, version) for _ in range(3)]
    for consumer in consumers:
        consumer.subscribe(destination)
    producer = connect(broker, version)
    for i in range(30):
        producer.send(destination, f"m{i}")
    producer.send(destination, "last", receipt=True)

    def total() -> int:
        return sum(len(c.listener.messages) for c in consumers)

    consumers[0].listener.wait_until(lambda: total() >= 31, "31 messages across the consumers")
    bodies = [m.body for c in consumers for m in c.listener.messages]
    assert sorted(bodies) == sorted([f"m{i}" for i in range(30)] + ["last"])  # each exactly once
    assert all(c.listener.messages for c in consumers), [len(c.listener.messages) for c in consumers]
    for consumer in consumers:  # FIFO per consumer
        numbers = [int(m.body[1:]) for m in consumer.listener.messages if m.body != "last"]
        assert numbers == sorted(numbers)


def test_queue_holds_messages_until_a_consumer_arrives(broker, connect):
    destination = "/queue/" + unique("hold")
    producer = connect(broker)
    for i in range(5):
        producer.send(destination, f"m{i}", receipt=True)
    consumer = connect(broker)
    consumer.subscribe(destination)
    assert [m.body for m in consumer.listener.wait_for(5)] == [f"m{i}" for i in range(5)]


def test_topic_fans_out_to_every_subscriber(broker, connect, version):
    destination = "/topic/" + unique("fan")
    subscribers = [connect(broker, v) for v in ("1.0", "1.1", "1.2")]
    for subscriber in subscribers:
        subscriber.subscribe(destination)
    producer = connect(broker, version)
    for i in range(10):
        producer.send(destination, f"m{i}")
    for subscriber in subscribers:
        messages = subscriber.listener.wait_for(10)
        assert [m.body for m in messages] == [f"m{i}" for i in range(10)]
        assert all(m.headers["destination"] == destination for m in messages)


def test_topic_without_subscribers_drops_messages(broker, connect):
    destination = "/topic/" + unique("nobody")
    producer = connect(broker)
    producer.send(destination, "into the void", receipt=True)
    subscriber = connect(broker)
    subscriber.subscribe(destination)
    producer.send(destination, "fence")
    assert [m.body for m in subscriber.listener.wait_for_body("fence")] == ["fence"]


def test_two_subscriptions_on_one_connection_each_get_a_copy(broker, connect):
    destination = "/topic/" + unique("twice")
    client = connect(broker)
    first = client.subscribe(destination, id="first")
    second = client.subscribe(destination, id="second")
    client.send(destination, "both")
    messages = client.listener.wait_for(2)
    assert sorted(m.headers["subscription"] for m in messages) == sorted([first, second])


def test_topic_wildcards(broker, connect):
    base = unique("w")
    one = connect(broker)
    one.subscribe(f"/topic/{base}.*", id="star")
    many = connect(broker)
    many.subscribe(f"/topic/{base}.>", id="gt")
    mid = connect(broker)
    mid.subscribe(f"/topic/{base}.*.c", id="mid")
    producer = connect(broker)
    for name in [f"{base}.a", f"{base}.a.b", f"{base}", f"{base}.a.c", f"x.{base}.a", f"{base}x.a", f"{base}.z"]:
        producer.send(f"/topic/{name}", name)
    # The last message matches all three patterns... except mid: send it a fence of its own.
    producer.send(f"/topic/{base}.fence.c", "fence")
    assert [m.body for m in one.listener.wait_for_body(f"{base}.z")] == [f"{base}.a", f"{base}.z"]
    assert [m.body for m in many.listener.wait_for_body("fence")] == [
        f"{base}.a", f"{base}.a.b", f"{base}.a.c", f"{base}.z", "fence"]
    assert [m.body for m in mid.listener.wait_for_body("fence")] == [f"{base}.a.c", "fence"]
    # The MESSAGE names the destination it was sent to, not the pattern.
    assert [m.headers["destination"] for m in one.listener.messages] == [f"/topic/{base}.a", f"/topic/{base}.z"]


def test_wildcard_subscription_on_queue_name_is_not_a_topic(broker, connect):
    base = unique("qw")
    subscriber = connect(broker)
    subscriber.subscribe(f"/topic/{base}.>")
    producer = connect(broker)
    producer.send(f"/queue/{base}.a", "queue message", receipt=True)
    producer.send(f"/topic/{base}.fence", "fence")
    assert [m.body for m in subscriber.listener.wait_for_body("fence")] == ["fence"]


# -- temporary queues -----------------------------------------------------------------------


def test_temp_queue_request_reply(broker, connect, version):
    service = "/queue/" + unique("svc")
    responder = connect(broker, version)
    responder.subscribe(service)
    requester = connect(broker, version)
    requester.subscribe("/temp-queue/replies", id="replies")
    requester.send(service, "question", headers={"reply-to": "/temp-queue/replies", "correlation-id": "c1"})
    [request] = responder.listener.wait_for(1)
    reply_to = request.headers["reply-to"]
    responder.send(reply_to, "answer", headers={"correlation-id": request.headers["correlation-id"]})
    [reply] = requester.listener.wait_for(1)
    assert reply.body == "answer"
    assert reply.headers["correlation-id"] == "c1"
    assert reply.headers["destination"] == "/temp-queue/replies"
    assert reply.headers["subscription"] == "replies"


def test_temp_queues_are_private_to_their_connection(broker, connect):
    service = "/queue/" + unique("svc")
    responder = connect(broker)
    responder.subscribe(service)
    alice = connect(broker)
    bob = connect(broker)
    for requester, name in ((alice, "alice"), (bob, "bob")):
        requester.subscribe("/temp-queue/replies")  # same name, different connections
        requester.send(service, name, headers={"reply-to": "/temp-queue/replies"})
    for request in responder.listener.wait_for(2):
        responder.send(request.headers["reply-to"], "for " + request.body)
    assert [m.body for m in alice.listener.wait_for(1)] == ["for alice"]
    assert [m.body for m in bob.listener.wait_for(1)] == ["for bob"]
    # A third party sending to /temp-queue/replies reaches its own temp queue, not theirs.
    responder.send("/temp-queue/replies", "stranger", receipt=True)
    alice.send(service, "fence", headers={"reply-to": "/temp-queue/replies"})
    fence = next(m for m in responder.listener.wait_for_body("fence") if m.body == "fence")
    responder.send(fence.headers["reply-to"], "fence reply")
    assert [m.body for m in alice.listener.wait_for_body("fence reply")] == ["for alice", "fence reply"]
    assert [m.body for m in bob.listener.messages] == ["for bob"]


# -- durable topic subscriptions ------------------------------------------------------------


def _activemq_durable(connect, broker, destination, client_id, name="s1", version="1.2"):
    client = connect(broker, version, headers={"client-id": client_id})
    client.subscribe(destination, id="durable", headers={"activemq.subscriptionName": name})
    return client


def _rabbitmq_durable(connect, broker, destination, sub_id, version="1.2"):
    client = connect(broker, version)
    client.subscribe(destination, id=sub_id, headers={"durable": "true", "auto-delete": "false"})
    return client


DURABLE_FORMS = {"activemq": _activemq_durable, "rabbitmq": _rabbitmq_durable}


@pytest.mark.parametrize("form", DURABLE_FORMS)
def test_durable_subscription_keeps_messages_while_away(broker, connect, form):
    destination = "/topic/" + unique("dur")
    subscribe = DURABLE_FORMS[form]
    key = unique("client")
    subscriber = subscribe(connect, broker, destination, key)
    producer = connect(broker)
    producer.send(destination, "while here", receipt=True)
    assert [m.body for m in subscriber.listener.wait_for(1)] == ["while here"]
    subscriber.disconnect()
    for i in range(3):
        producer.send(destination, f"away-{i}", receipt=True)
    back = subscribe(connect, broker, destination, key)
    assert [m.body for m in back.listener.wait_for(3)] == ["away-0", "away-1", "away-2"]
    producer.send(destination, "fence")
    assert [m.body for m in back.listener.wait_for_body("fence")] == ["away-0", "away-1", "away-2", "fence"]


def test_non_durable_topic_subscription_loses_messages_while_away(broker, connect):
    client_id = unique("c-nd")
    destination = "/topic/" + unique("nondur")
    subscriber = connect(broker, headers={"client-id": client_id})
    subscriber.subscribe(destination, id="plain")
    subscriber.disconnect()
    producer = connect(broker)
    producer.send(destination, "missed", receipt=True)
    back = connect(broker, headers={"client-id": client_id})
    back.subscribe(destination, id="plain")
    producer.send(destination, "fence")
    assert [m.body for m in back.listener.wait_for_body("fence")] == ["fence"]


def test_activemq_durable_subscription_is_per_client_id_and_name(broker, connect):
    ids = unique("id")
    destination = "/topic/" + unique("dur")
    first = _activemq_durable(connect, broker, destination, client_id=ids + "A", name="s")
    second = _activemq_durable(connect, broker, destination, client_id=ids + "B", name="s")
    first.disconnect()
    producer = connect(broker)
    producer.send(destination, "m1", receipt=True)
    assert [m.body for m in second.listener.wait_for(1)] == ["m1"]
    back = _activemq_durable(connect, broker, destination, client_id=ids + "A", name="s")
    assert [m.body for m in back.listener.wait_for(1)] == ["m1"]


def test_activemq_durable_subscription_needs_client_id(broker, connect):
    client = connect(broker)
    client.conn.subscribe("/topic/" + unique("d"), id="d", headers={"activemq.subscriptionName": "s",
                                                                      "receipt": "x"})
    error = client.listener.wait_error()
    assert "client-id" in error.headers.get("message", ""), error.headers


def test_durable_subscription_removed_by_unsubscribe(broker, connect):
    rm = unique("rm")
    destination = "/topic/" + unique("dur")
    subscriber = _activemq_durable(connect, broker, destination, client_id=rm, name="s")
    subscriber.unsubscribe("durable", headers={"activemq.subscriptionName": "s"})
    subscriber.disconnect()
    producer = connect(broker)
    producer.send(destination, "after removal", receipt=True)
    back = _activemq_durable(connect, broker, destination, client_id=rm, name="s")
    producer.send(destination, "fence")
    assert [m.body for m in back.listener.wait_for_body("fence")] == ["fence"]


def test_durable_subscription_unacked_messages_come_back(broker, connect):
    client_id = unique("ack-test")
    destination = "/topic/" + unique("dur")
    client = connect(broker, headers={"client-id": client_id})
    client.subscribe(destination, id="d", ack="client-individual", headers={"activemq.subscriptionName": "s"})
    producer = connect(broker)
    producer.send(destination, "unacked", receipt=True)
    client.listener.wait_for(1)
    client.drop()
    back = connect(broker, headers={"client-id": client_id})
    back.subscribe(destination, id="d", ack="client-individual", headers={"activemq.subscriptionName": "s"})
    [message] = back.listener.wait_for(1)
    assert message.body == "unacked"
    assert message.headers.get("redelivered") == "true"


@pytest.mark.parametrize("form", DURABLE_FORMS)
def test_durable_subscription_persistent_messages_survive_restart(broker_factory, connect, form):
    broker = broker_factory()
    destination = "/topic/" + unique("dur")
    subscribe = DURABLE_FORMS[form]
    subscribe(connect, broker, destination, "k1").disconnect()
    producer = connect(broker)
    for i in range(3):
        producer.send(destination, f"p{i}", receipt=True, persistent="true")
    producer.disconnect()
    broker.restart()
    back = subscribe(connect, broker, destination, "k1")
    assert sorted(m.body for m in back.listener.wait_for(3)) == ["p0", "p1", "p2"]


def test_reply_to_a_temp_queue_whose_owner_left_is_harmless(broker, connect):
    service = "/queue/" + unique("svc")
    responder = connect(broker)
    responder.subscribe(service)
    requester = connect(broker)
    requester.subscribe("/temp-queue/gone")
    requester.send(service, "q", headers={"reply-to": "/temp-queue/gone"}, receipt=True)
    [request] = responder.listener.wait_for(1)
    requester.disconnect()
    responder.send(request.headers["reply-to"], "nobody listens", receipt=True)
    assert responder.listener.errors == []


def test_another_connection_cannot_consume_from_a_temp_queue(broker, connect):
    """Only the connection that created a temporary queue may consume from it, even if
    another client learns its reply-to name (here: the responder itself)."""
    service = "/queue/" + unique("svc")
    responder = connect(broker)
    responder.subscribe(service)
    owner = connect(broker)
    owner.subscribe("/temp-queue/private")
    owner.send(service, "q", headers={"reply-to": "/temp-queue/private"})
    [request] = responder.listener.wait_for(1)
    reply_to = request.headers["reply-to"]
    thief = connect(broker)
    thief.conn.subscribe(reply_to, id="steal", headers={"receipt": "steal"})
    thief.listener.wait_until(lambda: bool(thief.listener.receipts or thief.listener.errors), "RECEIPT or ERROR")
    for i in range(6):
        responder.send(reply_to, f"reply-{i}")
    responder.send(reply_to, "fence", receipt=True)
    assert [m.body for m in owner.listener.wait_for_body("fence")] == [f"reply-{i}" for i in range(6)] + ["fence"]
    assert thief.listener.messages == [], f"a stranger consumed {[m.body for m in thief.listener.messages]}"


def test_durable_subscription_cannot_be_active_twice(broker, connect):
    destination = "/topic/" + unique("dur")
    client_id = unique("twice")
    _activemq_durable(connect, broker, destination, client_id=client_id, name="s")
    second = connect(broker, headers={"client-id": client_id})
    second.conn.subscribe(destination, id="durable", headers={"activemq.subscriptionName": "s", "receipt": "x"})
    assert second.listener.wait_error()
