"""A node's virtual hosts: name -> the Broker that is that vhost's namespace (its
queues, topics and durable subscriptions, exchanges and bindings, temp queues,
definitions, DLQ and expiry queue). Nothing crosses between two brokers, so
isolation costs nothing per message. What they share is the node's: one store
(each vhost's broker writes through a view qualifying its keys), one memory
budget, the event sink, the clock, the message id sequence and the settings.

The default vhost ``/`` is the broker a node had before vhosts: it uses the store
itself, and the mesh, management and metrics hold it alone (docs/vhosts.md).

A vhost comes from the node's configuration or from a mesh-wide definition (kind
"vhost" in the default vhost's definitions, model.definitions): made by command
on any node, applied on every node as it arrives, at recovery, or when a node
that was away catches up. The configuration is authoritative for its vhosts: a
deletion by definition leaves them be.

A vhost made by command lives from the record that made it to its deletion: its
*incarnation*, that record's (version, origin), which a change of its limits keeps
(``VhostSpec.incarnation``). A node away while a vhost was deleted and made again
learns only of the new one: it drops what it held of the old one, as if it had seen
the deletion, and the mesh ships each vhost's own definitions with the incarnation
they belong to (mesh.definitions).

Vhost permissions made by command (kind "permission", also in the default vhost's
definitions) are the node's too: whenever one is applied, the node's
:class:`gateway.permissions.VhostPermissions` is given all of them afresh, and a
vhost's go with it when it is deleted."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from gateway.broker.broker import Broker
from gateway.broker.events import VhostEvents
from gateway.broker.memory import MemoryBudget
from gateway.broker.message import Message
from gateway.store.base import Store
from gateway.store.records import split_key
from gateway.store.vhost_view import VhostStoreView
from model.definitions import PERMISSION, VHOST, Definition, PermissionSpec, VhostSpec
from model.names import DEFAULT_VHOST, InvalidName, check_vhost_name, quoted

if TYPE_CHECKING:
    from gateway.broker.vhost_limits import VhostLimits
    from gateway.permissions import VhostPermissions

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_VHOST", "VirtualHosts"]

VhostOrigin = Literal["default", "config", "definition"]
Incarnation = tuple[int, str]  # the (version, origin) of the record that made a vhost
DELETED_REASON = "vhost deleted"


class VirtualHosts:
    def __init__(self, store: Store, names: Iterable[str] = (), memory_limit: int = 256 * 1024 * 1024,
                 strict_stomp_host: bool = False, **settings: Any) -> None:
        """The vhosts ``/`` and ``names``, each broker made with ``settings`` (Broker's
        keyword arguments), all of them sharing ``store`` and one memory budget."""
        self.store = store
        self.strict_stomp_host = strict_stomp_host
        self._settings = {**settings, "memory": MemoryBudget(memory_limit), "message_ids": itertools.count(1)}
        self.default = Broker(store, **self._settings)
        self.brokers: dict[str, Broker] = {DEFAULT_VHOST: self.default}
        self.configured = set(names)
        # Stored records of vhosts that have no broker here (yet): handed over when one is defined.
        self._unclaimed: dict[str, list[tuple[str, Message]]] = {}
        self._recovered = False
        # The node's limits, once made (after recovery): told each vhost definition applied here.
        self.limits: VhostLimits | None = None
        self.default.definitions.on_vhost = self._definition_applied
        # The node's vhost permissions, once made (follow_permissions): given the entries made by command.
        self.permissions: VhostPermissions | None = None
        self._overridden: set[str] = set()  # permission definitions the configuration overrides here (logged)
        self.default.definitions.on_permission = self._permissions_applied
        self._added: list[Callable[[str, Broker], None]] = []
        self._made_as: dict[str, Incarnation | None] = {}  # vhost made by definition -> the incarnation it holds
        self._removed: list[Callable[[str, Broker], None]] = []
        for name in names:
            self.add(name)

    def add(self, name: str) -> Broker:
        """The broker of vhost ``name``, made if it is new (before recovery: ``recover``
        fills it); InvalidName if no vhost may be called that."""
        broker = self.brokers.get(name)
        if broker is None:
            check_vhost_name(name)  # also what keeps VHOST_MARK out of the store's qualified keys
            settings = self._settings
            if settings.get("events") is not None:  # its events name it (no cost per message: a wrapped sink)
                settings = {**settings, "events": VhostEvents(settings["events"], name)}
            if settings.get("tracer") is not None:  # its journeys' records name it too
                settings = {**settings, "tracer": settings["tracer"].for_vhost(name)}
            broker = self.brokers[name] = Broker(VhostStoreView(self.store, name), **settings)
            if self._recovered:  # defined while running: what the store kept for it is its
                broker.recover(self._unclaimed.pop(name, []))
            for added in self._added:
                added(name, broker)
        return broker

    def watch(self, added: Callable[[str, Broker], None] | None = None,
              removed: Callable[[str, Broker], None] | None = None) -> None:
        """Call ``added`` with each vhost made from now on (the existing ones are in
        ``brokers``), ``removed`` with each deleted, after its clients went and before
        its queues are dropped (the mesh lets go of what it holds of it)."""
        if added is not None:
            self._added.append(added)
        if removed is not None:
            self._removed.append(removed)

    def origin(self, name: str) -> VhostOrigin | None:
        """Where a vhost of this node comes from (None: it has none of that name)."""
        if name == DEFAULT_VHOST:
            return "default"
        if name in self.configured:
            return "config"
        return "definition" if name in self.brokers else None

    def defined(self, name: str) -> bool:
        """Whether the mesh holds a (live) definition of vhost ``name``."""
        record = self.default.definitions.get(VHOST, name)
        return record is not None and not record.deleted

    def incarnation(self, name: str) -> Incarnation | None:
        """The incarnation of vhost ``name`` as the mesh defines it (None: no live
        definition, a vhost of the configuration alone)."""
        record = self.default.definitions.get(VHOST, name)
        if record is None or record.vhost is None:
            return None
        return record.vhost.incarnation or (record.version, record.origin)

    def messages(self, name: str) -> int:
        """How many messages vhost ``name`` holds on this node (stored, if it has no broker)."""
        broker = self.brokers.get(name)
        return len(self._unclaimed.get(name, ())) if broker is None else messages_held(broker)

    def define(self, name: str, spec: VhostSpec) -> Definition:
        """Make vhost ``name`` on every node, or give it a new spec there (its limits);
        InvalidName if none may be called that."""
        check_vhost_name(name)
        spec = msgspec.structs.replace(spec, incarnation=self.incarnation(name))  # None: this record makes it
        record = self.default.define(VHOST, name, vhost=spec)
        self.default.apply_definition(record, save=False)
        return record

    def undefine(self, name: str) -> Definition:
        """Delete vhost ``name`` on every node, whatever it holds (the asker checked),
        and the permissions made by command in it (tombstones, so that a vhost made
        again later starts without them)."""
        for spec in self.defined_permissions():
            if spec.vhost == name:
                self.clear_permission(spec.key())
        record = self.default.define(VHOST, name)
        self.default.apply_definition(record, save=False)
        return record

    # -- permissions made by command -------------------------------------------------------

    def defined_permissions(self) -> list[PermissionSpec]:
        """The vhost permissions made by command (live ones), as this node holds them."""
        return [record.permission for record in self.default.definitions.records()
                if record.kind == PERMISSION and record.permission is not None]

    def set_permission(self, spec: PermissionSpec) -> Definition:
        """Give ``spec``'s user (or group) its patterns in its vhost, on every node."""
        record = self.default.define(PERMISSION, spec.key(), permission=spec)
        self.default.apply_definition(record, save=False)
        return record

    def clear_permission(self, key: str) -> Definition:
        """Delete the permission named ``key`` (PermissionSpec.key) on every node."""
        record = self.default.define(PERMISSION, key)
        self.default.apply_definition(record, save=False)
        return record

    def follow_permissions(self, permissions: VhostPermissions) -> None:
        """Give ``permissions`` the entries made by command: now (after recovery) and
        whenever one is made, changed or deleted here or anywhere in the mesh."""
        self.permissions = permissions
        self._permissions_applied(None)

    def _permissions_applied(self, record: Definition | None) -> None:
        if self.permissions is None:
            return  # recovery: follow_permissions reads them all once the map is made
        ignored = {spec.key(): spec for spec in self.permissions.define(self.defined_permissions())}
        for key in ignored.keys() - self._overridden:
            spec = ignored[key]
            who = f"user {quoted(spec.user)}" if spec.user is not None else f"group {quoted(spec.group or '')}"
            log.warning("vhost permissions of %s in vhost %s made by command are ignored on this node: its "
                        "configuration ([[vhosts.permissions]]) has that entry, which stands", who, quoted(spec.vhost))
        self._overridden = set(ignored)

    def unclaimed(self) -> dict[str, int]:
        """Vhosts neither configured nor defined whose messages the store keeps: how many."""
        return {name: len(kept) for name, kept in sorted(self._unclaimed.items())}

    def _definition_applied(self, record: Definition) -> None:
        name = record.name
        if not record.deleted:
            incarnation = self.incarnation(name)
            if name not in self.configured and self._made_as.get(name, incarnation) != incarnation and \
                    name in self.brokers:
                log.warning("vhost %s was deleted and made again while this node was away: what it held of it goes",
                            quoted(name))
                self.remove(name)
            try:
                self.add(name)
            except InvalidName as error:  # from a node that checked less: nothing to make of it
                log.error("vhost definition from node %s not applied: %s", record.origin, error)
                return
            self._made_as[name] = incarnation
            if self.limits is not None:
                self.limits.defined(name, record.vhost)
            return
        if name in self.configured or name == DEFAULT_VHOST:
            log.warning("vhost %s was deleted by command on node %s; it stays on this node, whose configuration "
                        "lists it", quoted(name), record.origin)
            return
        self.remove(name)
        if self.limits is not None:
            self.limits.defined(name, None)

    def remove(self, name: str) -> int:
        """Delete vhost ``name`` here: its clients are disconnected ("vhost deleted"),
        its queues, durable subscriptions and stored messages go. Returns how many
        messages went."""
        self._made_as.pop(name, None)
        broker = self.brokers.pop(name, None)
        if broker is None:
            return self._drop_unclaimed(name)
        for removed in self._removed:
            removed(name, broker)
        told: set[int] = set()  # an AMQP connection has a session per channel: told once
        for session in list(broker.sessions.values()):
            connection = session.connection
            if connection is not None and id(connection) not in told:
                told.add(id(connection))
                connection.close(DELETED_REASON)
            session.close()  # now: its unacked messages return to the queues dropped next
        count = 0
        for binding in list(broker.bindings.values()):
            count += len(binding.queue)
            broker.drop_durable(binding)
        for queue in list(broker.queues.values()):
            count += len(queue)
            broker.drop_queue(queue, save=False)
        try:
            self.store.save_catalog({}, name)
        except OSError as error:
            log.warning("the catalog of deleted vhost %s could not be cleared (%s)", quoted(name), error)
        log.warning("vhost %s deleted: its clients disconnected, %d message(s) dropped", quoted(name), count)
        return count

    def _drop_unclaimed(self, name: str) -> int:
        kept = self._unclaimed.pop(name, [])
        view = VhostStoreView(self.store, name)
        for queue_key, message in kept:
            view.remove(queue_key, message)
        if kept:
            log.warning("vhost %s is deleted: %d stored message(s) of it dropped", quoted(name), len(kept))
        return len(kept)

    def get(self, name: str) -> Broker | None:
        return self.brokers.get(name)

    def __iter__(self) -> Iterator[Broker]:
        return iter(list(self.brokers.values()))

    def for_stomp_host(self, host: str | None) -> Broker | None:
        """The broker of the vhost a STOMP CONNECT's ``host`` header names (RabbitMQ's
        rule). A host naming none (clients send the server's host name) is the
        default vhost's, or None (refused) with ``[vhosts] strict_stomp_host``; no
        host header at all (STOMP 1.0) is the default vhost's."""
        broker = self.brokers.get(host) if host is not None else self.default
        if broker is None and not self.strict_stomp_host:
            return self.default
        return broker

    def recover(self) -> int:
        """Recover the shared store once and each vhost's broker from its share: a
        default-vhost key is the default vhost's (what a data dir from before vhosts
        holds). The records of a vhost neither configured nor defined stay in the
        store untouched, handed to it if it is defined later, dropped if the
        definitions hold its deletion (a crash between the deletion and its removes)."""
        shares: dict[str | None, list[tuple[str, Message]]] = {None: []}
        for key, message in self.store.recover():
            vhost, queue_key = split_key(key)
            share = shares.get(vhost)
            if share is None:
                share = shares[vhost] = []
            share.append((queue_key if vhost is not None else key, message))
        default_share = shares.pop(None)
        self._unclaimed = {name: share for name, share in shares.items() if name is not None}
        count = self.default.recover(default_share)  # applies the vhost definitions: their brokers are made
        for name, broker in list(self.brokers.items()):
            if name != DEFAULT_VHOST:
                count += broker.recover(self._unclaimed.pop(name, []))
        self._recovered = True
        for name in list(self._unclaimed):
            if self.default.definitions.get(VHOST, name) is not None:  # a tombstone: the defined ones have brokers
                self._drop_unclaimed(name)
        for vhost, kept in self._unclaimed.items():
            log.warning("recovery: %d stored messages of vhost %s, which is not configured, are kept untouched; "
                        "configure it (or meshgate vhost add it) to reach them", len(kept), quoted(vhost))
        return count

    def sweep_expired(self) -> None:
        for broker in self:
            broker.sweep_expired()


def messages_held(broker: Broker) -> int:
    """The messages waiting in a vhost's queues and durable subscriptions."""
    return sum(len(q) for q in broker.queues.values()) + sum(len(b.queue) for b in broker.bindings.values())
