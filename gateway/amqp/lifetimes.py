"""What AMQP ties to a queue's life beyond the broker core, kept per vhost (two vhosts
may both have ``orders``, one exclusive, the other not): exclusive queues and
consumers, auto-delete, and x-expires (a queue unused that long goes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.internet import task

from gateway.broker.broker import Broker
from gateway.broker.queue import Subscription

if TYPE_CHECKING:
    from gateway.amqp.protocol import AmqpProtocol


class QueueLifetimes:
    def __init__(self, broker: Broker, clock) -> None:
        self.broker = broker
        self.clock = clock
        self.exclusive: dict[str, AmqpProtocol] = {}  # queue -> the connection it belongs to
        self.exclusive_consumers: dict[str, Subscription] = {}  # queue -> its exclusive consumer
        self.auto_delete: set[str] = set()  # queues deleted once their last consumer goes
        self._expiring: dict[str, tuple[int, float]] = {}  # queue -> (x-expires ms, unused since)
        self._sweep: task.LoopingCall | None = None

    def expire_unused(self, queue: str, expires_ms: int) -> None:
        """x-expires: the queue goes once it has had no consumer for that long."""
        self._expiring[queue] = (expires_ms, self.clock.seconds())
        if self._sweep is None:
            self._sweep = sweep = task.LoopingCall(self._expire)
            sweep.clock = self.clock
            sweep.start(1.0, now=False)

    def _expire(self) -> None:
        now = self.clock.seconds()
        for name, (expires_ms, since) in list(self._expiring.items()):
            queue = self.broker.queues.get(name)
            if queue is None:
                del self._expiring[name]
            elif queue.consumers:
                self._expiring[name] = (expires_ms, now)
            elif now - since >= expires_ms / 1000.0:
                del self._expiring[name]
                self.broker.delete_queue(name)

    def consumer_gone(self, queue: str) -> None:
        exclusive = self.exclusive_consumers.get(queue)
        if exclusive is not None and exclusive not in exclusive.queue.consumers:
            del self.exclusive_consumers[queue]
        if queue in self.auto_delete:
            held = self.broker.queues.get(queue)
            if held is None or not held.consumers:
                self.auto_delete.discard(queue)
                self.broker.delete_queue(queue)

    def connection_gone(self, connection: AmqpProtocol) -> None:
        for queue in [name for name, owner in self.exclusive.items() if owner is connection]:
            del self.exclusive[queue]
            self.auto_delete.discard(queue)
            self.broker.delete_queue(queue)
