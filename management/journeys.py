"""The node's journey records (docs/journeys.md): what gateway.broker.tracing.Tracer
records of traced messages, kept in memory, bounded three ways — a number of records,
approximate bytes and an age — the oldest going first, and found by message id.

Records arrive in the order the tracer makes them, so the oldest record is the head of
``records`` and the head of its message's list in ``by_root``: eviction is O(1)."""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable

from model.journeys import JourneyStep, root_of

# What one record costs beyond its text (the struct's slots, the deque and index entries):
# an estimate, so that a flood of small records still meets max_bytes.
RECORD_OVERHEAD = 400
# Records one ``steps_of`` answer holds at most: a request must not build a reply of any size.
MAX_ANSWER = 10_000


def record_size(step: JourneyStep) -> int:
    """The approximate bytes ``step`` holds (its text fields are bounded: model.journeys.short)."""
    # Four ids' worth: the id, the root, and a next_id or from_id (next_id is set after the record
    # is added, so it is not measured: added and evicted sizes must agree).
    size = RECORD_OVERHEAD + 4 * len(step.id)
    for text in (step.queue, step.destination, step.connection, step.user, step.remote, step.reason,
                 step.exchange, step.routing_key):
        if text is not None:
            size += len(text)
    return size


class JourneyStore:
    def __init__(self, max_records: int, max_bytes: int, max_age_s: float, clock: Callable[[], float]) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self.records: deque[JourneyStep] = deque()
        self.by_root: dict[str, deque[JourneyStep]] = {}
        self.bytes = 0
        self.recorded = 0  # records ever added (those evicted included)
        self.evicted = 0
        self.sinks: list[Callable[[JourneyStep], None]] = []  # where each record goes too ([metrics]: Redis)

    def __len__(self) -> int:
        return len(self.records)

    def add(self, step: JourneyStep) -> None:
        self.records.append(step)
        steps = self.by_root.get(step.root)
        if steps is None:
            steps = self.by_root[step.root] = deque()
        steps.append(step)
        self.bytes += record_size(step)
        self.recorded += 1
        for sink in self.sinks:
            sink(step)
        while len(self.records) > self.max_records or self.bytes > self.max_bytes:
            self._evict_oldest()

    def sweep(self) -> int:
        """Drop the records older than max_age_s; how many went."""
        oldest_kept = self.clock() - self.max_age_s
        records = self.records
        count = 0
        while records and records[0].time < oldest_kept:
            self._evict_oldest()
            count += 1
        return count

    def steps_of(self, ids: Iterable[str]) -> list[JourneyStep]:
        """The records of the messages ``ids`` names, in the order they were made: a root id
        gives every copy of it (fan-out ``ID.N``, ``ID.q``), a copy's id that copy's alone."""
        found: dict[int, JourneyStep] = {}
        for message_id in ids:
            steps = self.by_root.get(root_of(message_id))
            if not steps:
                continue
            whole = message_id == steps[0].root
            for step in steps:
                if whole or step.id == message_id:
                    found[step.seq] = step
        return [found[seq] for seq in sorted(found)][:MAX_ANSWER]

    def _evict_oldest(self) -> None:
        step = self.records.popleft()
        steps = self.by_root[step.root]
        steps.popleft()  # the oldest of its message's too: records come in order
        if not steps:
            del self.by_root[step.root]
        self.bytes -= record_size(step)
        self.evicted += 1
