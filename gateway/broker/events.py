"""The seam through which the broker core and the mesh report what happens
(model.events): the node's event log implements it; tests and a bare broker use
the null sink."""

from __future__ import annotations

from typing import Protocol

from model.events import Event


class EventSink(Protocol):
    def emit(self, event: Event) -> None:
        """Record one event now."""

    def count(self, event: Event, n: int = 1) -> None:
        """Add ``n`` to ``event.count`` for events like this one (same kind and
        fields but the count), reported together about once a second."""


class NullEvents:
    def emit(self, event: Event) -> None:
        pass

    def count(self, event: Event, n: int = 1) -> None:
        pass
