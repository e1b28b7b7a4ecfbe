"""Where refused and expired messages go: back to their queue (requeue), to the
dead-letter queue past max_delivery_attempts, to the queue's dead-letter exchange
(AMQP), or to the expiry queue. A part of the broker core, typed against what it
uses of the broker (gateway.broker.core.BrokerCore)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.broker.message import EXCHANGE_HEADER, QUEUE, ROUTING_KEY_HEADER, Message
from gateway.broker.queue import Queue
from model.events import DeadLetter, Expired

if TYPE_CHECKING:
    from gateway.broker.core import BrokerCore


class DeadLetters:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def requeue(self, queue: Queue, messages: list[Message], reason: str = "returned") -> None:
        """Unacked deliveries come back (NACK, unsubscribe, disconnect, rollback: the
        ``reason``, recorded in the journeys of traced messages)."""
        core = self.core
        keep = []
        settings = core.queue_settings.get(queue.name) if core.queue_settings else None
        attempts, dead_letter_queue = core.max_delivery_attempts, core.dead_letter_queue
        if settings is not None:
            attempts = settings.max_delivery_attempts or attempts
            dead_letter_queue = settings.dead_letter_queue or dead_letter_queue
        for message in messages:
            if message.deliveries >= attempts and queue.name != dead_letter_queue:
                if settings is not None and settings.dead_letter_exchange is not None:
                    self.dead_letter(queue, message, "max-delivery-attempts")
                    continue
                queue.dead_lettered += 1
                core.events.count(DeadLetter(queue=queue.name, reason="max-delivery-attempts",
                                             dead_letter_queue=dead_letter_queue, count=0))
                self._move(queue, message, dead_letter_queue, "max-delivery-attempts")
            else:
                if message.traced and core.tracer is not None:
                    core.tracer.requeued(queue, message, reason)
                keep.append(message)
        if keep:
            queue.put_back(keep)
            queue.dispatch()

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None:
        """A message refused for good (AMQP reject or nack without requeue): to the
        queue's dead-letter exchange if it has one, else dropped, as RabbitMQ does."""
        core = self.core
        settings = core.queue_settings.get(queue.name) if core.queue_settings else None
        exchange = settings.dead_letter_exchange if settings is not None else None
        if settings is None or exchange is None or exchange not in core.exchanges.exchanges:
            if message.traced and core.tracer is not None:
                core.tracer.dropped(queue, message, reason)
            core.consumed(queue, message)
            return
        queue.dead_lettered += 1
        core.events.count(DeadLetter(queue=queue.name, reason=reason, dead_letter_queue="exchange:" + exchange,
                                     count=0))
        core.consumed(queue, message)
        routing_key = settings.dead_letter_routing_key or message.headers.get(ROUTING_KEY_HEADER, queue.name)
        headers = {**message.headers, "original-destination": f"/queue/{queue.name}",
                   "original-message-id": message.id, "dead-letter-reason": reason,
                   EXCHANGE_HEADER: exchange, ROUTING_KEY_HEADER: routing_key}
        headers.pop("expires", None)
        from_id = None
        if message.traced and core.tracer is not None:
            # The copies' ids are made in publish: each one's ``received`` names this message instead.
            core.tracer.dead_lettered(queue, message, reason, "exchange:" + exchange)
            from_id = message.id
        core.publish(exchange, routing_key, headers, message.body, message.persistent, message.priority,
                     from_id=from_id)

    def expire(self, queue: Queue, message: Message) -> None:
        core = self.core
        core.expired += 1
        queue.expired += 1
        core.events.count(Expired(queue=queue.name, count=0))
        if message.traced and core.tracer is not None:
            core.tracer.expired(queue, message)
        settings = core.queue_settings.get(queue.name) if core.queue_settings else None
        if settings is not None and settings.dead_letter_exchange is not None:
            self.dead_letter(queue, message, "expired")
            return
        expiry_queue = core.expiry_queue if settings is None or settings.expiry_queue is None else settings.expiry_queue
        if expiry_queue and queue.name != expiry_queue:
            self._move(queue, message, expiry_queue, "expired")
        else:
            core.consumed(queue, message)

    def sweep_expired(self) -> int:
        core = self.core
        now = core.now_ms()
        count = 0
        for queue in [*core.queues.values(), *(b.queue for b in core.bindings.values())]:
            for message in queue.remove_expired(now):
                self.expire(queue, message)
                count += 1
        return count

    def _move(self, queue: Queue, message: Message, target: str, reason: str) -> None:
        core = self.core
        core.consumed(queue, message)
        headers = dict(message.headers)
        headers.setdefault("original-destination", f"/{message.kind}/{message.address}")
        headers["original-message-id"] = message.id
        headers["dead-letter-reason"] = reason
        headers.pop("expires", None)
        if not (message.traced and core.tracer is not None):
            core.send(QUEUE, target, headers, message.body, message.persistent, message.priority)
            return
        # Recorded before its copy's own steps (the copy is traced too), then told the copy's id.
        record = core.tracer.dead_lettered(queue, message, reason, "/queue/" + target)
        copy = core.send(QUEUE, target, headers, message.body, message.persistent, message.priority,
                         from_id=message.id)
        if copy is not None:
            record["next_id"] = copy.id
