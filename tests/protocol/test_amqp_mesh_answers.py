"""A channel's method whose answer comes from other nodes (gateway.amqp.mesh_queues)
holds the channel's later methods until it is answered, so replies keep the order of
the methods (AMQP's rule), and a client that keeps sending meanwhile is not read on.
The other nodes are a MeshQueues of the test's own whose answers it fires by hand."""

from __future__ import annotations

import pika.spec
from twisted.internet import defer

from gateway.amqp.channel import WAITING_LIMIT
from gateway.amqp.codec import encode_method
from gateway.amqp.mesh_queues import Emptied, Pulled, QueueElsewhere
from tests.protocol.amqp_harness import AmqpClient, AmqpHarness


class OtherNodes:
    """Each question waits until the test answers it."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, defer.Deferred]] = []

    def _ask(self, what: str) -> defer.Deferred:
        d: defer.Deferred = defer.Deferred()
        self.asked.append((what, d))
        return d

    def elsewhere(self, vhost: str, queue: str) -> defer.Deferred[QueueElsewhere]:
        return self._ask("elsewhere " + queue)

    def pull(self, vhost: str, queue: str) -> defer.Deferred[Pulled]:
        return self._ask("pull " + queue)

    def purge(self, vhost: str, queue: str, user: str) -> defer.Deferred[Emptied]:
        return self._ask("purge " + queue)

    def delete(self, vhost: str, queue: str, user: str) -> defer.Deferred[Emptied]:
        return self._ask("delete " + queue)


def opened() -> tuple[AmqpHarness, OtherNodes, AmqpClient]:
    harness = AmqpHarness()
    others = OtherNodes()
    harness.factory.mesh_queues = others
    client = harness.opened()
    client.raw(encode_method(1, "channel.open"))
    client.methods()
    return harness, others, client


def test_later_methods_wait_for_an_answer_from_the_mesh_and_replies_keep_their_order():
    harness, others, client = opened()
    client.raw(encode_method(1, "queue.declare", queue="far", passive=True, arguments={})
               + encode_method(1, "queue.declare", queue="near", arguments={})
               + encode_method(1, "basic.get", queue="near"))
    assert client.methods() == [] and [what for what, _ in others.asked] == ["elsewhere far"]
    assert "near" not in harness.broker.queues  # not declared before the first is answered
    others.asked[0][1].callback(QueueElsewhere(known=True, ready=7, consumers=2))
    replies = client.methods()
    assert [type(reply) for reply in replies[:2]] == [pika.spec.Queue.DeclareOk, pika.spec.Queue.DeclareOk]
    assert (replies[0].queue, replies[0].message_count, replies[0].consumer_count) == ("far", 7, 2)
    assert replies[1].queue == "near" and [what for what, _ in others.asked][1:] == ["pull near"]
    others.asked[1][1].callback(Pulled(known=True, moved=0))
    assert [type(reply) for reply in client.methods()] == [pika.spec.Basic.GetEmpty]


def test_a_queue_no_node_has_is_404_and_the_methods_behind_it_are_dropped_with_the_channel():
    _, others, client = opened()
    client.raw(encode_method(1, "queue.declare", queue="nowhere", passive=True, arguments={})
               + encode_method(1, "queue.declare", queue="after", arguments={}))
    others.asked[0][1].callback(QueueElsewhere())
    (close,) = client.methods()
    assert isinstance(close, pika.spec.Channel.Close) and close.reply_code == 404
    assert "on any node" in close.reply_text


def test_a_client_that_keeps_sending_behind_an_unanswered_method_is_not_read_on_until_the_answer():
    _, others, client = opened()
    client.raw(encode_method(1, "queue.declare", queue="far", passive=True, arguments={}))
    client.raw(encode_method(1, "basic.qos", prefetch_count=1) * WAITING_LIMIT)
    assert client.transport.producerState == "paused"
    others.asked[0][1].callback(QueueElsewhere(known=True))
    assert client.transport.producerState == "producing"
    assert len(client.methods()) == 1 + WAITING_LIMIT
