"""An AMQP channel on the broker core: one core session per channel, one handler
per method (``method_basic_publish`` …), and the publishing side: basic.publish,
publisher confirms (gateway.amqp.confirms) sent once what they confirm is durable,
and transactions. Consuming (qos, consume, deliveries, get, acks) is
gateway.amqp.consuming's; declaring, binding and purging exchanges and queues is
gateway.amqp.declarations'."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import TYPE_CHECKING, Callable, cast

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from gateway.amqp import consuming, declarations, spec
from gateway.amqp import properties as props
from gateway.amqp.codec import encode_content, encode_method
from gateway.amqp.confirms import Confirms
from gateway.amqp.consuming import UNLIMITED
from gateway.amqp.reader import Command
from gateway.amqp.spec import AmqpError
from gateway.auth import ANONYMOUS
from gateway.broker.errors import BrokerError
from gateway.broker.exchanges import TOPIC_EXCHANGE
from gateway.broker.message import MESSAGE_OVERHEAD, Message
from gateway.broker.producer_pauses import MAX_MESSAGES, MEMORY_LIMIT, max_messages_state, store_limit_key
from gateway.broker.queue import Queue, Subscription, dispatch_held
from gateway.permissions import amqp_needs
from model.mesh import ChannelSummary

if TYPE_CHECKING:
    from gateway.amqp.protocol import AmqpProtocol

WAITING_LIMIT = 1000  # methods held behind one awaiting its answer before the client is not read on


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
        self._tx_bytes = 0  # what self._tx holds, counted against the node's memory until commit or rollback
        self._handlers: dict = {}  # method spec -> this channel's handler
        self._waiting: list[Command] | None = None  # methods that came while one's answer is awaited
        self._answered_callbacks: list[Callable[[], None]] = []

    # -- dispatch -------------------------------------------------------------------------

    def command(self, command: Command) -> None:
        waiting = self._waiting
        if waiting is not None:  # a method's answer comes from other nodes: later methods wait behind it
            waiting.append(command)
            if len(waiting) >= WAITING_LIMIT:  # a client that goes on sending is not read until the answer
                self.connection.pause_reading(self._when_answered)  # ahead of its answers: no limit reached
            return
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
            answer = handler(command.args, command)
        except BrokerError as error:
            raise AmqpError(spec.PRECONDITION_FAILED, str(error), self.number, command.spec.class_id,
                            command.spec.method_id) from None
        if answer is not None:  # a Deferred: the method asked the mesh (gateway.amqp.mesh_queues)
            self._await(answer)

    def _await(self, answer: Deferred) -> None:
        """Hold the channel's later methods until ``answer`` (which writes the method's
        reply, or fails with the AmqpError that closes the channel) fires: AMQP answers a
        channel's methods in order."""
        self._waiting = []
        answer.addErrback(self._failed_asynchronously)
        answer.addBoth(self._answered)

    def _failed_asynchronously(self, failure: Failure) -> None:
        error = failure.value
        if isinstance(error, AmqpError):
            self.connection.channel_error(error)
        elif error is not None:
            self.connection.internal_error(error)

    def _answered(self, _: object) -> None:
        waiting, self._waiting = self._waiting or [], None
        callbacks, self._answered_callbacks = self._answered_callbacks, []
        for callback in callbacks:
            callback()
        for position, command in enumerate(waiting):
            if self._waiting is not None:  # another method asked the mesh: the rest wait for it
                self._waiting.extend(waiting[position:])
                return
            try:
                self.connection.handle(command)
            except Exception as error:  # as dataReceived's last line of defence: this connection only
                self.connection.internal_error(error)
                return

    def _when_answered(self, callback: Callable[[], None]) -> None:
        self._answered_callbacks.append(callback)

    @property
    def open(self) -> bool:
        """Not closed, nor closing: what a reply that came from the mesh is written to."""
        return not self.closing and not self.session.closed

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
        self._tx = []
        self._release_tx()
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
        # The gets and the cancelled consumers' deliveries come back with the consumers' own
        # (Session.close) before any of them goes out again: a waiting consumer gets them in order.
        with dispatch_held({*by_queue, *(sub.queue for sub in self.session.subscriptions.values())}):
            self.session.close()
            for queue, messages in by_queue.items():
                self.broker.requeue(queue, messages, "channel closed")
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
    method_queue_delete = declarations.method_queue_delete

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

    # -- consuming: gateway.amqp.consuming -----------------------------------------------

    method_basic_qos = consuming.method_basic_qos
    method_basic_consume = consuming.method_basic_consume
    method_basic_cancel = consuming.method_basic_cancel
    cancel_from_server = consuming.cancel_from_server
    deliver = consuming.deliver
    method_basic_get = consuming.method_basic_get
    method_basic_ack = consuming.method_basic_ack
    method_basic_nack = consuming.method_basic_nack
    method_basic_reject = consuming.method_basic_reject
    method_basic_recover = consuming.method_basic_recover
    method_basic_recover_async = consuming.method_basic_recover_async

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
            publish = props.from_properties(command.properties or {}, broker.now_ms, command.raw_properties)
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
            self._hold(len(body) + MESSAGE_OVERHEAD, command)
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
        if broker.memory_full:
            connection.pause_reading(broker.when_memory_available, MEMORY_LIMIT)
        elif publish.persistent and store.blocked is not None:
            connection.pause_reading(store.when_room, store_limit_key(store.blocked))
        elif self._stored is not None and self._stored.full:
            # Its vhost holds max_messages: until one goes.
            connection.pause_reading(self._stored.when_below, MAX_MESSAGES,
                                     max_messages_state(connection.vhost, self._stored))

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
        self._release_tx()
        for exchange, routing_key, headers, body, publish, mandatory, encoded in held:
            self._publish(exchange, routing_key, headers, body, publish, mandatory, encoded)
        self._reply("tx.commit_ok")

    def method_tx_rollback(self, args, command: Command) -> None:
        if not self.transactional:
            raise self._error(spec.PRECONDITION_FAILED, "tx.rollback on a channel that is not transactional",
                              command)
        self._tx = []
        self._release_tx()
        self._reply("tx.rollback_ok")

    def _hold(self, size: int, command: Command) -> None:
        """A publish held until tx.commit counts against the memory like a queued
        message. A transaction that could never be held is refused rather than left to
        stall; one that fills the memory itself is read on, as only its commit (or its
        refusal) can free it."""
        broker = self.broker
        if self._tx_bytes + size > broker.memory_limit:
            raise self._error(spec.PRECONDITION_FAILED,
                              f"the transaction would hold more than the node's memory limit of "
                              f"{broker.memory_limit} bytes; commit in smaller transactions", command)
        self._tx_bytes += size
        broker.reserve_memory(size)
        if broker.memory_full and not broker.memory.held_mostly_by(self._tx_bytes):
            self.connection.pause_reading(broker.when_memory_available, MEMORY_LIMIT)

    def _release_tx(self) -> None:
        if self._tx_bytes:
            self.broker.release_memory(self._tx_bytes)
            self._tx_bytes = 0
