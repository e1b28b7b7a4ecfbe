"""The node's metrics loop: a snapshot of the model every interval, and every
event as it happens, to the publisher's streams (docs/management.md gives the
entry format).

A snapshot is taken on the reactor and costs time in proportion to the node's
queues (a few µs each). So that it never takes more than ``MAX_SHARE`` of the
reactor, the next one waits longer when one took long: a node with tens of
thousands of queues writes a snapshot every few seconds instead of every second.

On each 10-second window's first moment the loop has the queues' deepest depth
start afresh, so that a window's last snapshot carries the window's deepest
(``window_depth_max``), seen or not by any snapshot."""

from __future__ import annotations

import time
from typing import Callable

import msgspec

from metrics.publisher import StreamPublisher
from model.events import Event
from model.journeys import JourneyStep
from model.mesh import SCHEMA_VERSION, WINDOW_S, Snapshot

SNAPSHOTS = "snapshots"
EVENTS = "events"
# Journey records (docs/journeys.md) have a stream of their own: traced at 100 %, a queue
# makes several per message, which in the events stream would push every event out.
JOURNEYS = "journeys"
MAX_SHARE = 0.02  # of the reactor's time spent taking snapshots


def snapshot_fields(snapshot: Snapshot, data: bytes) -> dict:
    """A snapshot's stream entry: ``data`` (its JSON) and, beside it, what a reader
    needs to place it without decoding it (the metrics pipeline decodes only a
    window's first and last snapshot of a node start)."""
    return {"node": snapshot.node.id, "seq": snapshot.seq, "schema": SCHEMA_VERSION,
            "boot": repr(snapshot.node.started_at), "at": repr(snapshot.taken_at),
            "queues": snapshot.queues_version, "data": data}


class MetricsReporter:
    def __init__(self, publisher: StreamPublisher, snapshot: Callable[[], Snapshot], interval: float, reactor,
                 snapshot_retention: float | None = None, roll_window: Callable[[float], None] | None = None) -> None:
        self.publisher = publisher
        self.snapshot_retention = snapshot_retention
        self.snapshot = snapshot
        self._encode = msgspec.json.Encoder().encode
        self._reactor = reactor
        self._interval = interval
        self._next = None
        self._roll_window = roll_window
        self._next_window = None
        self.last_cost = 0.0  # seconds the last snapshot took

    def start(self) -> None:
        self.publisher.start()
        self._tick()
        if self._roll_window is not None:
            self._window(self._roll_window)

    def _window(self, roll_window: Callable[[float], None]) -> None:
        now = self._reactor.seconds()
        roll_window(now)
        self._next_window = self._reactor.callLater(WINDOW_S - now % WINDOW_S, self._window, roll_window)

    def _tick(self) -> None:
        started = time.perf_counter()
        self.publish_snapshot()
        self.last_cost = time.perf_counter() - started
        self._next = self._reactor.callLater(max(self._interval, self.last_cost / MAX_SHARE), self._tick)

    def publish_snapshot(self) -> None:
        snapshot = self.snapshot()
        self.publisher.offer(SNAPSHOTS, snapshot_fields(snapshot, self._encode(snapshot)),
                             keep_seconds=self.snapshot_retention)

    def publish_event(self, event: Event) -> None:
        self.publisher.offer(EVENTS, {
            "node": event.node, "kind": event.__struct_config__.tag, "schema": SCHEMA_VERSION,
            "data": self._encode(event),
        })

    def publish_journey_step(self, step: JourneyStep) -> None:
        self.publisher.offer(JOURNEYS, {
            "node": step.node, "root": step.root, "step": step.step, "schema": SCHEMA_VERSION,
            "data": self._encode(step),
        })

    def stop(self) -> None:
        for call in (self._next, self._next_window):
            if call is not None and call.active():
                call.cancel()
        self.publisher.stop()
