"""Per-vhost limits, on this node (docs/vhosts.md, "Limits"): RabbitMQ's vhost limits
``max-connections`` and ``max-queues``, and ``max_messages``, the messages a vhost may
hold before its producers are flow-controlled. A vhost without limits costs nothing:
the protocols ask about connections once per connection and about queues once per
new queue name, and only a broker with ``max_messages`` counts its messages.

A vhost's limits come from its ``[[vhosts.host]]`` entry when the node's configuration
lists it, else from its mesh-wide definition (``meshgate vhost add|limits``), followed
as the definition changes: a lowered ``max_connections`` refuses new connections and
closes none, as RabbitMQ's."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from model.definitions import VHOST, VhostSpec
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

    @classmethod
    def of(cls, spec: VhostSpec) -> VhostLimit:
        return cls(max_connections=spec.max_connections, max_queues=spec.max_queues, max_messages=spec.max_messages)


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

    def change(self, maximum: int | None) -> None:
        """A new ``max_messages`` (None: none; the count goes on, for a limit set again):
        producers waiting are read again if the vhost is below it now."""
        self.maximum = sys.maxsize if maximum is None else maximum
        if self._waiters and self.count < self.maximum:
            waiters, self._waiters = self._waiters, []
            for callback in waiters:
                callback()


class VhostLimits:
    """The node's vhost limits and the connections counted against them, STOMP's and
    AMQP's together. Made after recovery: a vhost with ``max_messages`` starts counting
    from what its broker holds then. Used from the reactor thread only."""

    def __init__(self, limits: Mapping[str, VhostLimit] | None = None, vhosts: VirtualHosts | None = None) -> None:
        self._configured = {name: limit for name, limit in (limits or {}).items() if limit.any}
        self._limits = dict(self._configured)
        self._connections: dict[str, int] = {}
        self._stored: dict[str, StoredMessages] = {}
        self._vhosts = vhosts
        for name, limit in self._limits.items():
            self._count_stored(name, limit.max_messages)
        if vhosts is not None:
            for record in vhosts.default.definitions.records():
                if record.kind == VHOST and record.vhost is not None:
                    self.defined(record.name, record.vhost)
            vhosts.limits = self

    def defined(self, vhost: str, spec: VhostSpec | None) -> None:
        """Vhost ``vhost``'s definition changed (None: deleted): its limits follow, unless
        the configuration lists the vhost (its ``[[vhosts.host]]`` entry is what counts)."""
        if vhost in self._configured or (self._vhosts is not None and vhost in self._vhosts.configured):
            return
        if spec is None:
            self._limits.pop(vhost, None)
            self._stored.pop(vhost, None)  # its broker is gone; one made again counts afresh
            self._connections.pop(vhost, None)
            return
        limit = VhostLimit.of(spec)
        if limit.any:
            self._limits[vhost] = limit
        else:
            self._limits.pop(vhost, None)
        stored = self._stored.get(vhost)
        if stored is not None:
            stored.change(limit.max_messages)
        else:
            self._count_stored(vhost, limit.max_messages)

    def _count_stored(self, vhost: str, maximum: int | None) -> None:
        broker = self._vhosts.get(vhost) if self._vhosts is not None else None
        if maximum is not None and broker is not None:
            stored = self._stored[vhost] = StoredMessages(maximum)
            broker.count_stored(stored)

    def connect(self, vhost: str) -> str | None:
        """Count a new connection to ``vhost``; the refusal (RabbitMQ's words) instead
        when the vhost has its ``max_connections`` already. A counted connection is
        given back with :meth:`disconnect`. Every vhost's are counted (once per
        connection): a limit set later is held against those open then."""
        count = self._connections.get(vhost, 0)
        limit = self._limits.get(vhost)
        if limit is not None and limit.max_connections is not None and count >= limit.max_connections:
            return f"connection limit ({limit.max_connections}) of vhost {quoted(vhost)} is reached"
        self._connections[vhost] = count + 1
        return None

    def disconnect(self, vhost: str) -> None:
        count = self._connections.get(vhost)
        if count is not None:
            self._connections[vhost] = count - 1

    def limit(self, vhost: str) -> VhostLimit:
        """``vhost``'s limits in force on this node (all None: none)."""
        return self._limits.get(vhost) or VhostLimit()

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
        limit = self._limits.get(vhost)
        return self._stored.get(vhost) if limit is not None and limit.max_messages is not None else None
