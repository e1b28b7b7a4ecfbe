"""Requeued messages go back where they were (issue 26), through real clients on a
real node: pika's basic.nack (multiple), basic.reject, basic.recover, a channel and a
connection closing with unacked deliveries, a priority queue; stomp.py's NACK (1.1
and 1.2), UNSUBSCRIBE and a dropped connection. RabbitMQ's rule: a requeued message
returns to its original position, ahead of what was published after it."""

from __future__ import annotations

import pika
import pytest
from amqp_support import amqp_broker, await_deliveries, drain, publish_numbered
from e2e_support import unique

PREFETCH = "activemq.prefetchSize"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with amqp_broker(tmp_path_factory, "requeue") as broker:
        yield broker


def numbered(count: int, prefix: str = "") -> list[bytes]:
    return [b"%s%d" % (prefix.encode(), i) for i in range(count)]


def consuming(channel, queue: str, prefetch: int) -> list:
    """A consumer of ``queue`` on ``channel`` with ``prefetch``: the (method, body) it is given."""
    got: list = []
    channel.basic_qos(prefetch_count=prefetch)
    channel.basic_consume(queue, lambda _, method, properties, body: got.append((method, body)))
    return got


# -- AMQP -------------------------------------------------------------------------------------


@pytest.mark.parametrize("taker", ["the same consumer", "a new consumer"])
def test_twenty_nacked_at_once_come_back_in_order_before_later_messages(node, amqp, taker):
    connection = amqp(node)
    channel = connection.channel()
    queue = unique("nack20")
    channel.queue_declare(queue)
    got = consuming(channel, queue, prefetch=20)
    publish_numbered(channel, queue, 20)
    await_deliveries(connection, got, 20)
    for body in numbered(5, "later"):  # no room for these: they wait
        channel.basic_publish("", queue, body)
    if taker == "the same consumer":
        channel.basic_nack(got[-1][0].delivery_tag, multiple=True, requeue=True)
        await_deliveries(connection, got, 40)
        channel.basic_ack(got[-1][0].delivery_tag, multiple=True)
        await_deliveries(connection, got, 45)
        again = got[20:]
    else:
        channel.basic_cancel(got[0][0].consumer_tag)
        channel.basic_nack(got[-1][0].delivery_tag, multiple=True, requeue=True)
        again = [(method, body) for method, _, body in drain(amqp(node).channel(), queue, 25)]
    assert [body for _, body in again] == numbered(20) + numbered(5, "later")
    assert [method.redelivered for method, _ in again] == [True] * 20 + [False] * 5


def delivered_then_cancelled(connection, prefix: str, count: int, prefetch: int):
    """A new queue with ``count`` numbered messages, ``prefetch`` of them delivered to a
    consumer of ``connection`` that is then cancelled (they stay unacked): (channel,
    queue, the deliveries)."""
    channel = connection.channel()
    queue = unique(prefix)
    channel.queue_declare(queue)
    got = consuming(channel, queue, prefetch=prefetch)
    publish_numbered(channel, queue, count)
    await_deliveries(connection, got, prefetch)
    channel.basic_cancel(got[0][0].consumer_tag)
    return channel, queue, got


def test_rejected_messages_return_to_their_own_places(node, amqp):
    channel, queue, got = delivered_then_cancelled(amqp(node), "reject", 20, prefetch=6)
    tags = {body: method.delivery_tag for method, body in got}
    channel.basic_reject(tags[b"3"], requeue=True)
    channel.basic_reject(tags[b"5"], requeue=True)
    for body in (b"0", b"1", b"2", b"4"):
        channel.basic_ack(tags[body])
    again = drain(amqp(node).channel(), queue, 16)
    assert [body for _, _, body in again] == [b"3", b"5"] + numbered(20)[6:]
    assert [method.redelivered for method, _, _ in again[:3]] == [True, True, False]


def test_recover_requeues_in_the_original_order(node, amqp):
    channel, queue, _ = delivered_then_cancelled(amqp(node), "recover", 15, prefetch=10)
    channel.basic_recover(requeue=True)
    assert [body for _, _, body in drain(amqp(node).channel(), queue, 15)] == numbered(15)


def test_a_closing_channel_returns_two_consumers_deliveries_whole_to_a_waiting_consumer(node, amqp):
    connection = amqp(node)
    channel = connection.channel()
    queue = unique("chclose")
    channel.queue_declare(queue)
    first, second = consuming(channel, queue, prefetch=5), consuming(channel, queue, prefetch=5)
    publish_numbered(channel, queue, 10)
    await_deliveries(connection, first, 5)
    await_deliveries(connection, second, 5)
    assert {body for _, body in first} != set(numbered(5))  # taken in turns: neither holds a run
    other = amqp(node)
    waiting = consuming(other.channel(), queue, prefetch=100)
    channel.close()
    await_deliveries(other, waiting, 10)
    assert [body for _, body in waiting] == numbered(10)


def test_a_closing_connection_returns_every_channel_s_deliveries_in_order(node, amqp):
    connection = amqp(node)
    queue = unique("connclose")
    channels = [connection.channel(), connection.channel()]
    channels[0].queue_declare(queue)
    held = [consuming(channel, queue, prefetch=5) for channel in channels]
    publish_numbered(channels[0], queue, 10)
    for got in held:
        await_deliveries(connection, got, 5)
    connection.close()
    assert [body for _, _, body in drain(amqp(node).channel(), queue, 10)] == numbered(10)


def test_a_priority_queue_serves_by_priority_after_a_requeue(node, amqp):
    connection = amqp(node)
    channel = connection.channel()
    queue = unique("prio")
    channel.queue_declare(queue, arguments={"x-max-priority": 9})
    got = consuming(channel, queue, prefetch=12)
    for i in range(12):
        priority = (1, 5, 9)[i % 3]
        channel.basic_publish("", queue, b"p%d-%d" % (priority, i), pika.BasicProperties(priority=priority))
    await_deliveries(connection, got, 12)
    channel.basic_cancel(got[0][0].consumer_tag)
    channel.basic_nack(got[-1][0].delivery_tag, multiple=True, requeue=True)
    bodies = [body for _, _, body in drain(amqp(node).channel(), queue, 12)]
    assert bodies == [b"p9-2", b"p9-5", b"p9-8", b"p9-11", b"p5-1", b"p5-4", b"p5-7", b"p5-10",
                      b"p1-0", b"p1-3", b"p1-6", b"p1-9"]


# -- STOMP ------------------------------------------------------------------------------------


def stomp_numbered(count: int, start: int = 0) -> list[str]:
    return [f"m{i}" for i in range(start, start + count)]


def test_a_nacked_message_goes_back_behind_older_returned_ones(node, connect, version11):
    queue = "/queue/" + unique("nack")
    first, second = connect(node, version11), connect(node, version11)
    first.subscribe(queue, ack="client-individual", headers={PREFETCH: "5"})
    for body in stomp_numbered(5):
        first.send(queue, body)
    first.listener.wait_for(5)
    second.subscribe(queue, ack="client-individual", headers={PREFETCH: "5"})
    for body in stomp_numbered(5, 5):
        second.send(queue, body)
    held = {message.body: message for message in second.listener.wait_for(5)}
    first.disconnect()  # m0..m4 back; the second has no room for them
    second.nack(held["m7"], receipt=True)
    again = second.listener.wait_for(6)[5]
    assert (again.body, again.headers.get("redelivered")) == ("m0", "true")  # older than m7: m7 waits
    second.disconnect()
    third = connect(node, version11)
    third.subscribe(queue)
    third.listener.wait_for(10)
    assert third.listener.bodies() == stomp_numbered(10)


def test_unsubscribed_consumers_messages_return_in_order(node, connect):
    queue = "/queue/" + unique("unsub")
    clients = [connect(node), connect(node)]
    ids = [client.subscribe(queue, ack="client-individual", headers={PREFETCH: "5"}) for client in clients]
    for body in stomp_numbered(10):
        clients[0].send(queue, body)
    for client in clients:
        client.listener.wait_for(5)
    assert clients[0].listener.bodies() != stomp_numbered(5)  # taken in turns
    for client, sub_id in zip(clients, ids, strict=True):
        client.unsubscribe(sub_id)
    third = connect(node)
    third.subscribe(queue)
    third.listener.wait_for(10)
    assert third.listener.bodies() == stomp_numbered(10)


def test_a_dropped_connection_returns_its_subscriptions_messages_whole_to_a_waiting_one(node, connect):
    queue = "/queue/" + unique("drop")
    dropped = connect(node)
    for _ in range(2):
        dropped.subscribe(queue, ack="client-individual", headers={PREFETCH: "5"})
    for body in stomp_numbered(10):
        dropped.send(queue, body)
    dropped.listener.wait_for(10)
    waiting = connect(node)
    waiting.subscribe(queue, headers={PREFETCH: "100"})
    dropped.drop()
    waiting.listener.wait_for(10)
    assert waiting.listener.bodies() == stomp_numbered(10)
