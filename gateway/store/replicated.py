"""The journal of a replicated primary (``[ha] mode = "replicated"``, docs/ha.md).

:class:`ReplicatedJournalStore` is the :class:`JournalStore` with a *replica sink*:
every write the journal makes (segment, offset, bytes), every new or deleted
segment and every catalog save is handed to the sink, which streams it to the
backup. With ``sync`` and a backup that is caught up, a position is durable only
once the local ``fdatasync`` *and* the backup's acknowledgement cover it — one ack
covers every record the backup made durable, so the group commit stays one group
commit across both. A node without replication uses the plain JournalStore: the
per-message path does no new work at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from twisted.internet.defer import Deferred

from gateway.store.journal import JournalStore
from model.names import DEFAULT_VHOST


class ReplicaSink(Protocol):
    def wrote(self, segment: int, offset: int, data: bytes, end: int) -> None:
        """``data`` was written at ``offset`` of segment ``segment``; ``end`` is the
        journal's logical position once it is applied."""

    def segment_opened(self, segment: int) -> None: ...

    def file_deleted(self, name: str) -> None:
        """A segment file (its name under ``journal/``) was deleted."""

    def catalog_saved(self, data: bytes) -> None: ...


class ReplicatedJournalStore(JournalStore):
    def __init__(self, *args, **kwargs) -> None:
        self.sink: ReplicaSink | None = None  # set before the first write; None: nothing is streamed
        self.replica_waits = False  # True while a caught-up backup's ack is part of durability (ha.sync)
        self.local_durable = 0  # what the local fdatasync covers
        self.replica_acked = 0  # what the backup has acknowledged as durable on its side
        self.handed_over = False  # failback: the backup took over; nothing written here becomes durable any more
        super().__init__(*args, **kwargs)

    # -- what the backup is told -------------------------------------------------------------

    def _flush(self) -> None:
        sink = self.sink
        if sink is None or not self._buffer or self.broken is not None or self._closed:
            super()._flush()
            return
        segment, offset, written = self._segment, self._segment_bytes, self._written
        data = bytes(self._buffer)
        super()._flush()
        if self._written != written:  # the write succeeded (a failed one is retried, and told then)
            sink.wrote(segment, offset, data, self._written)

    def _open_segment(self, number: int) -> None:
        super()._open_segment(number)
        if self.sink is not None:
            self.sink.segment_opened(number)

    def _delete(self, path: Path) -> None:
        existed = path.exists()
        super()._delete(path)
        if existed and self.sink is not None:
            self.sink.file_deleted(path.name)

    def save_catalog(self, catalog: dict, vhost: str = DEFAULT_VHOST) -> None:
        super().save_catalog(catalog, vhost)
        if self.sink is not None:
            self.sink.catalog_saved((self.root / "catalog.json").read_bytes())

    # -- durability across both ----------------------------------------------------------------

    def _synced(self, position: int) -> None:
        if position > self.local_durable:
            self.local_durable = position
        self._release()

    def acked(self, position: int) -> None:
        """The backup made everything up to ``position`` durable."""
        if self.handed_over:
            return
        if position > self.replica_acked:
            self.replica_acked = position
        if self.replica_waits:
            self._release()

    def set_replica_waits(self, waits: bool) -> None:
        """Whether durability waits for the backup (a caught-up backup with ha.sync).
        Turning it off releases what waited only for the backup."""
        if self.handed_over:
            return
        self.replica_waits = waits
        self._release()

    def synced_locally(self) -> bool:
        """Every record appended so far is written to the segment files and synced here
        (a failback waits for this, and for the backup's acknowledgement of it)."""
        return not self._buffer and self.local_durable >= self._written

    def hand_over(self) -> None:
        """The backup took over (failback) with everything it acknowledged. From now on
        nothing written here counts as durable: no RECEIPT, confirm or mesh STORED is
        released for a write the new serving member may not have. The process then
        closes (``close``) and rejoins as the backup, its journal set aside."""
        self.handed_over = True
        self.replica_waits = True

    def close(self) -> Deferred:
        if self.handed_over:
            # Whoever still waits is never told "durable": the new serving member has what was
            # acknowledged; the rest is set aside with this journal when this process rejoins.
            self._waiters.clear()
            self.handed_over = False
            self.replica_waits = False
            self.sink = None
        return super().close()

    def _release(self) -> None:
        if self.handed_over:
            return
        target = min(self.local_durable, self.replica_acked) if self.replica_waits else self.local_durable
        if target > self._durable or not self.replica_waits:
            super()._synced(target)

    @property
    def written(self) -> int:
        """The logical position written to the segment files so far."""
        return self._written

    @property
    def segment(self) -> int:
        return self._segment
