"""Start-up: the broker rebuilt from its store — queues, mesh-wide definitions,
durable subscriptions, the mesh peers' topic queues, then the persistent messages
put back where they wait, and the records the core does not own handed to their
owners. Mixed into gateway.broker.broker.Broker; what it uses of it is declared in
gateway.broker.core.BrokerCore."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Iterable

from model.definitions import DURABLE_SUBSCRIPTION, DurableSpec

if TYPE_CHECKING:
    from gateway.broker.core import BrokerCore
    from gateway.broker.message import Message
    from gateway.broker.queue import Queue

log = logging.getLogger(__name__)


class RecoveringMixin:
    """The broker's start-up from its store (``Broker.recover``)."""

    def recover(self: BrokerCore, stored: Iterable[tuple[str, Message]] | None = None) -> int:
        """Rebuild queues, durable subscriptions and persistent messages from the store
        (or from ``stored``, this broker's share of what a store shared by vhosts recovered)."""
        catalog = self.store.load_catalog()
        for name in catalog.get("queues", []):
            self.create_queue(name, save=False)
        self.definitions.load_catalog(catalog.get("definitions", []))
        for name, spec in catalog.get("durable", {}).items():  # written before definitions were
            if self.definitions.get(DURABLE_SUBSCRIPTION, name) is None:
                self.definitions.change(DURABLE_SUBSCRIPTION, name, self.seconds(),
                                        durable=DurableSpec(topic=spec["topic"], selector=spec.get("selector")))
        for record in self.definitions.records():
            if not record.deleted:
                self.apply_definition(record, save=False)
        for peer, patterns in catalog.get("links", {}).items():
            self.links.bind(peer, patterns, save=False)
        by_key = {q.key: q for q in self.queues.values()}
        by_key.update((b.queue.key, b.queue) for b in self.bindings.values())
        count = 0
        for key, message in self.store.recover() if stored is None else stored:
            foreign = self.foreign_records.get(key[:2])
            if foreign is not None:
                foreign(key, message)
                continue
            queue = by_key.get(key)
            if queue is None:
                if key.startswith("D:"):
                    # Its subscription was deleted (on another node, say) while this one was on its way.
                    log.warning("recovery: a message for deleted durable subscription %r dropped", key[2:])
                    self.store.remove(key, message)
                    continue
                queue = _queue_for_key(self, key)
                by_key[key] = queue
            # It may have been delivered before the restart: say so, without
            # spending one of its delivery attempts.
            message.recovered = True
            self.memory.used += message.size
            queue.put(message)
            count += 1
        for queue in by_key.values():
            # Counters count what happened since start; a recovered message entered before it.
            queue.enqueued = 0
        return count


def _queue_for_key(core: BrokerCore, key: str) -> Queue:
    return core.create_queue(key.partition(":")[2])
