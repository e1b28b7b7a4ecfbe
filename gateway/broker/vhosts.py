"""A node's virtual hosts: name -> the Broker that is that vhost's namespace (its
queues, topics and durable subscriptions, exchanges and bindings, temp queues,
definitions, DLQ and expiry queue). Nothing crosses between two brokers, so
isolation costs nothing per message. What they share is the node's: one store
(each vhost's broker writes through a view qualifying its keys), one memory
budget, the event sink, the clock, the message id sequence and the settings.

The default vhost ``/`` is the broker a node had before vhosts: it uses the store
itself, and the mesh, management and metrics hold it alone (docs/vhosts.md)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from gateway.broker.broker import Broker
from gateway.broker.memory import MemoryBudget
from gateway.broker.message import Message
from gateway.store.base import Store
from gateway.store.records import split_key
from gateway.store.vhost_view import VhostStoreView
from model.names import DEFAULT_VHOST, check_vhost_name, quoted

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_VHOST", "VirtualHosts"]


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
        for name in names:
            self.add(name)

    def add(self, name: str) -> Broker:
        """The broker of vhost ``name``, made if it is new (before recovery: ``recover``
        fills it); InvalidName if no vhost may be called that."""
        broker = self.brokers.get(name)
        if broker is None:
            check_vhost_name(name)  # also what keeps VHOST_MARK out of the store's qualified keys
            broker = self.brokers[name] = Broker(VhostStoreView(self.store, name), **self._settings)
        return broker

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
        holds); a record of a vhost not configured stays in the store untouched."""
        shares: dict[str | None, list[tuple[str, Message]]] = {None: []}
        for key, message in self.store.recover():
            vhost, queue_key = split_key(key)
            share = shares.get(vhost)
            if share is None:
                share = shares[vhost] = []
            share.append((queue_key if vhost is not None else key, message))
        count = self.default.recover(shares.pop(None))
        for name, broker in self.brokers.items():
            if name == DEFAULT_VHOST:
                continue
            count += broker.recover(shares.pop(name, []))
        for vhost, kept in shares.items():
            log.warning("recovery: %d stored messages of vhost %s, which is not configured, are kept untouched; "
                        "configure it to reach them", len(kept), quoted(vhost or ""))
        return count

    def sweep_expired(self) -> None:
        for broker in self:
            broker.sweep_expired()
