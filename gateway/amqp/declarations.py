"""exchange.* and queue.* for gateway.amqp.channel: what a client declares, binds,
purges and deletes; in a mesh, a queue's passive declare, purge and delete answer
for every node's part (gateway.amqp.mesh_queues). Each handler here is
one of Channel's methods (its class body lists them): it takes the channel the method
came on and uses that channel's helpers (_reply, _error, _allowed), as the handlers
written in the class do."""

from __future__ import annotations

import secrets
from types import SimpleNamespace
from typing import TYPE_CHECKING

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gateway.amqp import spec
from gateway.amqp.mesh_queues import NOWHERE_ELSE, Emptied, MeshQueues, MeshUnanswered, QueueElsewhere
from gateway.amqp.spec import AmqpError
from gateway.broker.exchanges import PREDECLARED
from model.amqp_arguments import ARGUMENT_SETTINGS, argument_problem
from model.definitions import BindingSpec, ExchangeSpec, QueueSettings

if TYPE_CHECKING:
    from gateway.amqp.channel import Channel
    from gateway.amqp.reader import Command


def method_exchange_declare(channel: Channel, args, command: Command) -> None:
    name = args.exchange
    current = channel.broker.exchanges.exchanges.get(name)
    if args.passive:
        if current is None:
            raise channel._error(spec.NOT_FOUND, f"no exchange {name!r}", command)
    else:
        if name.startswith("amq.") and name not in PREDECLARED:
            raise channel._error(spec.ACCESS_REFUSED, f"exchange names starting amq. are reserved ({name!r})",
                                 command)
        if args.type not in ("direct", "fanout", "topic", "headers"):
            raise AmqpError(spec.COMMAND_INVALID, f"unknown exchange type {args.type!r}", 0,
                            command.spec.class_id, command.spec.method_id)
        wanted = ExchangeSpec(type=args.type, durable=args.durable, auto_delete=args.auto_delete,
                              internal=args.internal, arguments=args.arguments or {})
        if current is not None and current.spec.type != wanted.type:
            raise channel._error(spec.PRECONDITION_FAILED, f"exchange {name!r} is of type {current.spec.type}, "
                                                           f"not {wanted.type}", command)
        if current is None:
            channel._allowed("admin", "/exchange/" + name, command)
            channel.broker.declare_exchange(name, wanted)
        else:  # RabbitMQ asks for configure on every declare, the destination map only for a new exchange
            channel._permitted(command)
    if not args.nowait:
        channel._reply("exchange.declare_ok")


def method_exchange_delete(channel: Channel, args, command: Command) -> None:
    name = args.exchange
    if name in PREDECLARED:
        raise channel._error(spec.ACCESS_REFUSED, f"exchange {name or 'the default'!r} cannot be deleted", command)
    exchange = channel.broker.exchanges.exchanges.get(name)
    if exchange is not None:
        if args.if_unused and exchange.bindings:
            raise channel._error(spec.PRECONDITION_FAILED, f"exchange {name!r} has bindings", command)
        channel._allowed("admin", "/exchange/" + name, command)
        channel.broker.delete_exchange(name)
    if not args.nowait:
        channel._reply("exchange.delete_ok")


def method_exchange_bind(channel: Channel, args, command: Command) -> None:
    _exchange_binding(channel, args, command, bind=True)
    if not args.nowait:
        channel._reply("exchange.bind_ok")


def method_exchange_unbind(channel: Channel, args, command: Command) -> None:
    _exchange_binding(channel, args, command, bind=False)
    if not args.nowait:
        channel._reply("exchange.unbind_ok")


def _exchange_binding(channel: Channel, args, command: Command, bind: bool) -> None:
    exchanges = channel.broker.exchanges.exchanges
    for name in (args.source, args.destination):
        if name not in exchanges:
            raise channel._error(spec.NOT_FOUND, f"no exchange {name!r}", command)
    channel._allowed("admin", "/exchange/" + args.destination, command)
    binding = BindingSpec(source=args.source, destination=args.destination, destination_kind="exchange",
                          routing_key=args.routing_key, arguments=args.arguments or {})
    (channel.broker.bind if bind else channel.broker.unbind)(binding)


def method_queue_declare(channel: Channel, args, command: Command) -> Deferred | None:
    name = args.queue or "amq.gen-" + secrets.token_urlsafe(16)
    broker = channel.broker
    if name in broker.services:
        raise channel._error(spec.ACCESS_REFUSED, f"{name!r} is a service address, not a queue", command)
    channel._not_exclusive_elsewhere(name, command)
    queue = broker.queues.get(name)
    if args.passive:
        mesh = channel.connection.factory.mesh_queues
        if mesh is not None:
            return _passive_across_mesh(channel, mesh, name, args.nowait, command)
        if queue is None:
            raise channel._error(spec.NOT_FOUND, f"no queue {name!r}", command)
    else:
        channel._allowed("read", "/queue/" + name, command,
                         SimpleNamespace(queue=name, arguments=args.arguments))  # a server-named queue's name
        if queue is None:
            connection = channel.connection
            refusal = connection.factory.limits.queue_refusal(connection.vhost, len(broker.queues))
            if refusal is not None:
                raise channel._error(spec.PRECONDITION_FAILED, refusal, command)
        settings = _settings(args.arguments or {}, command, channel)
        current = broker.queue_settings.get(name)
        if current is not None and (current.amqp_arguments or {}) != (settings.amqp_arguments or {}):
            raise channel._error(spec.PRECONDITION_FAILED,
                                 f"queue {name!r} was declared with arguments {current.amqp_arguments or {}}, "
                                 f"not {settings.amqp_arguments or {}}", command)
        if current is None:
            broker.define_queue(name, settings)
        queue = broker.queues.get(name) or broker.queue(name)
        lifetimes = channel.connection.lifetimes
        if args.exclusive:
            lifetimes.exclusive[name] = channel.connection
        if args.auto_delete:
            lifetimes.auto_delete.add(name)
        expires = (args.arguments or {}).get("x-expires")  # checked by _settings
        if expires is not None:
            lifetimes.expire_unused(name, expires)
    if not args.nowait:
        channel._reply("queue.declare_ok", queue=name, message_count=len(queue), consumer_count=len(queue.consumers))
    return None


def _passive_across_mesh(channel: Channel, mesh: MeshQueues, name: str, nowait: bool,
                         command: Command) -> Deferred:
    """A queue exists if any node has it; its counts are the whole mesh's."""

    def answer(elsewhere: QueueElsewhere) -> None:
        queue = channel.broker.queues.get(name)
        if queue is None and not elsewhere.known:
            raise channel._error(spec.NOT_FOUND, f"no queue {name!r} on any node", command)
        if not nowait and channel.open:
            here, consumers = (len(queue), len(queue.consumers)) if queue is not None else (0, 0)
            channel._reply("queue.declare_ok", queue=name, message_count=here + elsewhere.ready,
                           consumer_count=consumers + elsewhere.consumers)

    return mesh.elsewhere(channel.connection.vhost, name).addCallback(answer)


def method_queue_bind(channel: Channel, args, command: Command) -> None:
    binding = _queue_binding(channel, args, command)
    channel.broker.bind(binding)
    if not args.nowait:
        channel._reply("queue.bind_ok")


def method_queue_unbind(channel: Channel, args, command: Command) -> None:
    channel.broker.unbind(_queue_binding(channel, args, command))
    channel._reply("queue.unbind_ok")


def _queue_binding(channel: Channel, args, command: Command) -> BindingSpec:
    if args.exchange not in channel.broker.exchanges.exchanges:
        raise channel._error(spec.NOT_FOUND, f"no exchange {args.exchange!r}", command)
    if args.exchange == "":
        raise channel._error(spec.ACCESS_REFUSED, "the default exchange takes no bindings", command)
    if args.queue not in channel.broker.queues:
        raise channel._error(spec.NOT_FOUND, f"no queue {args.queue!r}", command)
    channel._allowed("write", "/queue/" + args.queue, command)
    return BindingSpec(source=args.exchange, destination=args.queue, routing_key=args.routing_key,
                       arguments=args.arguments or {})


def method_queue_purge(channel: Channel, args, command: Command) -> Deferred | None:
    name = args.queue
    mesh = channel.connection.factory.mesh_queues
    if mesh is None:
        channel._existing_queue(name, command)  # 404 unless the node has it
    channel._allowed("read", "/queue/" + name, command)
    if mesh is None:
        _reply_purged(channel, _purge_here(channel, name), args.nowait)
        return None

    def purged_elsewhere(elsewhere: Emptied) -> None:
        here = _purge_here(channel, name)
        if here is None and not elsewhere.known:
            raise channel._error(spec.NOT_FOUND, f"no queue {name!r} on any node", command)
        if channel.open:
            _reply_purged(channel, (here or 0) + elsewhere.count, args.nowait)

    return mesh.purge(channel.connection.vhost, name, _user(channel)).addCallbacks(
        purged_elsewhere, _not_everywhere, errbackArgs=(channel, name, "purged", command))


def _purge_here(channel: Channel, name: str) -> int | None:
    """Drop what waits in this node's part of the queue; None: the node has no such queue."""
    queue = channel.broker.queues.get(name)
    return None if queue is None else channel.broker.purge(queue)


def _reply_purged(channel: Channel, count: int | None, nowait: bool) -> None:
    if not nowait:
        channel._reply("queue.purge_ok", message_count=count or 0)


def method_queue_delete(channel: Channel, args, command: Command) -> Deferred | None:
    """The queue goes, its consumers cancelled (they hear basic.cancel, as RabbitMQ's
    do); in a mesh, on every node, if-empty and if-unused counting every node's part."""
    name = args.queue
    mesh = channel.connection.factory.mesh_queues
    if mesh is None:
        queue = channel.broker.queues.get(name)
        count = 0
        if queue is not None:
            _refuse_delete(channel, name, args, len(queue), len(queue.consumers), command)
            channel._allowed("admin", "/queue/" + name, command)
            count = _delete_here(channel, name)
        _reply_deleted(channel, count, args.nowait)
        return None
    channel._allowed("admin", "/queue/" + name, command)

    def delete(elsewhere: QueueElsewhere) -> Deferred:
        queue = channel.broker.queues.get(name)
        here = (len(queue), len(queue.consumers)) if queue is not None else (0, 0)
        _refuse_delete(channel, name, args, here[0] + elsewhere.ready, here[1] + elsewhere.consumers, command)
        count = _delete_here(channel, name)
        return mesh.delete(channel.connection.vhost, name, _user(channel)).addCallback(
            lambda emptied: _reply_deleted(channel, count + emptied.count, args.nowait))

    checked = mesh.elsewhere(channel.connection.vhost, name) if args.if_empty or args.if_unused else \
        defer.succeed(NOWHERE_ELSE)
    return checked.addCallback(delete).addErrback(_not_everywhere, channel, name, "deleted", command)


def _refuse_delete(channel: Channel, name: str, args, ready: int, consumers: int, command: Command) -> None:
    if args.if_unused and consumers:
        raise channel._error(spec.PRECONDITION_FAILED, f"queue {name!r} has {consumers} consumer(s)", command)
    if args.if_empty and ready:
        raise channel._error(spec.PRECONDITION_FAILED, f"queue {name!r} is not empty: {ready} message(s)", command)


def _delete_here(channel: Channel, name: str) -> int:
    """The ready messages that went with the node's part (RabbitMQ's count)."""
    broker = channel.broker
    queue = broker.queues.get(name)
    count = 0
    if queue is not None:
        count = len(queue)
        broker.cancel_consumers(queue)
    broker.delete_queue(name)
    return count


def _reply_deleted(channel: Channel, count: int, nowait: bool) -> None:
    if not nowait and channel.open:
        channel._reply("queue.delete_ok", message_count=count)


def _not_everywhere(failure: Failure, channel: Channel, name: str, done: str, command: Command) -> None:
    failure.trap(MeshUnanswered)
    raise channel._error(spec.PRECONDITION_FAILED, f"queue {name!r} was not {done} on every node: "
                                                   f"{failure.getErrorMessage()}", command)


def _user(channel: Channel) -> str:
    """Who an action on other nodes is recorded for there."""
    return f"amqp user {getattr(channel.connection.principal, 'name', '?')}"


def _settings(arguments: dict, command: Command, channel: Channel) -> QueueSettings:
    problem = argument_problem(arguments)
    if problem is not None:
        raise channel._error(spec.PRECONDITION_FAILED, problem, command)
    values = {field: arguments[key] for key, field in ARGUMENT_SETTINGS.items() if key in arguments}
    if "message_ttl_ms" in values:
        values["message_ttl_ms"] = values["message_ttl_ms"] or None
    return QueueSettings(**values, amqp_arguments=dict(arguments) or None)
