"""The node's metrics loop: a snapshot of the model every interval, and every
event as it happens, to the publisher's streams (docs/management.md gives the
entry format)."""

from __future__ import annotations

from typing import Callable

import msgspec
from twisted.internet import task

from metrics.publisher import StreamPublisher
from model.events import Event
from model.mesh import SCHEMA_VERSION, Snapshot

SNAPSHOTS = "snapshots"
EVENTS = "events"


class MetricsReporter:
    def __init__(self, publisher: StreamPublisher, snapshot: Callable[[], Snapshot], interval: float, reactor) -> None:
        self.publisher = publisher
        self.snapshot = snapshot
        self._encode = msgspec.json.Encoder().encode
        self._loop = task.LoopingCall(self.publish_snapshot)
        self._loop.clock = reactor
        self._interval = interval

    def start(self) -> None:
        self.publisher.start()
        self._loop.start(self._interval, now=True)

    def publish_snapshot(self) -> None:
        snapshot = self.snapshot()
        self.publisher.offer(SNAPSHOTS, {
            "node": snapshot.node.id, "seq": snapshot.seq, "schema": SCHEMA_VERSION, "data": self._encode(snapshot),
        })

    def publish_event(self, event: Event) -> None:
        self.publisher.offer(EVENTS, {
            "node": event.node, "kind": event.__struct_config__.tag, "schema": SCHEMA_VERSION,
            "data": self._encode(event),
        })

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()
        self.publisher.stop()
