"""The node's event log: every model.events event the broker, the mesh and the
management service report, stamped with the time and this node's id, kept (the
newest ``keep``) for ``events`` requests and handed to the sinks that want them
(the metrics publisher)."""

from __future__ import annotations

import logging
from collections import deque
from typing import Callable

from model.events import Event

log = logging.getLogger(__name__)
_UNSTAMPED = ("time", "node", "count")


class EventLog:
    def __init__(self, node_id: str, reactor, keep: int = 1000, count_window: float = 1.0) -> None:
        self.node_id = node_id
        self.reactor = reactor
        self.recent: deque[Event] = deque(maxlen=keep)
        self.sinks: list[Callable[[Event], None]] = []
        self._count_window = count_window
        self._counts: dict[tuple, list] = {}  # what an event counts -> [the event, count so far]
        self._flush_call = None

    def emit(self, event: Event) -> None:
        event.time = self.reactor.seconds()
        event.node = self.node_id
        self.recent.append(event)
        for sink in self.sinks:
            try:
                sink(event)
            except Exception:  # whoever reported the event (the broker, the mesh) must not fail for a sink
                log.exception("event sink %r failed", sink)

    def count(self, event: Event, n: int = 1) -> None:
        key = (type(event), *(getattr(event, f) for f in event.__struct_fields__ if f not in _UNSTAMPED))
        counted = self._counts.get(key)
        if counted is None:
            self._counts[key] = [event, n]
        else:
            counted[1] += n
        if self._flush_call is None:
            self._flush_call = self.reactor.callLater(self._count_window, self.flush)

    def flush(self) -> None:
        """Report what was counted since the last flush, one event per kind and subject."""
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None
        counts, self._counts = self._counts, {}
        for event, n in counts.values():
            event.count = n
            self.emit(event)

    def query(self, since: float = 0.0, kinds: list[str] | None = None, limit: int = 100) -> list[Event]:
        """The newest ``limit`` events after ``since``, oldest first."""
        wanted = set(kinds or ())
        found: list[Event] = []
        for event in reversed(self.recent):
            if event.time <= since or len(found) >= limit:
                break
            if not wanted or event.__struct_config__.tag in wanted:
                found.append(event)
        found.reverse()
        return found
