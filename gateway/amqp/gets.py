"""basic.get's answer: a message taken off the node's own queue, or, when that has
none ready and the node is in a mesh, one pulled from another node (issue 26,
docs/amqp.md "Across the mesh").

The pull asks the other nodes to move ready messages here (gateway.amqp.mesh_queues);
they come as any forwarded message does, under custody, so one is never on two nodes.
A ``GetWaiter`` meanwhile is a consumer of the queue with room for one message: the
first message the queue hands it is the get's answer. basic.get-empty when no other
node had one ready, or when none came within ``GET_WAIT_S``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet import defer

from gateway.amqp import properties as props
from gateway.amqp import spec
from gateway.amqp.codec import encode_content, encode_method
from gateway.amqp.mesh_queues import MeshQueues, Pulled
from gateway.amqp.properties import route_of
from gateway.broker.message import Message
from gateway.broker.queue import CLIENT_INDIVIDUAL, Queue, Subscription

if TYPE_CHECKING:
    from gateway.amqp.channel import Channel
    from gateway.amqp.reader import Command

GET_WAIT_S = 0.5  # how long a get waits for the messages another node said it moves here


def give(channel: Channel, queue: Queue, message: Message, no_ack: bool) -> None:
    """basic.get-ok with ``message``, taken off ``queue`` for this get."""
    tag = next(channel._tags)
    if no_ack:
        channel.broker.consumed(queue, message)
        queue.acknowledged([message], channel.broker.seconds())
    else:
        channel.unacked[tag] = (queue, message, None)
        channel._gets += 1
    exchange, routing_key = route_of(message)
    frames = [encode_method(channel.number, "basic.get_ok", delivery_tag=tag, redelivered=message.redelivered,
                            exchange=exchange, routing_key=routing_key, message_count=len(queue))]
    properties = props.to_properties(message.headers, message.persistent, message.priority)
    frames += encode_content(channel.number, properties, message.body, channel.connection.frame_max)
    channel.connection.writeSequence(frames)


def give_next(channel: Channel, queue: Queue, no_ack: bool) -> bool:
    """basic.get-ok with the next message waiting in ``queue``; False: none waits."""
    taken = queue.take(1)
    if not taken:
        return False
    message = taken[0]
    message.deliveries += 1
    if message.traced and channel.broker.tracer is not None:  # a GetWaiter's is recorded as its session's delivery
        channel.broker.tracer.got(channel.session, queue, message, no_ack)
    give(channel, queue, message, no_ack)
    return True


def get_from_mesh(channel: Channel, mesh: MeshQueues, name: str, no_ack: bool, command: Command) -> defer.Deferred:
    """Fires once the get is answered (get-ok or get-empty), or fails with the 404 of a
    queue no node has."""

    def pulled(result: Pulled) -> defer.Deferred | None:
        if not channel.open:
            return None
        broker = channel.broker
        queue = broker.queues.get(name)
        if queue is None:
            if not result.known:
                raise channel._error(spec.NOT_FOUND, f"no queue {name!r} on any node", command)
            queue = broker.queue(name)  # where the pulled messages arrive
        if give_next(channel, queue, no_ack):  # they came before the answer, or a client sent one here meanwhile
            return None
        if not result.moved:
            channel._reply("basic.get_empty")
            return None
        return GetWaiter(channel, queue, no_ack).answered

    return mesh.pull(channel.connection.vhost, name).addCallback(pulled)


class GetWaiter:
    """A consumer of ``queue`` for one message, in a session of its own (so the
    channel's delivery path, the busiest there is, has no case for it)."""

    def __init__(self, channel: Channel, queue: Queue, no_ack: bool) -> None:
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack
        self.answered: defer.Deferred[None] = defer.Deferred()
        self.session = channel.broker.open_session(self, channel.session.name + "-get")
        self.session.principal = channel.session.principal
        sub = self._sub = Subscription(self.session, "get", queue, CLIENT_INDIVIDUAL, 1, None)
        self.session.subscriptions[sub.id] = sub
        self._timer = channel.connection.clock.callLater(GET_WAIT_S, self._gave_up)
        queue.add_consumer(sub)
        queue.dispatch()

    def deliver(self, subscription: Subscription, message: Message) -> None:
        subscription.inflight.pop(message.id, None)  # the get's now, not the waiter session's
        self._stop()
        channel = self.channel
        if channel.open:
            give(channel, self.queue, message, self.no_ack)
        else:  # the channel went meanwhile: back where it was
            channel.broker.requeue(self.queue, [message], "channel closed")
        self.answered.callback(None)

    def _gave_up(self) -> None:
        self._stop()
        if self.channel.open:
            self.channel._reply("basic.get_empty")
        self.answered.callback(None)

    def _stop(self) -> None:
        if self._timer.active():
            self._timer.cancel()
        self._sub.prefetch = 0  # one message only; the queue may be mid-dispatch: the session goes after
        self.channel.connection.clock.callLater(0, self.session.close)
