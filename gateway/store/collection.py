"""Giving the journal's disk back: dead segments deleted, a mostly-dead one compacted.

:class:`SegmentCollection` is mixed into the journal (gateway/store/journal.py).
Segments are deleted oldest first once nothing in them is live, which keeps the
removals recorded in younger segments safe to forget. An old segment that is
mostly dead has its live messages re-appended, and goes once the copies are
durable (the journal's ``_synced`` deletes it), so one stuck message cannot pin
the disk. What collection uses of the journal is declared in
:class:`CollectedJournal` (each method's ``self``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from twisted.internet.defer import Deferred

from gateway.broker.message import Message
from gateway.store.segments import segment_path


class CollectedJournal(Protocol):
    dir: Path
    reactor: Any  # IReactorTime (a MemoryReactorClock in tests)
    segment_size: int
    blocked: str | None
    # segment number -> {(queue key, message id): message}: what is live in it
    _live: dict[int, dict[tuple[str, str], Message]]
    _live_bytes: dict[int, int]
    _compacting: tuple[Path, int] | None
    _collect_scheduled: bool
    _appended: int
    _bytes: int

    def add(self, queue_key: str, message: Message) -> None: ...

    def when_durable(self, told_of_failed_writes: bool = False) -> Deferred: ...

    def check_room(self) -> None: ...

    def _forget_id(self, message_id: str) -> None: ...

    def _collect(self) -> None: ...

    def _delete(self, path: Path) -> None: ...


class SegmentCollection:
    def __init__(self) -> None:
        self._collect_scheduled = False
        # The segment whose live records were copied, and where the copies end: it goes once they are durable.
        self._compacting: tuple[Path, int] | None = None

    def _collect(self: CollectedJournal) -> None:
        """Delete dead segments, oldest first; compact a mostly-dead oldest one."""
        self._collect_scheduled = False
        while len(self._live) >= 2:
            oldest = min(self._live)
            live = self._live[oldest]
            path = segment_path(self.dir, oldest)
            if not live:
                del self._live[oldest], self._live_bytes[oldest]
                self._delete(path)
                continue
            if len(self._live) < 4 or self._live_bytes[oldest] * 2 > self.segment_size:
                return
            if self._compacting is not None:
                # One compaction at a time: each holds up to half a segment twice until its
                # copies are durable, and a fast consumer could start one per segment on a
                # nearly full disk.
                return
            # Re-append what is still live; the old file goes once the copies are durable.
            moved = list(live.items())
            del self._live[oldest], self._live_bytes[oldest]
            for (queue_key, _), message in moved:
                self._forget_id(message.id)  # add() counts it again
                self.add(queue_key, message)
            self._compacting = (path, self._appended)
            self.when_durable()  # the copies go out now, not with the next write
            return

    def _collect_soon(self: CollectedJournal) -> None:
        if not self._collect_scheduled:
            self._collect_scheduled = True
            self.reactor.callLater(0, self._collect)

    def _delete(self: CollectedJournal, path: Path) -> None:
        try:
            self._bytes -= path.stat().st_size
        except OSError:
            return  # gone already
        path.unlink(missing_ok=True)
        if self.blocked is not None:
            self.check_room()
