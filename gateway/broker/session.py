"""A client's session with the broker core: its subscriptions, unacked
deliveries, transactions and temporary queues. Protocol adapters own one each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

from gateway.broker.errors import BrokerError
from gateway.broker.message import MESSAGE_OVERHEAD, Message
from gateway.broker.queue import AUTO, CLIENT, Queue, Subscription, dispatch_held
from model.latency import TOP as LATENCY_TOP
from model.names import quoted

if TYPE_CHECKING:
    from gateway.broker.broker import Broker
    from gateway.broker.links import LinkSubscription
    from model.journeys import RecordClient
    from model.mesh import Connection


class DeliverySink(Protocol):
    """What a protocol adapter gives the core to receive messages."""

    def deliver(self, subscription: Subscription, message: Message) -> None: ...


@runtime_checkable
class CancelsConsumers(Protocol):
    """A sink whose protocol can tell its client that the broker cancelled a consumer
    (AMQP's basic.cancel, when the queue is deleted); STOMP has no such frame."""

    def cancel_from_server(self, subscription: Subscription) -> None: ...


@dataclass(slots=True)
class ConnectionInfo:
    """Who is at the other end of a client session, as its protocol adapter says."""

    protocol: str  # "stomp"
    version: str  # the negotiated protocol version
    remote: str  # "host:port"
    since: float  # epoch seconds
    close: Callable[[str], None]  # ends the connection, telling the client why
    # Set when one connection holds several sessions (AMQP: one per channel): they are listed as one.
    name: str | None = None
    # Set by an adapter that knows more of its connection than its sessions say (AMQP: its
    # channels): fills that into the management model's row for the connection.
    describe: Callable[[Connection], None] | None = None


class _Transaction:
    __slots__ = ("sends", "acks", "size")

    def __init__(self) -> None:
        self.sends: list[tuple[str, str, dict[str, str], bytes, bool, int, int]] = []
        self.acks: list[tuple[Queue, Message]] = []
        self.size = 0  # bytes of the sends held until COMMIT


class Session:
    def __init__(self, broker: Broker, sink: DeliverySink, name: str, client_id: str | None = None) -> None:
        self.broker = broker
        self.sink = sink
        self.name = name
        self.client_id = client_id
        # False while the client's socket is backed up: no dispatch to it then.
        self.writable = True
        self.subscriptions: dict[str, Subscription] = {}
        self.transactions: dict[str, _Transaction] = {}
        self.temp_queues: dict[str, Queue] = {}
        self.closed = False
        # Set by the protocol adapter once the client has authenticated (an
        # auth.Principal); services authorize requests against it, never against
        # anything the client wrote into a message.
        self.principal: object = None
        self.connection: ConnectionInfo | None = None  # None for the mesh's link sessions
        # The client as journey records name it, and its size: made by gateway.broker.tracing
        # at its first traced message, once the session is connected and its principal known.
        self.journey_client: tuple[RecordClient, int] | None = None
        # When the adapter last read from the client (its clock): the time a SEND is
        # accepted and an ACK given, without a clock read per message. 0: read the clock.
        self.received_at = 0.0

    # -- delivery (called by queues) ------------------------------------------------

    def deliver(self, sub: Subscription, message: Message) -> None:
        if sub.link is None:  # forwarding to another node is not a delivery attempt
            message.deliveries += 1
        if sub.ack_mode == AUTO:
            if message.traced and self.broker.tracer is not None:  # first: the sink may settle it at once
                self.broker.tracer.delivered(sub, message, auto_ack=True)
            self.sink.deliver(sub, message)
            queue = sub.queue
            broker = self.broker
            broker.consumed(queue, message)
            # Acked as it goes out: its latency, inline (this is the busiest path there is).
            created = message.created
            if created:
                micros = (broker.seconds() - created) * 1e6
                index = int(micros).bit_length() if micros >= 1 else 0
                queue.latency[index if index < LATENCY_TOP else LATENCY_TOP] += 1
                queue.latency_sum += micros
            queue.acked += 1
        else:
            sub.inflight[message.id] = message
            if message.traced and self.broker.tracer is not None:
                self.broker.tracer.delivered(sub, message, auto_ack=False)
            self.sink.deliver(sub, message)

    def set_writable(self, writable: bool) -> None:
        self.writable = writable
        if writable:
            for queue in {sub.queue for sub in self.subscriptions.values()}:
                queue.dispatch()

    # -- subscriptions ------------------------------------------------------------------

    def subscribe(
        self,
        subscription_id: str,
        kind: str,
        address: str,
        ack_mode: str = AUTO,
        prefetch: int | None = None,
        selector: str | None = None,
        durable_name: str | None = None,
        tag: object = None,
        link: LinkSubscription | None = None,
    ) -> Subscription:
        """``tag``: what the protocol adapter keeps with it; ``link``: a mesh link's."""
        if subscription_id in self.subscriptions:
            raise BrokerError(f"subscription id {quoted(subscription_id)} is already in use on this connection")
        sub = self.broker.subscribe(self, subscription_id, kind, address, ack_mode, prefetch, selector, durable_name,
                                    tag, link)
        self.subscriptions[subscription_id] = sub
        return sub

    def unsubscribe(self, subscription_id: str, remove_durable: bool = False) -> None:
        sub = self.subscriptions.pop(subscription_id, None)
        if sub is None:
            raise BrokerError(f"no subscription with id {quoted(subscription_id)} on this connection")
        self._detach(sub)
        if remove_durable and sub.durable:
            self.broker.remove_durable(sub.queue.name)

    def _detach(self, sub: Subscription) -> None:
        returned = list(sub.inflight.values())
        sub.inflight.clear()
        self.broker.unsubscribe(sub, returned)

    # -- acknowledgement ------------------------------------------------------------------

    def settle(self, sub: Subscription, message_id: str, cumulative: bool, transaction: str | None = None,
               accept: bool = True) -> None:
        """ACK (accept) or NACK one delivery; cumulative covers every earlier
        delivery on the same subscription too, as STOMP's client mode does."""
        inflight = sub.inflight
        if message_id not in inflight:
            raise BrokerError(f"message {quoted(message_id)} is not awaiting acknowledgement on subscription "
                              f"{quoted(sub.id)}")
        if cumulative and sub.ack_mode == CLIENT:
            settled = []
            while True:
                mid, message = inflight.popitem(last=False)
                settled.append(message)
                if mid == message_id:
                    break
        else:
            settled = [inflight.pop(message_id)]
        if transaction is not None:
            tx = self._transaction(transaction)
            if accept:
                tx.acks.extend((sub.queue, m) for m in settled)
                sub.queue.dispatch()
                return
        queue = sub.queue
        if accept:
            consumed = self.broker.consumed
            for message in settled:
                consumed(queue, message)
            queue.acknowledged(settled, self.received_at or self.broker.seconds())
        else:
            self.broker.requeue(queue, settled, "nack")
        queue.dispatch()

    # -- transactions ---------------------------------------------------------------------

    def _transaction(self, name: str) -> _Transaction:
        try:
            return self.transactions[name]
        except KeyError:
            raise BrokerError(f"transaction {quoted(name)} is not active") from None

    def begin(self, name: str) -> None:
        if name in self.transactions:
            raise BrokerError(f"transaction {quoted(name)} is already active")
        self.transactions[name] = _Transaction()

    def send(self, kind: str, address: str, headers: dict[str, str], body: bytes, persistent: bool,
             priority: int, expires: int, transaction: str | None = None) -> None:
        if transaction is not None:
            tx = self._transaction(transaction)
            size = len(body) + MESSAGE_OVERHEAD
            if tx.size + size > self.broker.memory_limit:
                # It could never be held, let alone committed: refuse rather than stall.
                raise BrokerError(
                    f"transaction {quoted(transaction)} would hold more than the broker's memory limit of "
                    f"{self.broker.memory_limit} bytes; commit in smaller transactions"
                )
            tx.sends.append((kind, address, headers, body, persistent, priority, expires))
            tx.size += size
            # Held until COMMIT, so it counts against the memory limit like a queued message.
            self.broker.reserve_memory(size)
            return
        self.broker.send(kind, address, headers, body, persistent, priority, expires, self)

    def commit(self, name: str) -> None:
        tx = self.transactions.pop(name, None)
        if tx is None:
            raise BrokerError(f"transaction {quoted(name)} is not active")
        send = self.broker.send
        self._release_sends(tx)
        for args in tx.sends:
            send(*args, self)
        consumed = self.broker.consumed
        now = self.received_at or self.broker.seconds()
        for queue, message in tx.acks:
            consumed(queue, message)
            queue.acknowledged((message,), now)

    def abort(self, name: str) -> None:
        tx = self.transactions.pop(name, None)
        if tx is None:
            raise BrokerError(f"transaction {quoted(name)} is not active")
        self._rollback(tx)

    def _release_sends(self, tx: _Transaction) -> None:
        self.broker.release_memory(tx.size)
        tx.size = 0

    @property
    def transaction_bytes(self) -> int:
        """Memory held by this session's uncommitted sends."""
        return sum(tx.size for tx in self.transactions.values())

    def _rollback(self, tx: _Transaction) -> None:
        self._release_sends(tx)
        # Acks undone by a rollback mean redelivery, as for a JMS transacted session.
        by_queue: dict[Queue, list[Message]] = {}
        for queue, message in tx.acks:
            by_queue.setdefault(queue, []).append(message)
        for queue, messages in by_queue.items():
            self.broker.requeue(queue, messages, "rollback")

    # -- temporary queues -----------------------------------------------------------------

    def temp_queue(self, name: str) -> Queue:
        queue = self.temp_queues.get(name)
        if queue is None:
            queue = self.broker.create_temp_queue(self, name)
            self.temp_queues[name] = queue
        return queue

    # -- end ------------------------------------------------------------------------------

    def close(self) -> None:
        """The client went away: open transactions abort, unacked messages return."""
        if self.closed:
            return
        self.closed = True
        self.writable = False
        self.broker.sessions.pop(self.name, None)
        returning = {sub.queue for sub in self.subscriptions.values()}
        returning.update(queue for tx in self.transactions.values() for queue, _ in tx.acks)
        with dispatch_held(returning):  # another consumer gets them back in order, not consumer by consumer
            for tx in self.transactions.values():
                self._rollback(tx)
            self.transactions.clear()
            for sub in list(self.subscriptions.values()):
                self._detach(sub)
            self.subscriptions.clear()
        for queue in self.temp_queues.values():
            self.broker.drop_queue(queue)
        self.temp_queues.clear()
