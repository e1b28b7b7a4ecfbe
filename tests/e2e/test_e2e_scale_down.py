"""Scale-down: a graceful stop hands every message to another node; a crash does not."""

from __future__ import annotations

from e2e_support import unique
from mesh_support import mesh_fixture, send_many  # noqa: F401  (the fixture)


def test_graceful_stop_hands_every_message_over(mesh):
    a, b = mesh(2, extra={0: "scale_down = true"})
    queue = "/queue/" + unique("scale")
    producer = a.client()
    persistent = send_many(producer, queue, [f"p{i}" for i in range(50)])
    volatile = send_many(producer, queue, [f"n{i}" for i in range(50)], persistent=False)
    producer.disconnect()
    assert a.proc.stop() == 0
    assert "every message handed to" in a.stderr()
    consumer = b.client()
    received = consumer.receive(queue, 100)
    assert sorted(m.body for m in received) == sorted(persistent + volatile)


def test_crash_keeps_messages_on_the_crashed_node(mesh):
    a, b = mesh(2, extra={0: "scale_down = true"})
    queue = "/queue/" + unique("crash")
    producer = a.client()
    sent = send_many(producer, queue, [f"p{i}" for i in range(20)])
    producer.disconnect()
    a.kill9()
    a.restart(graceful=False)
    mesh.wait_links([(a, b)])
    consumer = a.client()
    consumer.subscribe(queue)
    assert sorted(m.body for m in consumer.listener.wait_for(20)) == sorted(sent)


def test_graceful_stop_hands_over_a_durable_subscription_backlog(mesh):
    a, b = mesh(2, extra={0: "scale_down = true"})
    topic = "/topic/" + unique("news")
    reader = a.client(headers={"client-id": "app"})
    reader.subscribe(topic, headers={"activemq.subscriptionName": "feed"})
    reader.disconnect()
    producer = a.client()
    sent = send_many(producer, topic, [f"n{i}" for i in range(10)])
    producer.disconnect()
    assert a.proc.stop() == 0
    back = b.client(headers={"client-id": "app"})
    back.subscribe(topic, headers={"activemq.subscriptionName": "feed"})
    assert [m.body for m in back.listener.wait_for(10)] == sent
