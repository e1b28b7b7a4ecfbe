"""The node's copy of the mesh-wide definitions (model.definitions): made here,
merged from peers, kept in the catalog. Applying them is the broker's job, and
shipping them the mesh's."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable

import msgspec

from gateway.broker.errors import BrokerError
from gateway.broker.names import check_name
from model.definitions import (
    BINDING,
    EXCHANGE,
    PERMISSION,
    QUEUE_SETTINGS,
    TRACE,
    VHOST,
    BindingSpec,
    Definition,
    DefinitionKind,
    ExchangeSpec,
    QueueSettings,
    TraceSpec,
    traced_destination,
)

if TYPE_CHECKING:
    from gateway.broker.core import BrokerCore

log = logging.getLogger(__name__)


class Definitions:
    def __init__(self, origin: str) -> None:
        self.origin = origin  # this node's id: the origin of the changes made here
        self._records: dict[tuple[str, str], Definition] = {}
        self._clock = 0  # the highest version seen
        # Vhost records are the node's, not this broker's: applied by gateway.broker.vhosts.VirtualHosts.
        self.on_vhost: Callable[[Definition], None] | None = None
        # So are permission records (vhost permissions made by command): VirtualHosts gives them to the node's map.
        self.on_permission: Callable[[Definition], None] | None = None

    def get(self, kind: DefinitionKind, name: str) -> Definition | None:
        """The record for a name, a tombstone included."""
        return self._records.get((kind, name))

    def records(self) -> list[Definition]:
        return sorted(self._records.values(), key=lambda r: (r.kind, r.name))

    def change(self, kind: DefinitionKind, name: str, now: float, **spec: Any) -> Definition:
        """A change made on this node: ``queue=``, ``durable=``, ``exchange=``,
        ``binding=``, ``vhost=`` or ``permission=`` the new value, none of them for a
        deletion."""
        self._clock += 1
        record = Definition(kind=kind, name=name, version=self._clock, origin=self.origin, changed_at=now, **spec)
        self._records[(kind, name)] = record
        return record

    def merge(self, record: Definition) -> bool:
        """Take a record from elsewhere if it wins over the one held; say whether it did."""
        self._clock = max(self._clock, record.version)
        key = (record.kind, record.name)
        if not record.wins_over(self._records.get(key)):
            return False
        self._records[key] = record
        return True

    def drop_tombstones(self, older_than: float) -> int:
        """Forget deletions made before ``older_than``: by then every node that
        will ever be heard from again has heard of them (mesh.peer_retention_s)."""
        old = [key for key, r in self._records.items() if r.deleted and r.changed_at < older_than]
        for key in old:
            del self._records[key]
        return len(old)

    # -- the catalog ----------------------------------------------------------------------

    def to_catalog(self) -> list[dict]:
        return msgspec.to_builtins(self.records())

    def load_catalog(self, entries: Iterable[dict]) -> None:
        for record in msgspec.convert(list(entries), list[Definition]):
            self.merge(record)


class DefiningMixin:
    """The broker's side of the definitions: changes made here, records merged from
    peers, and what each means for queues, durable subscriptions and exchanges.
    Mixed into gateway.broker.broker.Broker; what it uses of it is declared in
    gateway.broker.core.BrokerCore (each method's ``self``)."""

    def define_queue(self: BrokerCore, name: str, settings: QueueSettings | None) -> Definition:
        """Set a queue's settings on every node (None: delete its definition
        everywhere, and the queue where no consumer holds it)."""
        if name in self.services:
            raise BrokerError(f"/queue/{name} is a service address; it holds no messages")
        if settings is not None:
            check_name("queue name", name)
            for what, target in (("dead-letter queue", settings.dead_letter_queue),
                                 ("expiry queue", settings.expiry_queue or None)):
                if target is not None:
                    check_name(what, target)
        record = self.define(QUEUE_SETTINGS, name, queue=settings)
        self.apply_definition(record, save=False)
        return record

    def define_trace(self: BrokerCore, destination: str, spec: TraceSpec | None) -> Definition:
        """Trace a destination on every node until ``spec.until`` (None: stop it everywhere)."""
        record = self.define(TRACE, destination, trace=spec)
        self.apply_definition(record, save=False)
        return record

    def arm_trace(self: BrokerCore, record: Definition) -> None:
        """Arm (or disarm) this broker's tracer as a trace definition says: one message in
        ``spec.every`` of its destination, no count limit, until its end time. Without a
        tracer ([journeys] off) the definition is only kept and passed on."""
        if self.tracer is None:
            return
        try:
            kind, address = traced_destination(record.name)
        except ValueError as error:  # made by no node of this release: it checks the name first
            log.warning("trace definition from node %s not applied: %s", record.origin, error)
            return
        spec = record.trace
        now = self.seconds()
        if spec is not None and spec.until > now:
            self.trace_next(kind, address, spec.every, None, spec.until - now)
        else:  # deleted, or ended (a catalog read after its end): nothing stays armed to test for
            self.trace_next(kind, address, 1, 0, 0)

    def declare_exchange(self: BrokerCore, name: str, spec: ExchangeSpec) -> None:
        """Make an exchange on every node (nothing changes if it exists alike)."""
        current = self.definitions.get(EXCHANGE, name)
        if current is not None and current.exchange == spec:
            return
        if current is None:
            check_name("exchange name", name)
        self.apply_definition(self.define(EXCHANGE, name, exchange=spec), save=False)

    def delete_exchange(self: BrokerCore, name: str) -> None:
        """Delete an exchange and the bindings from and to it, on every node."""
        for exchange in self.exchanges.exchanges.values():
            for binding, _ in list(exchange.bindings.values()):
                if binding.source == name or (binding.destination == name and binding.destination_kind == EXCHANGE):
                    self.unbind(binding)
        self.apply_definition(self.define(EXCHANGE, name), save=False)

    def bind(self: BrokerCore, binding: BindingSpec) -> None:
        key = binding.key()
        current = self.definitions.get(BINDING, key)
        if current is None or current.deleted:
            self.apply_definition(self.define(BINDING, key, binding=binding), save=False)

    def unbind(self: BrokerCore, binding: BindingSpec) -> None:
        key = binding.key()
        current = self.definitions.get(BINDING, key)
        if current is not None and not current.deleted:
            self.apply_definition(self.define(BINDING, key), save=False)

    def define(self: BrokerCore, kind: DefinitionKind, name: str, **spec: Any) -> Definition:
        """A definition changed here: record it, save it, let the mesh ship it."""
        record = self.definitions.change(kind, name, self.seconds(), **spec)
        self.save_catalog()
        if self.on_definition is not None:
            self.on_definition(record)
        return record

    def forget_deletions(self: BrokerCore, older_than: float) -> None:
        """Drop the record of deletions made before ``older_than`` (mesh.peer_retention_s)."""
        if self.definitions.drop_tombstones(older_than):
            self.save_catalog(required=False)

    def merge_definition(self: BrokerCore, record: Definition) -> bool:
        """A definition from another node: applied if it wins over the one held."""
        if not self.definitions.merge(record):
            return False
        self.apply_definition(record)
        return True

    def apply_definition(self: BrokerCore, record: Definition, save: bool = True) -> None:
        name = record.name
        if record.kind == QUEUE_SETTINGS:
            if record.queue is not None:
                self.queue_settings[name] = record.queue
                if name not in self.queues and name not in self.services:
                    self.create_queue(name, save=False)
            else:
                self.queue_settings.pop(name, None)
                queue = self.queues.get(name)
                if queue is not None and not queue.consumers:
                    self.drop_queue(queue, save=False)
        elif record.kind == EXCHANGE:
            if record.exchange is not None:
                self.exchanges.declare(name, record.exchange)
            else:
                self.exchanges.delete(name)
        elif record.kind == VHOST:
            if self.definitions.on_vhost is not None:
                self.definitions.on_vhost(record)
        elif record.kind == PERMISSION:
            if self.definitions.on_permission is not None:
                self.definitions.on_permission(record)
        elif record.kind == TRACE:
            self.arm_trace(record)
        elif record.kind == BINDING:
            if record.binding is not None:
                self.exchanges.bind(record.binding)
            else:
                self.exchanges.unbind_key(name)
            self.topic_queues = self.exchanges.topic_bound()
        else:
            binding = self.bindings.get(name)
            spec = record.durable
            if binding is not None and binding.durable and binding.peer is None:
                if spec is not None and (binding.pattern, binding.selector_text) == (spec.topic, spec.selector):
                    return
                self.drop_durable(binding)  # deleted, or changed: a new subscription, as in JMS
            if spec is not None:
                try:
                    self.bind_topic(name, spec.topic, spec.selector, durable=True)
                except BrokerError as error:  # a selector this node cannot compile
                    log.error("durable subscription %r from node %s not made here: %s", name, record.origin, error)
        if save:
            self.save_catalog(required=False)
