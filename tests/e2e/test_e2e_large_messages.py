"""Large messages end to end with stomp.py against real brokers: 16 MiB and 100 MB
bodies (the default max_frame_size is 100 MiB, ActiveMQ's maxFrameSize) through a
queue across a kill -9, a topic with several subscribers, and a two-node mesh,
where they cross the link in pieces while small messages for another queue go
between them."""

from __future__ import annotations

import hashlib
import string

import pytest
from e2e_support import unique
from mesh_support import mesh_fixture  # noqa: F401

MiB = 1024 * 1024
SIZES = {"16MiB": 16 * MiB, "100MB": 100_000_000}
pytestmark = pytest.mark.timeout(300)


def body_of(size: int) -> str:
    # A period (52) that 1 MiB is not a multiple of: a piece out of place changes the digest.
    return (string.ascii_letters * (size // 52 + 1))[:size]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_a_large_persistent_message_through_a_queue_survives_kill_9(broker_factory, connect, size):
    broker = broker_factory()
    queue = "/queue/" + unique("large")
    body = body_of(size)
    connect(broker).send(queue, body, receipt=True, persistent="true")
    broker.kill9()
    broker.start()
    consumer = connect(broker)
    consumer.subscribe(queue)
    (message,) = consumer.listener.wait_for(1, timeout=120)
    assert len(message.body) == size and digest(message.body) == digest(body)


def test_a_large_message_reaches_every_topic_subscriber(broker_factory, connect):
    broker = broker_factory()
    topic = "/topic/" + unique("large")
    subscribers = [connect(broker) for _ in range(3)]
    for subscriber in subscribers:
        subscriber.subscribe(topic)
    body = body_of(SIZES["16MiB"])
    connect(broker).send(topic, body, receipt=True)
    for subscriber in subscribers:
        (message,) = subscriber.listener.wait_for(1, timeout=60)
        assert digest(message.body) == digest(body)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_a_large_message_crosses_the_mesh_and_small_ones_for_another_queue_go_by(mesh, size):
    a, b = mesh(2)
    large, small = "/queue/" + unique("large"), "/queue/" + unique("small")
    consumer = b.client()
    consumer.subscribe(large)
    consumer.subscribe(small)
    body = body_of(size)
    producer = a.client()
    producer.send(large, body, receipt=True, persistent="true")
    for i in range(20):
        producer.send(small, f"small-{i}", receipt=True)
    messages = consumer.listener.wait_for(21, timeout=120)
    (received,) = [m for m in messages if m.headers["destination"] == large]
    assert len(received.body) == size and digest(received.body) == digest(body)
    assert sorted(m.body for m in messages if m.headers["destination"] == small) == sorted(
        f"small-{i}" for i in range(20))
