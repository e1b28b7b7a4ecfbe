"""Message journeys on one real node (docs/journeys.md): a STOMP message sent with
``trace:true`` and an AMQP one published with ``x-trace`` record their steps, read back
with the ``journey_steps`` management request; an untraced message records none, and a
node without ``[journeys]`` answers that it records none."""

from __future__ import annotations

import pika
import pytest
from amqp_support import AMQP_ON
from e2e_support import manage, manage_result, module_broker, unique
from stomp_client import open_client

from model.requests import Browse, JourneySteps


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with module_broker(tmp_path_factory, "traced", sets=[AMQP_ON, "journeys.enabled=true"]) as broker:
        yield broker


def journey(node, message_id: str) -> list:
    return manage_result(node.port, JourneySteps(ids=[message_id]))


def waiting_id(node, queue: str) -> str:
    """The broker's id of the one message waiting in ``queue`` (AMQP consumers are not told it)."""
    [page] = manage_result(node.port, Browse(queue=queue))
    [message] = page.messages
    return message.id


def test_a_traced_stomp_message_records_its_steps_in_order_and_an_untraced_one_none(node):
    client = open_client(node)
    try:
        queue = "/queue/" + unique("orders")
        client.subscribe(queue, id="s1", ack="client-individual")
        client.send(queue, "traced", headers={"trace": "true", "persistent": "true"}, receipt=True)
        [first] = client.listener.wait_for(1)
        client.nack(first)
        second = client.listener.wait_for(2)[1]
        assert second.headers["message-id"] == first.headers["message-id"]
        client.ack(second, receipt=True)
        client.send(queue, "plain", receipt=True)
        plain = client.listener.wait_for(3)[2]
        client.ack(plain, receipt=True)
    finally:
        client.drop()
    steps = journey(node, first.headers["message-id"])
    assert [s.step for s in steps] == ["received", "stored", "delivered", "requeued", "delivered", "acked"]
    received, _, delivered, requeued, redelivered, _ = steps
    assert (received.protocol, received.destination, received.persistent) == ("stomp", queue, True)
    assert received.connection == delivered.connection and received.user
    assert (delivered.consumer, delivered.redelivered, requeued.reason) == ("s1", False, "nack")
    assert redelivered.redelivered and redelivered.deliveries == 2
    assert [s.seq for s in steps] == sorted(s.seq for s in steps)
    assert journey(node, plain.headers["message-id"]) == []


def test_a_traced_amqp_message_records_its_steps_through_consume_and_get(node, amqp):
    channel = amqp(node).channel()
    queue, dead = unique("work"), unique("dead")
    channel.exchange_declare(dead, "fanout")
    channel.queue_declare(dead)
    channel.queue_bind(dead, dead)
    channel.queue_declare(queue, durable=True, arguments={"x-dead-letter-exchange": dead})
    traced = pika.BasicProperties(delivery_mode=2, headers={"x-trace": True})
    channel.basic_publish("", queue, b"consumed", traced)
    consumed_id = waiting_id(node, queue)
    got: list = []
    tag = channel.basic_consume(queue, lambda ch, method, properties, body: got.append(method))
    while len(got) < 1:
        channel.connection.process_data_events(time_limit=0.1)
    channel.basic_nack(got[0].delivery_tag, requeue=True)
    while len(got) < 2:
        channel.connection.process_data_events(time_limit=0.1)
    assert got[1].redelivered
    channel.basic_ack(got[1].delivery_tag)
    channel.basic_cancel(tag)

    steps = journey(node, consumed_id)
    assert [s.step for s in steps] == ["received", "stored", "delivered", "requeued", "delivered", "acked"]
    received, _, delivered, nacked, redelivered, _ = steps
    assert (received.protocol, received.destination, received.routing_key) == ("amqp", "/queue/" + queue, queue)
    assert (delivered.consumer, nacked.reason, redelivered.redelivered) == (tag, "nack", True)

    # A basic.get, a reject to the dead-letter exchange: the copy there is traced under an id of its own.
    channel.basic_publish("", queue, b"rejected", pika.BasicProperties(headers={"x-trace": "true"}))
    rejected_id = waiting_id(node, queue)
    method, _, _ = channel.basic_get(queue)
    channel.basic_reject(method.delivery_tag, requeue=False)
    copy_id = waiting_id(node, dead)
    method, _, _ = channel.basic_get(dead, auto_ack=True)
    assert [(s.step, s.consumer, s.reason, s.destination) for s in journey(node, rejected_id)] == [
        ("received", None, None, "/queue/" + queue), ("queued", None, None, None), ("delivered", "get", None, None),
        ("dead_lettered", None, "rejected", "exchange:" + dead)]
    copy_steps = journey(node, copy_id)
    assert [s.step for s in copy_steps] == ["received", "queued", "delivered", "acked"]
    assert copy_steps[0].from_id == rejected_id

    channel.basic_publish("", queue, b"plain")
    assert journey(node, waiting_id(node, queue)) == []


def test_a_node_without_journeys_says_so(broker_factory):
    plain = broker_factory()
    reply = manage(plain.port, JourneySteps(ids=["m-1"]))
    assert not reply.ok and reply.error.code == "conflict" and "[journeys]" in reply.error.message
