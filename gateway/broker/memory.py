"""The node's memory budget (broker.memory_limit): every vhost's broker meters its
queued messages and arriving frames against the one budget, and producers of any
vhost wait while it is full."""

from __future__ import annotations

from typing import Callable


class MemoryBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: list[Callable[[], None]] = []

    @property
    def full(self) -> bool:
        return self.used >= self.limit

    def held_mostly_by(self, own: int) -> bool:
        """A client holding ``own`` bytes of it (an arriving frame, open transactions)
        holds most of it: while memory is full such a client is not paused, as only
        reading on (to its frame's end, its commit or its refusal) can free it."""
        return own * 2 >= self.used

    def reserve(self, size: int) -> None:
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        if self._waiters and self.used < self.limit * 0.9:
            waiters, self._waiters = self._waiters, []
            for callback in waiters:
                callback()

    def when_available(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once memory drains under 90 % of the limit."""
        self._waiters.append(callback)
