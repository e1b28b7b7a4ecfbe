"""Per-vhost limits, on this node (docs/vhosts.md, "Limits"): RabbitMQ's vhost limits
``max-connections`` and ``max-queues``, and ``max_messages``, the messages a vhost may
hold before its producers are flow-controlled. A vhost without limits costs nothing:
the protocols ask about connections once per connection and about queues once per
new queue name, and only a broker with ``max_messages`` counts its messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from model.names import quoted

if TYPE_CHECKING:
    from gateway.broker.vhosts import VirtualHosts

__all__ = ["StoredMessages", "VhostLimit", "VhostLimits"]


@dataclass(frozen=True)
class VhostLimit:
    """None: no limit (RabbitMQ's -1)."""

    max_connections: int | None = None
    max_queues: int | None = None
    max_messages: int | None = None

    @property
    def any(self) -> bool:
        return self.max_connections is not None or self.max_queues is not None or self.max_messages is not None


class StoredMessages:
    """The messages a vhost's broker holds (waiting or delivered and not yet
    acknowledged), against its ``max_messages``: while it is full, the vhost's
    producers are not read; they are read again once a message goes."""

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self.count = 0
        self._waiters: list[Callable[[], None]] = []

    @property
    def full(self) -> bool:
        return self.count >= self.maximum

    def added(self) -> None:
        self.count += 1

    def removed(self) -> None:
        self.count -= 1
        if self._waiters and self.count < self.maximum:
            waiters, self._waiters = self._waiters, []
            for callback in waiters:
                callback()

    def when_below(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the vhost holds fewer than ``maximum`` messages."""
        self._waiters.append(callback)


class VhostLimits:
    """The node's vhost limits and the connections counted against them, STOMP's and
    AMQP's together. Made after recovery: a vhost with ``max_messages`` starts counting
    from what its broker holds then. Used from the reactor thread only."""

    def __init__(self, limits: Mapping[str, VhostLimit] | None = None, vhosts: VirtualHosts | None = None) -> None:
        self._limits = {name: limit for name, limit in (limits or {}).items() if limit.any}
        self._connections: dict[str, int] = {}
        self._stored: dict[str, StoredMessages] = {}
        for name, limit in self._limits.items():
            broker = vhosts.get(name) if vhosts is not None else None
            if limit.max_messages is not None and broker is not None:
                stored = self._stored[name] = StoredMessages(limit.max_messages)
                broker.count_stored(stored)

    def connect(self, vhost: str) -> str | None:
        """Count a new connection to ``vhost``; the refusal (RabbitMQ's words) instead
        when the vhost has its ``max_connections`` already. A counted connection is
        given back with :meth:`disconnect`."""
        limit = self._limits.get(vhost)
        if limit is None or limit.max_connections is None:
            return None
        count = self._connections.get(vhost, 0)
        if count >= limit.max_connections:
            return f"connection limit ({limit.max_connections}) of vhost {quoted(vhost)} is reached"
        self._connections[vhost] = count + 1
        return None

    def disconnect(self, vhost: str) -> None:
        count = self._connections.get(vhost)
        if count is not None:
            self._connections[vhost] = count - 1

    def max_queues(self, vhost: str) -> int | None:
        limit = self._limits.get(vhost)
        return None if limit is None else limit.max_queues

    def queue_refusal(self, vhost: str, queues: int) -> str | None:
        """Why a new queue may not be made in ``vhost``, which holds ``queues`` (RabbitMQ's
        words); None when it may."""
        maximum = self.max_queues(vhost)
        if maximum is None or queues < maximum:
            return None
        return f"queue limit in vhost {quoted(vhost)} ({maximum}) is reached"

    def stored(self, vhost: str) -> StoredMessages | None:
        """What ``vhost``'s producers wait on, None if it has no ``max_messages``."""
        return self._stored.get(vhost)
