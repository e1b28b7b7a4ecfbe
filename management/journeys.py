"""The node's journey records (docs/journeys.md): what gateway.broker.tracing.Tracer
records of traced messages, kept in memory, bounded three ways — a number of records,
approximate bytes and an age — the oldest going first, and found by message id.

A record is kept as the tracer gives it, a plain tuple (``Record``), and becomes a
model.journeys.JourneyStep only when somebody reads it (``steps_of``, ``search``, the
``[metrics]`` stream): a traced message's steps are on the per-message path, reading
them is not, and a struct and an index per record cost three times the tuple
(docs/performance.md, "The 1 % sample"). So there is no index: a read looks at every
record once (about 20 ms for 200,000 on this machine, measured in
tests/unit/test_journeys.py's sizes of reads). Records arrive in the order they are made,
so the oldest is the head of ``records`` and eviction is O(1)."""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Callable, Final, Iterable

from model.journey_requests import MAX_HITS
from model.journeys import MAX_FIELD, JourneyStep, JourneySummary, RecordClient, RecordOrigin, Step, root_of, short

# What one record costs beyond its text (the tuple, its deque slot, the id's string): an
# estimate, so that a flood of small records still meets max_bytes.
RECORD_OVERHEAD = 200
# Records one ``steps_of`` answer holds at most: a request must not build a reply of any size.
MAX_ANSWER = 10_000

# A record: (seq, time, origin, step, message id, queue name or None, the step's other
# JourneyStep fields or None, its size in bytes as counted against max_bytes, the client
# it names or None).
Record = tuple[int, float, RecordOrigin, Step, str, str | None, dict[str, Any] | None, int, RecordClient | None]
_TIME: Final = 1
_ORIGIN: Final = 2
_STEP: Final = 3
_ID: Final = 4
_QUEUE: Final = 5
_FIELDS: Final = 6
_SIZE: Final = 7


def step_of(record: Record) -> JourneyStep:
    """``record`` as the model's JourneyStep."""
    seq, time, (node, node_name, vhost), step, message_id, queue, fields, _, client = record
    made = JourneyStep(root=root_of(message_id), id=message_id, node=node, node_name=node_name,
                       seq=seq, time=time, step=step, vhost=vhost, queue=queue)
    if client is not None:
        made.protocol, made.connection, made.remote, made.user = client
    if fields:
        for name, value in fields.items():
            setattr(made, name, value)
    return made


class JourneyStore:
    """The records of one node (every vhost's tracer adds to it): ``seq`` numbers them in
    the order they are made, ``time`` is the clock's when they are."""

    def __init__(self, max_records: int, max_bytes: int, max_age_s: float, clock: Callable[[], float]) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self.records: deque[Record] = deque()
        self.bytes = 0
        self.recorded = 0  # records ever added (those evicted included)
        self.evicted = 0
        self.sinks: list[Callable[[JourneyStep], None]] = []  # where each record goes too ([metrics]: Redis)
        self._seq = itertools.count(1)

    def __len__(self) -> int:
        return len(self.records)

    def add(self, origin: RecordOrigin, step: Step, message_id: str, queue: str | None,
            fields: dict[str, Any] | None, fields_bytes: int, client: RecordClient | None) -> None:
        """Keep one record of ``message_id``'s ``step`` (in ``queue``) made by ``origin``'s tracer;
        ``fields``: its other JourneyStep fields, if any (text, numbers, a dictionary of text:
        the garbage collector stops following a record of those), holding ``fields_bytes``
        (model.journeys.fields_size); ``client``: the client it names, if any."""
        if len(message_id) > MAX_FIELD:  # ids and queue names are short but for a hostile peer's or client's
            message_id = short(message_id)
        size = RECORD_OVERHEAD + len(message_id) + fields_bytes
        if queue is not None:
            if len(queue) > MAX_FIELD:
                queue = short(queue)
            size += len(queue)
        records = self.records
        record = (next(self._seq), self.clock(), origin, step, message_id, queue, fields, size, client)
        records.append(record)
        self.bytes += size
        self.recorded += 1
        if self.sinks:
            made = step_of(record)
            for sink in self.sinks:
                sink(made)
        while self.bytes > self.max_bytes or len(records) > self.max_records:
            self._evict_oldest()

    def sweep(self) -> int:
        """Drop the records older than max_age_s; how many went."""
        oldest_kept = self.clock() - self.max_age_s
        records = self.records
        count = 0
        while records and records[0][_TIME] < oldest_kept:
            self._evict_oldest()
            count += 1
        return count

    def steps(self) -> list[JourneyStep]:
        """Every record, oldest first."""
        return [step_of(record) for record in self.records]

    def steps_of(self, ids: Iterable[str]) -> list[JourneyStep]:
        """The records of the messages ``ids`` names, in the order they were made: a root id
        gives every copy of it (fan-out ``ID.N``, ``ID.q``), a copy's id that copy's alone."""
        wanted = set(ids)
        roots = {message_id for message_id in wanted if root_of(message_id) == message_id}
        found = []
        for record in self.records:
            message_id = record[_ID]
            if message_id in wanted or message_id.partition(".")[0] in roots:  # root_of, inline
                found.append(step_of(record))
                if len(found) == MAX_ANSWER:
                    break
        return found

    def search(self, *, queue: str | None = None, vhost: str | None = None, header: tuple[str, str] | None = None,
               since: float | None = None, until: float | None = None, body: str | None = None,
               limit: int = MAX_HITS) -> list[JourneySummary]:
        """The journeys recorded here that match every filter given, newest first, ``limit`` at
        most: ``queue`` (of ``vhost``, any vhost when None) received for it or put in it, a
        received ``header`` (name, value) exactly, a ``body`` substring of the kept preview, a
        first record here from ``since`` to ``until``. It looks at each record twice at most."""
        hits: list[JourneySummary] = []
        limit = min(limit, MAX_HITS)
        for records in reversed(self._journeys().values()):  # by first record: newest first
            if len(hits) >= limit:
                break
            first = records[0]
            if (since is not None and first[_TIME] < since) or (until is not None and first[_TIME] > until):
                continue
            if vhost is not None and first[_ORIGIN][2] != vhost:
                continue
            hit = _matching(records, queue, header, body)
            if hit is not None:
                hits.append(hit)
        return hits

    def _journeys(self) -> dict[str, list[Record]]:
        """The records by journey (their message's root id), journeys in the order of their first record."""
        journeys: dict[str, list[Record]] = {}
        for record in self.records:
            root = record[_ID].partition(".")[0]  # root_of, inline: this runs for every record
            records = journeys.get(root)
            if records is None:
                journeys[root] = [record]
            else:
                records.append(record)
        return journeys

    def _evict_oldest(self) -> None:
        self.bytes -= self.records.popleft()[_SIZE]
        self.evicted += 1


def _matching(records: list[Record], queue: str | None, header: tuple[str, str] | None,
              body: str | None) -> JourneySummary | None:
    """A message's records here as a hit, if they match each filter given."""
    by_queue = queue is None
    by_header = header is None
    by_body = body is None
    matched = records[0]
    destination = ""
    received: dict[str, Any] | None = None
    for record in records:
        step, fields = record[_STEP], record[_FIELDS] or {}
        if step == "received":
            destination = destination or fields.get("destination") or ""
            received = received or fields
            headers = fields.get("headers")
            if header is not None and headers is not None and headers.get(header[0]) == header[1]:
                by_header, matched = True, record
            preview = fields.get("body_preview")
            if body is not None and preview is not None and body in preview:
                by_body, matched = True, record
        if queue is not None and (record[_QUEUE] == queue
                                  or (step == "received" and fields.get("destination") == "/queue/" + queue)):
            by_queue, matched = True, record
    if not (by_queue and by_header and by_body):
        return None
    if not destination:
        destination = next((f"/queue/{record[_QUEUE]}" for record in records
                            if record[_QUEUE] is not None), "")
    first, last = records[0], records[-1]
    return JourneySummary(root=root_of(first[_ID]), id=matched[_ID], node=first[_ORIGIN][0],
                          node_name=first[_ORIGIN][1], time=first[_TIME], destination=destination,
                          last_step=last[_STEP], last_time=last[_TIME], steps=len(records),
                          headers=None if received is None else received.get("headers"),
                          body_preview=None if received is None else received.get("body_preview"))
