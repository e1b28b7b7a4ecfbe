"""A channel whose connection is simply gone (no channel.close, no basic.cancel: what a
client that crashed leaves) returns its consumers' and its basic.gets' unacked
deliveries together, before any goes out again: a consumer waiting on the queue gets
them in the queue's order (issue 26). pika's clients always cancel their consumers
before closing, so the end-to-end tests cannot reach this; the AMQP gateway over
Twisted's test transport can."""

from __future__ import annotations

from gateway.amqp.codec import encode_method
from tests.protocol.amqp_harness import AmqpHarness

NUMBERED = [b"m%d" % i for i in range(11)]


def test_a_dropped_connection_returns_its_channel_s_deliveries_whole_to_a_waiting_consumer():
    harness = AmqpHarness()
    holder, waiter = harness.opened(port=6000), harness.opened(port=6001)
    for client in (holder, waiter):
        client.raw(encode_method(1, "channel.open"))
    holder.raw(encode_method(1, "queue.declare", queue="q", arguments={}))
    holder.raw(encode_method(1, "basic.qos", prefetch_count=5))
    for tag in ("a", "b"):
        holder.raw(encode_method(1, "basic.consume", queue="q", consumer_tag=tag, arguments={}))
    for body in NUMBERED:
        harness.broker.send("queue", "q", {}, body)
    holder.raw(encode_method(1, "basic.get", queue="q"))  # m10, unacked beside the consumers' m0..m9
    queue = harness.broker.queues["q"]
    assert not len(queue) and [m.body for m in queue.consumers[0].inflight.values()] != NUMBERED[:5]
    waiter.raw(encode_method(1, "basic.consume", queue="q", consumer_tag="w", arguments={}))
    holder.drop()
    (waiting,) = queue.consumers
    assert [message.body for message in waiting.inflight.values()] == NUMBERED
    assert all(message.redelivered for message in waiting.inflight.values())
