"""The node's journey records (docs/journeys.md): what gateway.broker.tracing.Tracer
records of traced messages, kept in memory, bounded three ways — a number of records,
approximate bytes and an age — the oldest going first, and found by message id.

Records arrive in the order the tracer makes them, so the oldest record is the head of
``records`` and the head of its message's list in ``by_root``: eviction is O(1)."""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable

from model.journey_requests import MAX_HITS
from model.journeys import JourneyStep, JourneySummary, root_of

# What one record costs beyond its text (the struct's slots, the deque and index entries):
# an estimate, so that a flood of small records still meets max_bytes.
RECORD_OVERHEAD = 400
HEADER_OVERHEAD = 100  # a kept header's dictionary entry and string objects, beyond its text
# Records one ``steps_of`` answer holds at most: a request must not build a reply of any size.
MAX_ANSWER = 10_000


def record_size(step: JourneyStep) -> int:
    """The approximate bytes ``step`` holds (its text fields are bounded: model.journeys.short)."""
    # Four ids' worth: the id, the root, and a next_id or from_id (next_id is set after the record
    # is added, so it is not measured).
    size = RECORD_OVERHEAD + 4 * len(step.id)
    for text in (step.queue, step.destination, step.connection, step.user, step.remote, step.reason,
                 step.exchange, step.routing_key, step.body_preview):
        if text is not None:
            size += len(text)
    if step.headers:  # a dictionary entry beyond each header's text
        size += sum(HEADER_OVERHEAD + len(name) + len(value) for name, value in step.headers.items())
    return size


class JourneyStore:
    def __init__(self, max_records: int, max_bytes: int, max_age_s: float, clock: Callable[[], float]) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self.records: deque[JourneyStep] = deque()
        self.sizes: deque[int] = deque()  # record_size of each record, measured once: it is not cheap
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
        size = record_size(step)
        self.sizes.append(size)
        self.bytes += size
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

    def search(self, *, queue: str | None = None, vhost: str | None = None, header: tuple[str, str] | None = None,
               since: float | None = None, until: float | None = None, body: str | None = None,
               limit: int = MAX_HITS) -> list[JourneySummary]:
        """The journeys recorded here that match every filter given, newest first, ``limit`` at
        most: ``queue`` (of ``vhost``, any vhost when None) received for it or put in it, a
        received ``header`` (name, value) exactly, a ``body`` substring of the kept preview, a
        first record here from ``since`` to ``until``. It looks at each record once at most."""
        hits: list[JourneySummary] = []
        limit = min(limit, MAX_HITS)
        for steps in reversed(self.by_root.values()):  # by first record: newest first
            if len(hits) >= limit:
                break
            first = steps[0]
            if (since is not None and first.time < since) or (until is not None and first.time > until):
                continue
            if vhost is not None and first.vhost != vhost:
                continue
            hit = _matching(steps, queue, header, body)
            if hit is not None:
                hits.append(hit)
        return hits

    def _evict_oldest(self) -> None:
        step = self.records.popleft()
        steps = self.by_root[step.root]
        steps.popleft()  # the oldest of its message's too: records come in order
        if not steps:
            del self.by_root[step.root]
        self.bytes -= self.sizes.popleft()
        self.evicted += 1


def _matching(steps: deque[JourneyStep], queue: str | None, header: tuple[str, str] | None,
              body: str | None) -> JourneySummary | None:
    """A message's records here as a hit, if they match each filter given."""
    by_queue = queue is None
    by_header = header is None
    by_body = body is None
    matched = steps[0]
    destination = ""
    received = None
    for step in steps:
        if step.step == "received":
            destination = destination or step.destination or ""
            received = received or step
            if header is not None and step.headers is not None and step.headers.get(header[0]) == header[1]:
                by_header, matched = True, step
            if body is not None and step.body_preview is not None and body in step.body_preview:
                by_body, matched = True, step
        if queue is not None and (step.queue == queue or (step.step == "received"
                                                          and step.destination == "/queue/" + queue)):
            by_queue, matched = True, step
    if not (by_queue and by_header and by_body):
        return None
    if not destination:
        destination = next((f"/queue/{step.queue}" for step in steps if step.queue is not None), "")
    first, last = steps[0], steps[-1]
    return JourneySummary(root=first.root, id=matched.id, node=first.node, node_name=first.node_name,
                          time=first.time, destination=destination, last_step=last.step, last_time=last.time,
                          steps=len(steps), headers=None if received is None else received.headers,
                          body_preview=None if received is None else received.body_preview)
