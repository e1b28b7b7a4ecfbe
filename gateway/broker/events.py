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


class VhostEvents:
    """The event sink of a vhost other than ``/``: an event that names a queue or
    destination (one with a ``vhost`` field) gets the vhost's name, then goes to the
    node's sink. The default vhost's broker has the node's sink itself."""

    __slots__ = ("sink", "vhost")

    def __init__(self, sink: EventSink, vhost: str) -> None:
        self.sink = sink
        self.vhost = vhost

    def emit(self, event: Event) -> None:
        if "vhost" in event.__struct_fields__:
            event.vhost = self.vhost  # type: ignore[attr-defined]
        self.sink.emit(event)

    def count(self, event: Event, n: int = 1) -> None:
        if "vhost" in event.__struct_fields__:
            event.vhost = self.vhost  # type: ignore[attr-defined]
        self.sink.count(event, n)
