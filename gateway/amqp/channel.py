"""An AMQP channel on the broker core: one core session per channel, one handler
per method (``method_basic_publish`` …), deliveries numbered by delivery tag,
publisher confirms (gateway.amqp.confirms) sent once what they confirm is durable.
Declaring, binding and purging exchanges and queues is gateway.amqp.declarations'."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import TYPE_CHECKING, cast

from gateway.amqp import declarations, spec
from gateway.amqp import properties as props
from gateway.amqp.codec import (
    encode_consumer,
    encode_content,
    encode_delivery,
    encode_method,
    encode_properties,
    encode_route,
)
from gateway.amqp.confirms import Confirms
from gateway.amqp.properties import route_of
from gateway.amqp.reader import Command
from gateway.amqp.spec import AmqpError
from gateway.auth import ANONYMOUS
from gateway.broker.errors import BrokerError
from gateway.broker.exchanges import TOPIC_EXCHANGE
from gateway.broker.message import QUEUE, Message
from gateway.broker.queue import AUTO, CLIENT_INDIVIDUAL, Queue, Subscription
from gateway.permissions import amqp_needs
from model.mesh import ChannelSummary

if TYPE_CHECKING:
    from gateway.amqp.protocol import AmqpProtocol

UNLIMITED = 2 ** 31  # a prefetch of 0 means no limit


class Channel:
    def __init__(self, connection: AmqpProtocol, number: int) -> None:
        self.connection = connection
        self.number = number
        broker = connection.broker  # its vhost's
        self.broker = broker
        self.session = broker.open_session(self, f"{connection.name}-ch{number}")
        self.session.principal = connection.principal
        self.session.connection = connection.info
        self.consumers: dict[str, Subscription] = {}
        # Cancelled consumers whose deliveries are still unacknowledged: AMQP lets the
        # client ack (or nack) them after basic.cancel.
        self._cancelled: list[Subscription] = []
        self.prefetch = UNLIMITED  # basic.qos (global false): per consumer, for consumers made from now on
        # basic.qos global true (RabbitMQ's meaning): the channel's consumers share this many unacked
        # deliveries (0: no limit). When they hold that many, the channel is full: its consumers'
        # windows in the core are closed (prefetch 0) until acks make room.
        self.global_prefetch = 0
        self._full = False
        self._windows: dict[str, int] = {}  # consumer tag -> its own prefetch, what its window reopens to
        self._gets = 0  # unacked basic.get deliveries: in self.unacked, not counted against global_prefetch
        self._turn = 0  # which of the channel's queues fills the room first when the channel reopens
        self.unacked: OrderedDict[int, tuple[Queue, Message, Subscription | None]] = OrderedDict()
        self._tags = itertools.count(1)
        self._consumer_tags = itertools.count(1)
        self.confirms: Confirms | None = None  # from confirm.select on
        self._stored = connection.factory.limits.stored(connection.vhost)  # its vhost's max_messages, if any
        self.closing = False
        self.transactional = False
        self._tx: list[tuple] = []
        self._handlers: dict = {}  # method spec -> this channel's handler

    # -- dispatch -------------------------------------------------------------------------

    def command(self, command: Command) -> None:
        if self.closing:
            # After our channel.close only its close_ok counts.
            if command.spec.name == "channel.close_ok":
                self._finish()
            elif command.spec.name == "channel.close":
                self.connection.write(encode_method(self.number, "channel.close_ok"))
            return
        handler = self._handlers.get(command.spec)
        if handler is None:
            handler = getattr(self, command.spec.handler, None)
            if handler is None:
                raise AmqpError(spec.COMMAND_INVALID, f"a client does not send {command.spec.name}", 0,
                                command.spec.class_id, command.spec.method_id)
            self._handlers[command.spec] = handler
        try:
            handler(command.args, command)
        except BrokerError as error:
            raise AmqpError(spec.PRECONDITION_FAILED, str(error), self.number, command.spec.class_id,
                            command.spec.method_id) from None

    def _error(self, code: int, text: str, command: Command) -> AmqpError:
        return AmqpError(code, text, self.number, command.spec.class_id, command.spec.method_id)

    def _reply(self, name: str, **values) -> None:
        self.connection.write(encode_method(self.number, name, **values))

    def _allowed(self, action: str, destination: str, command: Command, arguments: object = None) -> None:
        """Both authorization maps: the destination map's ``action`` on ``destination``, and
        what the vhost map asks of the method (its ``arguments``, the command's by default)."""
        access = self.connection.factory.access
        if access.enabled:  # checked first: a node without either map does nothing more per message
            principal = self.connection.principal or ANONYMOUS  # set before any channel opens
            if not access.authorizer.allowed(principal, action, destination):
                raise self._error(spec.ACCESS_REFUSED, f"{action} on {destination} is not allowed for "
                                                       f"{principal.name}", command)
            self._permitted(command, arguments)

    def _permitted(self, command: Command, arguments: object = None) -> None:
        """The vhost map alone (RabbitMQ's configure/write/read): 403 with RabbitMQ's words
        naming the first resource refused."""
        permissions = self.connection.factory.access.permissions
        if not permissions.enabled:
            return
        connection = self.connection
        principal = connection.principal or ANONYMOUS  # set before any channel opens
        args = command.args if arguments is None else arguments
        method = command.spec.name
        dead_letter_exchange = None
        if method == "queue.declare":
            named = (getattr(args, "arguments", None) or {}).get("x-dead-letter-exchange")
            dead_letter_exchange = named if isinstance(named, str) else None
        for need in amqp_needs(method, args, dead_letter_exchange=dead_letter_exchange):
            if not permissions.allowed(principal, connection.vhost, need.operation, need.name):
                raise self._error(spec.ACCESS_REFUSED, f"access to {need.kind} {need.name!r} in vhost "
                                                       f"{connection.vhost!r} refused for user {principal.name!r}",
                                  command)

    # -- channel --------------------------------------------------------------------------

    def method_channel_close(self, args, command: Command) -> None:
        self.connection.write(encode_method(self.number, "channel.close_ok"))
        self._finish()

    def method_channel_flow(self, args, command: Command) -> None:
        self.session.set_writable(args.active)
        self._reply("channel.flow_ok", active=args.active)

    def summary(self) -> ChannelSummary:
        """What the management model shows of this channel."""
        return ChannelSummary(number=self.number, consumers=len(self.consumers), unacked=len(self.unacked),
                              prefetch=0 if self.prefetch == UNLIMITED else self.prefetch,
                              global_prefetch=self.global_prefetch, confirm=self.confirms is not None,
                              transactional=self.transactional)

    def close_with(self, error: AmqpError) -> None:
        self.closing = True
        self.closed()
        self._reply("channel.close", reply_code=error.code, reply_text=error.text[:255], class_id=error.class_id,
                    method_id=error.method_id)

    def _finish(self) -> None:
        self.closed()
        self.connection.channel_closed(self.number)

    def closed(self) -> None:
        """The channel or its connection went: unacked messages return, consumers go."""
        if self.session.closed:
            return
        by_queue: dict[Queue, list[Message]] = {}
        for queue, message, sub in self.unacked.values():
            if sub is None:  # a basic.get
                by_queue.setdefault(queue, []).append(message)
        self.unacked.clear()
        queues = {sub.queue.name for sub in self.consumers.values()}
        self.consumers.clear()
        for sub in self._cancelled:
            if sub.inflight:
                by_queue.setdefault(sub.queue, []).extend(sub.inflight.values())
                sub.inflight.clear()
        self._cancelled.clear()
        self.session.close()
        for queue, messages in by_queue.items():
            self.broker.requeue(queue, messages)
        for name in queues:
            self.connection.lifetimes.consumer_gone(name)

    # -- exchanges and queues ---------------------------------------------------------------

    method_exchange_declare = declarations.method_exchange_declare
    method_exchange_delete = declarations.method_exchange_delete
    method_exchange_bind = declarations.method_exchange_bind
    method_exchange_unbind = declarations.method_exchange_unbind
    method_queue_declare = declarations.method_queue_declare
    method_queue_bind = declarations.method_queue_bind
    method_queue_unbind = declarations.method_queue_unbind
    method_queue_purge = declarations.method_queue_purge

    def method_queue_delete(self, args, command: Command) -> None:
        queue = self.broker.queues.get(args.queue)
        count = 0
        if queue is not None:
            if args.if_unused and queue.consumers:
                raise self._error(spec.PRECONDITION_FAILED, f"queue {args.queue!r} has consumers", command)
            if args.if_empty and len(queue):
                raise self._error(spec.PRECONDITION_FAILED, f"queue {args.queue!r} is not empty", command)
            self._allowed("admin", "/queue/" + args.queue, command)
            count = len(queue)
            for sub in list(queue.consumers):  # cancelled, as RabbitMQ does
                channel = sub.session.sink
                if isinstance(channel, Channel):
                    channel.cancel_from_server(sub)
            self.broker.delete_queue(args.queue)
        if not args.nowait:
            self._reply("queue.delete_ok", message_count=count)

    def _existing_queue(self, name: str, command: Command) -> Queue:
        queue = self.broker.queues.get(name)
        if queue is None:
            raise self._error(spec.NOT_FOUND, f"no queue {name!r}", command)
        self._not_exclusive_elsewhere(name, command)
        return queue

    def _not_exclusive_elsewhere(self, name: str, command: Command) -> None:
        owner = self.connection.lifetimes.exclusive.get(name)
        if owner is not None and owner is not self.connection:
            raise self._error(spec.RESOURCE_LOCKED, f"queue {name!r} is exclusive to another connection", command)

    # -- consuming ------------------------------------------------------------------------

    def method_basic_qos(self, args, command: Command) -> None:
        if not args.global_:
            self.prefetch = args.prefetch_count or UNLIMITED
            self._reply("basic.qos_ok")
            return
        self.global_prefetch = args.prefetch_count
        self._reply("basic.qos_ok")  # before any delivery the new limit lets through
        if self.global_prefetch and len(self.unacked) - self._gets >= self.global_prefetch:
            if not self._full:
                self._close_windows()
        elif self._full:
            self._reopen()

    def _close_windows(self, attaching: Subscription | None = None) -> None:
        """The channel holds global_prefetch unacked deliveries: none of its consumers takes more
        (``attaching``: one that filled it while it attached, before it is in self.consumers)."""
        self._full = True
        for sub in self.consumers.values():
            sub.prefetch = 0  # what the mesh does to a subscription that must take nothing new
        if attaching is not None:
            attaching.prefetch = 0

    def _room_made(self) -> None:
        """Acks, nacks, rejects, a recover or a consumer gone took deliveries off a full channel."""
        if not self.global_prefetch or len(self.unacked) - self._gets < self.global_prefetch:
            self._reopen()

    def _reopen(self) -> None:
        """The consumers' own windows come back, and the channel's queues fill the room there is,
        taking turns: the one that filled it last time goes last."""
        self._full = False
        windows = self._windows
        queues: list[Queue] = []
        for tag, sub in self.consumers.items():
            sub.prefetch = windows[tag]
            if sub.ack_mode != AUTO and sub.queue not in queues:
                queues.append(sub.queue)
        turn = self._turn
        for step in range(len(queues)):
            queues[(turn + step) % len(queues)].dispatch()
            if self._full:
                self._turn = turn + step + 1
                return

    def method_basic_consume(self, args, command: Command) -> None:
        queue = self._existing_queue(args.queue, command)
        self._allowed("read", "/queue/" + args.queue, command)
        tag = args.consumer_tag or f"amq.ctag-{self.connection.name}-{self.number}-{next(self._consumer_tags)}"
        if tag in self.consumers:
            raise AmqpError(spec.NOT_ALLOWED, f"consumer tag {tag!r} is already in use on this channel", 0,
                            command.spec.class_id, command.spec.method_id)
        exclusive = self.connection.lifetimes.exclusive_consumers
        holder = exclusive.get(args.queue)
        if holder is not None and holder.queue is queue and holder in queue.consumers:
            raise self._error(spec.ACCESS_REFUSED, f"queue {args.queue!r} has an exclusive consumer", command)
        if args.exclusive and queue.consumers:
            raise self._error(spec.ACCESS_REFUSED, f"queue {args.queue!r} has consumers: none can be exclusive",
                              command)
        # consume_ok goes first: a delivery may follow at once.
        if not args.nowait:
            self._reply("basic.consume_ok", consumer_tag=tag)
        session = self.session
        ack_mode = AUTO if args.no_ack else CLIENT_INDIVIDUAL
        consumer = encode_consumer(tag)  # the subscription's tag: what its deliveries start with
        if self._full and ack_mode != AUTO:
            # The channel-wide limit is reached: the consumer starts with its window closed
            # (the session takes nothing while it attaches, the queue dispatching as it does).
            writable, session.writable = session.writable, False
            try:
                sub = session.subscribe(tag, QUEUE, args.queue, ack_mode, self.prefetch, None, tag=consumer)
            finally:
                session.writable = writable
            sub.prefetch = 0
        else:
            sub = session.subscribe(tag, QUEUE, args.queue, ack_mode, self.prefetch, None, tag=consumer)
        self.consumers[tag] = sub
        self._windows[tag] = self.prefetch
        if args.exclusive:
            exclusive[args.queue] = sub  # until it leaves the queue's consumers

    def method_basic_cancel(self, args, command: Command) -> None:
        sub = self.consumers.pop(args.consumer_tag, None)
        if sub is not None:
            del self._windows[sub.id]
            # No more deliveries; what it holds stays unacked, to be acked or nacked still
            # (and counted against a channel-wide limit until it is, as in RabbitMQ).
            del self.session.subscriptions[sub.id]
            self.broker.unsubscribe(sub, [])
            if sub.inflight:
                self._cancelled.append(sub)
            self.connection.lifetimes.consumer_gone(sub.queue.name)
        if not args.nowait:
            self._reply("basic.cancel_ok", consumer_tag=args.consumer_tag)

    def cancel_from_server(self, sub: Subscription) -> None:
        """The queue went (deleted): the client hears basic.cancel."""
        if self.consumers.pop(sub.id, None) is not None:
            del self._windows[sub.id]
            self._forget_consumer(sub)
            self.session.unsubscribe(sub.id)
            self._reply("basic.cancel", consumer_tag=sub.id, nowait=True)
            if self._full:
                self._room_made()

    def _forget_consumer(self, sub: Subscription) -> None:
        for tag, (_, _, held_by) in list(self.unacked.items()):
            if held_by is sub:
                del self.unacked[tag]

    def deliver(self, sub: Subscription, message: Message) -> None:
        """The core hands a message to one of this channel's consumers."""
        tag = next(self._tags)
        if sub.ack_mode != AUTO:
            unacked = self.unacked
            unacked[tag] = (sub.queue, message, sub)
            if self.global_prefetch and len(unacked) - self._gets >= self.global_prefetch:
                self._close_windows(sub)
        encoded = message.encoded.get("amqp")
        if encoded is None:  # shared by the copies a fan-out made, and by every redelivery
            encoded = message.encoded["amqp"] = (
                encode_route(*route_of(message)),
                encode_properties(props.to_properties(message.headers, message.persistent, message.priority)))
        connection = self.connection
        # sub.tag: the consumer's part of basic.deliver, encoded at basic.consume
        connection.write_soon(encode_delivery(self.number, sub.tag, tag, message.redelivered, encoded[0],
                                              encoded[1], message.body, connection.frame_max))

    def method_basic_get(self, args, command: Command) -> None:
        queue = self._existing_queue(args.queue, command)
        self._allowed("read", "/queue/" + args.queue, command)
        taken = queue.take(1)
        if not taken:
            self._reply("basic.get_empty")
            return
        message = taken[0]
        message.deliveries += 1
        tag = next(self._tags)
        if args.no_ack:
            self.broker.consumed(queue, message)
            queue.acknowledged([message], self.broker.seconds())
        else:
            self.unacked[tag] = (queue, message, None)
            self._gets += 1
        exchange, routing_key = route_of(message)
        frames = [encode_method(self.number, "basic.get_ok", delivery_tag=tag, redelivered=message.redelivered,
                                exchange=exchange, routing_key=routing_key, message_count=len(queue))]
        properties = props.to_properties(message.headers, message.persistent, message.priority)
        frames += encode_content(self.number, properties, message.body, self.connection.frame_max)
        self.connection.writeSequence(frames)

    def method_basic_ack(self, args, command: Command) -> None:
        by_sub: dict[Subscription | None, list[Message]] = {}
        queues: dict[Subscription | None, Queue] = {}
        for _, (queue, message, sub) in self._settled(args.delivery_tag, args.multiple, command):
            if sub is not None:
                if sub.inflight.pop(message.id, None) is None:
                    continue  # returned already (the consumer's queue went)
            else:
                self._gets -= 1
            by_sub.setdefault(sub, []).append(message)
            queues[sub] = queue
        consumed = self.broker.consumed
        now = self.broker.seconds()
        for sub, messages in by_sub.items():
            queue = queues[sub]
            for message in messages:
                consumed(queue, message)
            queue.acknowledged(messages, now)
            queue.dispatch()
        if self._full:
            self._room_made()

    def method_basic_nack(self, args, command: Command) -> None:
        self._refuse(self._settled(args.delivery_tag, args.multiple, command), args.requeue)

    def method_basic_reject(self, args, command: Command) -> None:
        self._refuse(self._settled(args.delivery_tag, False, command), args.requeue)

    def method_basic_recover(self, args, command: Command) -> None:
        self._recover()
        self._reply("basic.recover_ok")

    def method_basic_recover_async(self, args, command: Command) -> None:
        self._recover()

    def _recover(self) -> None:
        # Taken off first: what the requeues dispatch to this channel again is unacked anew.
        settled = list(self.unacked.items())
        self.unacked.clear()
        self._refuse(settled, requeue=True)

    def _settled(self, delivery_tag: int, multiple: bool, command: Command) -> list:
        unacked = self.unacked
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
            raise self._error(spec.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}", command)
        return [(tag, unacked.pop(tag)) for tag in tags]

    def _refuse(self, settled: list, requeue: bool) -> None:
        for _, (queue, message, sub) in settled:
            if sub is not None:
                if message.id not in sub.inflight:
                    continue
                del sub.inflight[message.id]
            else:
                self._gets -= 1
            if requeue:
                self.broker.requeue(queue, [message])
            else:
                self.broker.dead_letter(queue, message, "rejected")
            queue.dispatch()
        if self._full:
            self._room_made()

    # -- publishing -----------------------------------------------------------------------

    def method_basic_publish(self, args, command: Command) -> None:
        broker = self.broker
        exchange, routing_key = args.exchange, args.routing_key
        if exchange and exchange not in broker.exchanges.exchanges:
            raise self._error(spec.NOT_FOUND, f"no exchange {exchange!r}", command)
        if exchange == TOPIC_EXCHANGE:
            self._allowed("write", "/topic/" + routing_key, command)
        elif exchange:
            self._allowed("write", "/exchange/" + exchange, command)
        else:
            self._allowed("write", "/queue/" + routing_key, command)
        try:
            publish = props.from_properties(command.properties or {}, broker.now_ms)
        except ValueError as error:
            raise self._error(spec.PRECONDITION_FAILED, str(error), command) from None
        headers = publish.headers
        if exchange:  # through the default exchange, the routing key is the queue's name
            headers[props.EXCHANGE] = exchange
            headers[props.ROUTING_KEY] = routing_key
        # Consumers get the properties as they came, encoded once (expiration included, as in RabbitMQ).
        raw = command.raw_properties
        encoded = None if raw is None else {"amqp": (args.route, raw)}
        body = cast(bytes, command.body)  # the reader gives every method with content its body
        if self.transactional:
            self._tx.append((exchange, routing_key, headers, body, publish, args.mandatory, encoded))
            return
        self._publish(exchange, routing_key, headers, body, publish, args.mandatory, encoded)

    def _publish(self, exchange: str, routing_key: str, headers: dict, body: bytes, publish, mandatory: bool,
                 encoded: dict | None = None) -> None:
        broker = self.broker
        store = broker.store
        before = store.position
        try:
            routed = broker.publish(exchange, routing_key, headers, body, publish.persistent, publish.priority,
                                    publish.expires, self.session, publish.match, encoded)
        except BrokerError:
            if self.confirms is None:
                raise  # the channel closes, saying why
            self.confirms.refused()  # a publisher with confirms hears nack
            return
        if not routed and mandatory:
            frames = [encode_method(self.number, "basic.return", reply_code=spec.NO_ROUTE, reply_text="NO_ROUTE",
                                    exchange=exchange, routing_key=routing_key)]
            frames += encode_content(self.number, props.to_properties(headers, publish.persistent, publish.priority),
                                     body, self.connection.frame_max)
            self.connection.writeSequence(frames)
        confirms = self.confirms
        if confirms is not None:
            confirms.published(store.position != before)
        connection = self.connection
        if broker.memory_full or (publish.persistent and store.blocked is not None):
            connection.pause_reading(store.when_room if store.blocked is not None and not broker.memory_full
                                     else broker.when_memory_available)
        elif self._stored is not None and self._stored.full:
            connection.pause_reading(self._stored.when_below)  # its vhost holds max_messages: until one goes

    def method_confirm_select(self, args, command: Command) -> None:
        if self.transactional:
            raise self._error(spec.PRECONDITION_FAILED, "a transactional channel cannot be put in confirm mode",
                              command)
        if self.confirms is None:
            self.confirms = Confirms(self)
        if not args.nowait:
            self._reply("confirm.select_ok")

    # -- transactions ---------------------------------------------------------------------

    def method_tx_select(self, args, command: Command) -> None:
        if self.confirms is not None:
            raise self._error(spec.PRECONDITION_FAILED, "a channel in confirm mode cannot be transactional", command)
        self.transactional = True
        self._reply("tx.select_ok")

    def method_tx_commit(self, args, command: Command) -> None:
        if not self.transactional:
            raise self._error(spec.PRECONDITION_FAILED, "tx.commit on a channel that is not transactional", command)
        held, self._tx = self._tx, []
        for exchange, routing_key, headers, body, publish, mandatory, encoded in held:
            self._publish(exchange, routing_key, headers, body, publish, mandatory, encoded)
        self._reply("tx.commit_ok")

    def method_tx_rollback(self, args, command: Command) -> None:
        if not self.transactional:
            raise self._error(spec.PRECONDITION_FAILED, "tx.rollback on a channel that is not transactional",
                              command)
        self._tx = []
        self._reply("tx.rollback_ok")
