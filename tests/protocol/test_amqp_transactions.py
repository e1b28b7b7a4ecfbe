"""A transactional channel's held publishes count against the node's memory until
tx.commit or tx.rollback, a transaction that could never be held is refused with
406, and one that fills the memory itself is read on to its commit."""

from __future__ import annotations

import pika.spec

from gateway.amqp.codec import encode_content, encode_method
from tests.protocol.amqp_harness import AmqpClient, AmqpHarness

MiB = 1024 * 1024


def transactional(harness: AmqpHarness) -> AmqpClient:
    client = harness.opened()
    client.raw(encode_method(1, "channel.open"))
    client.raw(encode_method(1, "queue.declare", queue="q", arguments={}))
    client.raw(encode_method(1, "tx.select"))
    client.methods()
    return client


def publish(client: AmqpClient, body: bytes) -> None:
    client.raw(encode_method(1, "basic.publish", exchange="", routing_key="q")
               + b"".join(encode_content(1, {}, body, 131072)))


def test_held_publishes_count_against_memory_until_rollback_or_a_dropped_connection():
    harness = AmqpHarness()
    client = transactional(harness)
    publish(client, b"x" * 100_000)
    held = harness.broker.memory_used
    assert held >= 100_000 and not len(harness.broker.queues["q"])
    client.raw(encode_method(1, "tx.rollback"))
    assert isinstance(client.methods()[-1], pika.spec.Tx.RollbackOk)
    assert harness.broker.memory_used == 0
    publish(client, b"x" * 100_000)
    client.drop()
    assert harness.broker.memory_used == 0


def test_a_transaction_past_the_memory_limit_is_refused_with_406_and_its_memory_returned():
    harness = AmqpHarness(memory_limit=MiB)
    client = transactional(harness)
    for _ in range(3):
        publish(client, b"x" * (MiB // 2))
    close = client.methods()[-1]
    assert isinstance(close, pika.spec.Channel.Close) and close.reply_code == 406, close
    assert "memory limit" in close.reply_text
    assert harness.broker.memory_used == 0


def test_a_transaction_that_fills_the_memory_itself_is_read_on_to_its_commit():
    harness = AmqpHarness(memory_limit=MiB)
    client = transactional(harness)
    for _ in range(4):
        publish(client, b"x" * (MiB // 4 - 400))
    assert harness.broker.memory_full
    assert client.transport.producerState == "producing"
    client.raw(encode_method(1, "tx.commit"))
    assert isinstance(client.methods()[-1], pika.spec.Tx.CommitOk)
    assert len(harness.broker.queues["q"]) == 4
