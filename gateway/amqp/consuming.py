"""The consuming side of an AMQP channel, for gateway.amqp.channel: basic.qos (per
consumer, and RabbitMQ's channel-wide global prefetch), basic.consume and
basic.cancel, the deliveries the core hands the channel, basic.get, and how the
client settles them (ack, nack, reject, recover). Publishing stays in the channel's
module. Each function here is one of Channel's methods (its class body lists them),
as gateway.amqp.declarations' are: ``deliver``, which the core calls per message, is
one method call on the channel as before, and the state it keeps (unacked, the
consumers' windows) is the channel's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred

from gateway.amqp import gets, spec
from gateway.amqp import properties as props
from gateway.amqp.codec import (
    encode_consumer,
    encode_delivery,
    encode_properties,
    encode_route,
)
from gateway.amqp.properties import route_of
from gateway.amqp.spec import AmqpError
from gateway.broker.message import QUEUE, Message
from gateway.broker.queue import AUTO, CLIENT_INDIVIDUAL, Queue, Subscription

if TYPE_CHECKING:
    from gateway.amqp.channel import Channel
    from gateway.amqp.reader import Command

UNLIMITED = 2 ** 31  # a prefetch of 0 means no limit


def method_basic_qos(channel: Channel, args, command: Command) -> None:
    if not args.global_:
        channel.prefetch = args.prefetch_count or UNLIMITED
        channel._reply("basic.qos_ok")
        return
    channel.global_prefetch = args.prefetch_count
    channel._reply("basic.qos_ok")  # before any delivery the new limit lets through
    if channel.global_prefetch and len(channel.unacked) - channel._gets >= channel.global_prefetch:
        if not channel._full:
            _close_windows(channel)
    elif channel._full:
        _reopen(channel)


def _close_windows(channel: Channel, attaching: Subscription | None = None) -> None:
    """The channel holds global_prefetch unacked deliveries: none of its consumers takes more
    (``attaching``: one that filled it while it attached, before it is in channel.consumers)."""
    channel._full = True
    for sub in channel.consumers.values():
        sub.prefetch = 0  # what the mesh does to a subscription that must take nothing new
    if attaching is not None:
        attaching.prefetch = 0


def _room_made(channel: Channel) -> None:
    """Acks, nacks, rejects, a recover or a consumer gone took deliveries off a full channel."""
    if not channel.global_prefetch or len(channel.unacked) - channel._gets < channel.global_prefetch:
        _reopen(channel)


def _reopen(channel: Channel) -> None:
    """The consumers' own windows come back, and the channel's queues fill the room there is,
    taking turns: the one that filled it last time goes last."""
    channel._full = False
    windows = channel._windows
    queues: list[Queue] = []
    for tag, sub in channel.consumers.items():
        sub.prefetch = windows[tag]
        if sub.ack_mode != AUTO and sub.queue not in queues:
            queues.append(sub.queue)
    turn = channel._turn
    for step in range(len(queues)):
        queues[(turn + step) % len(queues)].dispatch()
        if channel._full:
            channel._turn = turn + step + 1
            return


def method_basic_consume(channel: Channel, args, command: Command) -> None:
    queue = channel._existing_queue(args.queue, command)
    channel._allowed("read", "/queue/" + args.queue, command)
    tag = args.consumer_tag or f"amq.ctag-{channel.connection.name}-{channel.number}-{next(channel._consumer_tags)}"
    if tag in channel.consumers:
        raise AmqpError(spec.NOT_ALLOWED, f"consumer tag {tag!r} is already in use on this channel", 0,
                        command.spec.class_id, command.spec.method_id)
    exclusive = channel.connection.lifetimes.exclusive_consumers
    holder = exclusive.get(args.queue)
    if holder is not None and holder.queue is queue and holder in queue.consumers:
        raise channel._error(spec.ACCESS_REFUSED, f"queue {args.queue!r} has an exclusive consumer", command)
    if args.exclusive and queue.consumers:
        raise channel._error(spec.ACCESS_REFUSED, f"queue {args.queue!r} has consumers: none can be exclusive",
                             command)
    # consume_ok goes first: a delivery may follow at once.
    if not args.nowait:
        channel._reply("basic.consume_ok", consumer_tag=tag)
    session = channel.session
    ack_mode = AUTO if args.no_ack else CLIENT_INDIVIDUAL
    consumer = encode_consumer(tag)  # the subscription's tag: what its deliveries start with
    if channel._full and ack_mode != AUTO:
        # The channel-wide limit is reached: the consumer starts with its window closed
        # (the session takes nothing while it attaches, the queue dispatching as it does).
        writable, session.writable = session.writable, False
        try:
            sub = session.subscribe(tag, QUEUE, args.queue, ack_mode, channel.prefetch, None, tag=consumer)
        finally:
            session.writable = writable
        sub.prefetch = 0
    else:
        sub = session.subscribe(tag, QUEUE, args.queue, ack_mode, channel.prefetch, None, tag=consumer)
    channel.consumers[tag] = sub
    channel._windows[tag] = channel.prefetch
    if args.exclusive:
        exclusive[args.queue] = sub  # until it leaves the queue's consumers


def method_basic_cancel(channel: Channel, args, command: Command) -> None:
    sub = channel.consumers.pop(args.consumer_tag, None)
    if sub is not None:
        del channel._windows[sub.id]
        # No more deliveries; what it holds stays unacked, to be acked or nacked still
        # (and counted against a channel-wide limit until it is, as in RabbitMQ).
        del channel.session.subscriptions[sub.id]
        channel.broker.unsubscribe(sub, [])
        if sub.inflight:
            channel._cancelled.append(sub)
        channel.connection.lifetimes.consumer_gone(sub.queue.name)
    if not args.nowait:
        channel._reply("basic.cancel_ok", consumer_tag=args.consumer_tag)


def cancel_from_server(channel: Channel, sub: Subscription) -> None:
    """The queue went (deleted): the client hears basic.cancel."""
    if channel.consumers.pop(sub.id, None) is not None:
        del channel._windows[sub.id]
        _forget_consumer(channel, sub)
        channel.session.unsubscribe(sub.id)
        channel._reply("basic.cancel", consumer_tag=sub.id, nowait=True)
        if channel._full:
            _room_made(channel)


def _forget_consumer(channel: Channel, sub: Subscription) -> None:
    for tag, (_, _, held_by) in list(channel.unacked.items()):
        if held_by is sub:
            del channel.unacked[tag]


def deliver(channel: Channel, sub: Subscription, message: Message) -> None:
    """The core hands a message to one of this channel's consumers."""
    tag = next(channel._tags)
    if sub.ack_mode != AUTO:
        unacked = channel.unacked
        unacked[tag] = (sub.queue, message, sub)
        if channel.global_prefetch and len(unacked) - channel._gets >= channel.global_prefetch:
            _close_windows(channel, sub)
    encoded = message.encoded.get("amqp")
    if encoded is None:  # shared by the copies a fan-out made, and by every redelivery
        encoded = message.encoded["amqp"] = (
            encode_route(*route_of(message)),
            encode_properties(props.to_properties(message.headers, message.persistent, message.priority)))
    connection = channel.connection
    # sub.tag: the consumer's part of basic.deliver, encoded at basic.consume
    connection.write_soon(encode_delivery(channel.number, sub.tag, tag, message.redelivered, encoded[0],
                                          encoded[1], message.body, connection.frame_max))


def method_basic_get(channel: Channel, args, command: Command) -> Deferred | None:
    name = args.queue
    mesh = channel.connection.factory.mesh_queues
    queue = channel.broker.queues.get(name)
    if queue is None and mesh is None:
        raise channel._error(spec.NOT_FOUND, f"no queue {name!r}", command)
    channel._allowed("read", "/queue/" + name, command)
    if queue is not None and gets.give_next(channel, queue, args.no_ack):
        return None
    if mesh is not None:  # none here: another node may hold one (gateway.amqp.gets)
        return gets.get_from_mesh(channel, mesh, name, args.no_ack, command)
    channel._reply("basic.get_empty")
    return None


def method_basic_ack(channel: Channel, args, command: Command) -> None:
    consumed = channel.broker.consumed
    now = channel.broker.seconds()
    for queue, messages in _taken_off(channel, _settled(channel, args.delivery_tag, args.multiple, command)).items():
        for message in messages:
            consumed(queue, message)
        queue.acknowledged(messages, now)
        queue.dispatch()
    if channel._full:
        _room_made(channel)


def method_basic_nack(channel: Channel, args, command: Command) -> None:
    _refuse(channel, _settled(channel, args.delivery_tag, args.multiple, command), args.requeue, "nack")


def method_basic_reject(channel: Channel, args, command: Command) -> None:
    _refuse(channel, _settled(channel, args.delivery_tag, False, command), args.requeue, "reject")


def method_basic_recover(channel: Channel, args, command: Command) -> None:
    _recover(channel)
    channel._reply("basic.recover_ok")


def method_basic_recover_async(channel: Channel, args, command: Command) -> None:
    _recover(channel)


def _recover(channel: Channel) -> None:
    # Taken off first: what the requeues dispatch to this channel again is unacked anew.
    settled = list(channel.unacked.items())
    channel.unacked.clear()
    _refuse(channel, settled, True, "recover")


def _settled(channel: Channel, delivery_tag: int, multiple: bool, command: Command) -> list:
    unacked = channel.unacked
    if multiple:
        if delivery_tag:
            tags = []
            for tag in unacked:  # in delivery order: the ones up to delivery_tag come first
                if tag > delivery_tag:
                    break
                tags.append(tag)
        else:
            tags = list(unacked)
    elif delivery_tag in unacked:
        tags = [delivery_tag]
    else:
        raise channel._error(spec.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}", command)
    return [(tag, unacked.pop(tag)) for tag in tags]


def _taken_off(channel: Channel, settled: list) -> dict[Queue, list[Message]]:
    """The settled deliveries still out, by queue in delivery order, taken off their
    consumer's window (or the channel's count of gets)."""
    by_queue: dict[Queue, list[Message]] = {}
    for _, (queue, message, sub) in settled:
        if sub is not None:
            if sub.inflight.pop(message.id, None) is None:
                continue  # returned already (the consumer's queue went)
        else:
            channel._gets -= 1
        by_queue.setdefault(queue, []).append(message)
    return by_queue


def _refuse(channel: Channel, settled: list, requeue: bool, reason: str) -> None:
    """nack, reject or recover (``reason``): back to the queue, or dead-lettered."""
    broker = channel.broker
    for queue, messages in _taken_off(channel, settled).items():
        if requeue:
            broker.requeue(queue, messages, reason)  # all back in their places before any goes out again
        else:
            for message in messages:
                broker.dead_letter(queue, message, "rejected")
        queue.dispatch()  # to the room they made (a requeue past max attempts dispatches nothing itself)
    if channel._full:
        _room_made(channel)
