"""A vhost's view of the node's one store: the Store protocol (gateway.store.base)
over the shared store, its queue keys qualified by the vhost's name
(gateway.store.records.vhost_key), so a vhost's broker never learns of vhosts and
its records never meet another vhost's. The default vhost's broker uses the store
itself: its keys and records are the ones written before vhosts existed."""

from __future__ import annotations

from typing import Callable, Iterator

from twisted.internet.defer import Deferred, succeed

from gateway.broker.message import Message
from gateway.store.base import Store
from gateway.store.records import vhost_key


class VhostStoreView:
    def __init__(self, store: Store, vhost: str) -> None:
        self.store = store
        self.vhost = vhost
        self._prefix = vhost_key(vhost, "")

    @property
    def failure(self) -> str | None:
        return self.store.failure

    @property
    def blocked(self) -> str | None:
        return self.store.blocked

    @property
    def limit(self) -> int | None:
        return self.store.limit

    @property
    def position(self) -> int:
        return self.store.position

    def when_room(self, resume: Callable[[], None]) -> None:
        self.store.when_room(resume)

    def disk_bytes(self) -> int:
        return self.store.disk_bytes()

    def disk_free(self) -> int | None:
        return self.store.disk_free()

    def add(self, queue_key: str, message: Message) -> None:
        self.store.add(self._prefix + queue_key, message)

    def remove(self, queue_key: str, message: Message) -> None:
        self.store.remove(self._prefix + queue_key, message)

    def holds(self, message_id: str) -> bool:
        return self.store.holds(message_id)  # ids are unique across the node's vhosts

    def when_durable(self, told_of_failed_writes: bool = False) -> Deferred:
        return self.store.when_durable(told_of_failed_writes)

    def recover(self) -> Iterator[tuple[str, Message]]:
        # The shared store is recovered once, by the node (VirtualHosts.recover), which
        # hands each vhost's broker its share.
        return iter(())

    def load_catalog(self, vhost: str | None = None) -> dict:
        return self.store.load_catalog(self.vhost)

    def save_catalog(self, catalog: dict, vhost: str | None = None) -> None:
        self.store.save_catalog(catalog, self.vhost)

    def close(self) -> Deferred:
        return succeed(None)  # the node closes the shared store once, after every vhost
