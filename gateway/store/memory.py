"""A store that keeps nothing: every message lives and dies with the process."""

from __future__ import annotations

from typing import Iterator

from twisted.internet.defer import Deferred, succeed

from gateway.broker.message import Message
from model.names import DEFAULT_VHOST


class MemoryStore:
    def __init__(self) -> None:
        self.catalog: dict = {}
        self.vhost_catalogs: dict[str, dict] = {}
        self.messages: dict[tuple[str, str], Message] = {}

    position = 0
    failure: str | None = None  # memory never fails to write
    blocked: str | None = None  # nor runs out of room
    limit: int | None = None

    def when_room(self, resume) -> None:
        resume()

    def disk_bytes(self) -> int:
        return 0

    def disk_free(self) -> int | None:
        return None

    def add(self, queue_key: str, message: Message) -> None:
        self.messages[(queue_key, message.id)] = message

    def remove(self, queue_key: str, message: Message) -> None:
        self.messages.pop((queue_key, message.id), None)

    def holds(self, message_id: str) -> bool:
        return any(mid == message_id for _, mid in self.messages)

    def when_durable(self, told_of_failed_writes: bool = False) -> Deferred:
        return succeed(None)

    def recover(self) -> Iterator[tuple[str, Message]]:
        return iter(())

    def load_catalog(self, vhost: str = DEFAULT_VHOST) -> dict:
        return dict(self.catalog if vhost == DEFAULT_VHOST else self.vhost_catalogs.get(vhost, {}))

    def save_catalog(self, catalog: dict, vhost: str = DEFAULT_VHOST) -> None:
        if vhost == DEFAULT_VHOST:
            self.catalog = catalog
        else:
            self.vhost_catalogs[vhost] = catalog

    def close(self) -> Deferred:
        return succeed(None)
