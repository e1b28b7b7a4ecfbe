"""The node's metrics loop: a snapshot of the model every interval, and every
event as it happens, to the publisher's streams (docs/management.md gives the
entry format).

A snapshot is taken on the reactor and costs time in proportion to the node's
queues (a few µs each). So that it never takes more than ``MAX_SHARE`` of the
reactor, the next one waits longer when one took long: a node with tens of
thousands of queues writes a snapshot every few seconds instead of every second."""

from __future__ import annotations

import time
from typing import Callable

import msgspec

from metrics.publisher import StreamPublisher
from model.events import Event
from model.mesh import SCHEMA_VERSION, Snapshot

SNAPSHOTS = "snapshots"
EVENTS = "events"
MAX_SHARE = 0.02  # of the reactor's time spent taking snapshots


class MetricsReporter:
    def __init__(self, publisher: StreamPublisher, snapshot: Callable[[], Snapshot], interval: float, reactor,
                 snapshot_retention: float | None = None) -> None:
        self.publisher = publisher
        self.snapshot_retention = snapshot_retention
        self.snapshot = snapshot
        self._encode = msgspec.json.Encoder().encode
        self._reactor = reactor
        self._interval = interval
        self._next = None
        self.last_cost = 0.0  # seconds the last snapshot took

    def start(self) -> None:
        self.publisher.start()
        self._tick()

    def _tick(self) -> None:
        started = time.perf_counter()
        self.publish_snapshot()
        self.last_cost = time.perf_counter() - started
        self._next = self._reactor.callLater(max(self._interval, self.last_cost / MAX_SHARE), self._tick)

    def publish_snapshot(self) -> None:
        snapshot = self.snapshot()
        self.publisher.offer(SNAPSHOTS, {
            "node": snapshot.node.id, "seq": snapshot.seq, "schema": SCHEMA_VERSION, "data": self._encode(snapshot),
        }, keep_seconds=self.snapshot_retention)

    def publish_event(self, event: Event) -> None:
        self.publisher.offer(EVENTS, {
            "node": event.node, "kind": event.__struct_config__.tag, "schema": SCHEMA_VERSION,
            "data": self._encode(event),
        })

    def stop(self) -> None:
        if self._next is not None and self._next.active():
            self._next.cancel()
        self.publisher.stop()
