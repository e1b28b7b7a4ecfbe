"""The seam between the broker core and a storage backend."""

from __future__ import annotations

from typing import Callable, Iterator, Protocol

from twisted.internet.defer import Deferred

from gateway.broker.message import Message
from model.names import DEFAULT_VHOST


class Store(Protocol):
    # Read-only here: only the store itself changes them (a vhost's view passes them on).
    @property
    def failure(self) -> str | None:
        """Why writing fails now (a full disk), else None: persistent sends are refused meanwhile."""

    @property
    def blocked(self) -> str | None:
        """Why persistent producers wait (store.limit, store.max_disk_usage), else None."""

    @property
    def limit(self) -> int | None:
        """store.limit: bytes on disk past which persistent producers wait."""

    @property
    def position(self) -> int:
        """Grows with every record; unchanged means nothing new to sync."""

    def when_room(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` once persistent producers may go on."""

    def disk_bytes(self) -> int:
        """The store's size on disk."""

    def disk_free(self) -> int | None:
        """Bytes free on the store's filesystem (None: not on a filesystem, or unknown)."""

    def add(self, queue_key: str, message: Message) -> None:
        """Record a persistent message in a queue (durable once a sync covers it)."""

    def remove(self, queue_key: str, message: Message) -> None:
        """Record that a stored message was consumed."""

    def holds(self, message_id: str) -> bool:
        """Whether a message of this id is stored (in any queue)."""

    def when_durable(self, told_of_failed_writes: bool = False) -> Deferred:
        """Fire once everything recorded so far is on stable storage; fail if it
        cannot be (and, if asked, as soon as a write covering it fails)."""

    def recover(self) -> Iterator[tuple[str, Message]]:
        """Every stored message not yet removed, in the order it was added."""

    def load_catalog(self, vhost: str = DEFAULT_VHOST) -> dict: ...

    def save_catalog(self, catalog: dict, vhost: str = DEFAULT_VHOST) -> None:
        """Durably replace a vhost's catalog (queue and durable subscription definitions)."""

    def close(self) -> Deferred:
        """Sync what is pending and release the files."""
