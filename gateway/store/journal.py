"""An append-only journal with group commit, the default durable store.

Records (message added / message removed) are appended to segment files.
Writes are buffered within one reactor turn and written with one ``write``;
a sync thread then covers everything written so far with one ``fdatasync``
and fires every waiter it covers, so many connections' persistent sends share
one disk sync. See docs/architecture.md for why a journal.

Beside it: the segment files on disk and their replay at recovery
(segments.py), deleting and compacting old segments (collection.py), and
store.limit / store.max_disk_usage (room.py); the last two are mixed into
:class:`JournalStore`, whose state they share.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from pathlib import Path
from typing import Iterator

from twisted.internet.defer import Deferred, fail, succeed

from gateway.broker.message import Message
from gateway.store.catalog import CatalogFile
from gateway.store.collection import SegmentCollection
from gateway.store.files import fsync_dir
from gateway.store.records import (
    ADD_TIMED,
    HEAD_SIZE,
    REMOVE,
    encode_add,
    encode_remove,
    record_head,
    vhost_add_record,
    vhost_remove_record,
)
from gateway.store.room import RoomWatch
from gateway.store.segments import replay_segments, segment_path
from model.names import DEFAULT_VHOST

log = logging.getLogger(__name__)

RETRY_S = 1.0  # a failed write is tried again this often
CLOSE_PATIENCE_S = 3.0  # a close waits this long for a failing disk before giving up
# The file layer, looked up at each call so that tests can make it fail (ENOSPC, EIO).
_write, _datasync, _truncate = os.write, os.fdatasync, os.ftruncate


class StoreError(Exception):
    """The store could not make something durable; the message says why."""


class _Syncer(threading.Thread):
    """Runs fdatasync off the reactor thread; writes made meanwhile join the next sync."""

    def __init__(self, store: JournalStore, delay: float) -> None:
        super().__init__(name="journal-sync", daemon=True)
        self.store = store
        self.delay = delay
        self.cond = threading.Condition()
        self.requested = 0
        self.synced = 0
        self.retired: list[int] = []  # rolled-over segment fds still to sync and close
        self.current_fd = -1
        self.stopping = False

    def request(self, position: int) -> None:
        with self.cond:
            if position > self.requested:
                self.requested = position
                self.cond.notify()

    def run(self) -> None:
        while True:
            with self.cond:
                while self.requested <= self.synced and not self.stopping and not self.retired:
                    self.cond.wait()
                if self.stopping and self.requested <= self.synced and not self.retired:
                    return
            if self.delay:
                threading.Event().wait(self.delay)
            with self.cond:
                target = self.requested
                retired, self.retired = self.retired, []
                current = self.current_fd
            try:
                for fd in retired:
                    _datasync(fd)
                    os.close(fd)
                _datasync(current)
            except OSError as error:
                # The kernel may have dropped the pages it could not write: nothing
                # written since the last good sync can be called durable, ever.
                self.store.reactor.callFromThread(self.store._sync_failed, error)
                return
            self.synced = target
            self.store.reactor.callFromThread(self.store._synced, target)


class JournalStore(SegmentCollection, RoomWatch):
    def __init__(
        self,
        directory: str | os.PathLike,
        reactor,
        *,
        sync: bool = True,
        segment_size: int = 32 * 1024 * 1024,
        max_sync_delay_ms: int = 0,
        limit: int | None = None,
        max_disk_usage: int = 100,
    ) -> None:
        self.root = Path(directory)
        self.dir = self.root / "journal"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.reactor = reactor
        self.sync = sync
        self.segment_size = segment_size
        self._buffer = bytearray()
        self._appended = 0  # logical bytes appended, across segments
        self._written = 0
        self._durable = 0
        self._waiters: deque[tuple[int, Deferred, bool]] = deque()  # position, waiter, told of failed writes
        self._flush_scheduled = False
        # segment number -> {(queue key, message id): message}: what is live in it
        self._live: dict[int, dict[tuple[str, str], Message]] = {}
        self._live_bytes: dict[int, int] = {}
        self._segment = 0
        self._segment_bytes = 0
        self._fd = -1
        self._syncer: _Syncer | None = None
        self._max_sync_delay = max_sync_delay_ms / 1000.0
        self._sequence = 0
        self._ids: dict[str, int] = {}  # message id -> how many queues hold it here
        self.syncs = 0
        self.failure: str | None = None  # why writing fails now (None: it works)
        self._closed = False
        RoomWatch.__init__(self, limit, max_disk_usage)
        SegmentCollection.__init__(self)
        self._bytes = 0  # the segment files' sizes
        self.broken: str | None = None  # a failed sync: nothing more can be made durable
        self.catalog = CatalogFile(self.root / "catalog.json")

    @property
    def position(self) -> int:
        """Bytes recorded so far; a change means there is something to make durable."""
        return self._appended

    # -- recovery -------------------------------------------------------------------------

    def recover(self) -> Iterator[tuple[str, Message]]:
        replayed = replay_segments(self.dir)
        segments, live = replayed.segments, replayed.live
        for number in segments:
            self._live.setdefault(number, {})
            self._live_bytes.setdefault(number, 0)
        self._bytes += replayed.size
        for key, (_, message) in live.items():
            self._ids[message.id] = self._ids.get(message.id, 0) + 1
            self._live[message.segment][key] = message
            self._live_bytes[message.segment] += message.size
            self._sequence = max(self._sequence, message.sequence)
        self._open_segment((segments[-1] + 1) if segments else 1)
        self._collect()
        # Enqueue order, not journal order: compaction moves old messages forward.
        return iter(sorted(live.values(), key=lambda entry: entry[1].sequence))

    # -- writing --------------------------------------------------------------------------

    def add(self, queue_key: str, message: Message) -> None:
        if not message.sequence:  # a compacted message keeps its place in the order
            self._sequence += 1
            message.sequence = self._sequence
        if queue_key[0] != "\x00":  # VHOST_MARK: a default-vhost key, the record a node before vhosts wrote
            self._append(ADD_TIMED, encode_add(queue_key, message))
        else:
            self._append(*vhost_add_record(queue_key, message))
        segment = self._segment
        message.segment = segment
        self._live[segment][(queue_key, message.id)] = message
        self._live_bytes[segment] += message.size
        self._ids[message.id] = self._ids.get(message.id, 0) + 1

    def remove(self, queue_key: str, message: Message) -> None:
        live = self._live.get(message.segment)
        if live is None or live.pop((queue_key, message.id), None) is None:
            return
        if self.blocked is not None and message.segment == min(self._live):
            self._collect_soon()  # room is wanted now: the oldest segment may be dead, or dead enough to compact
        self._live_bytes[message.segment] -= message.size
        self._forget_id(message.id)
        if queue_key[0] != "\x00":  # VHOST_MARK
            self._append(REMOVE, encode_remove(queue_key, message.id))
        else:
            self._append(*vhost_remove_record(queue_key, message.id))

    def _append(self, kind: int, payload: bytes) -> None:
        self._buffer += record_head(kind, payload)
        self._buffer += payload
        self._appended += HEAD_SIZE + len(payload)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.reactor.callLater(0, self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._closed:
            return
        buffer = self._buffer
        if buffer and self.broken is None:
            before = self._segment_bytes
            view = memoryview(buffer)
            try:
                while view:
                    view = view[_write(self._fd, view):]
            except OSError as error:
                self._write_failed(error, before)
                return
            finally:
                view.release()  # the last slice: the buffer can be cleared (or kept) again
            if self.failure is not None:
                log.warning("journal: writing again (%d bytes that waited are written)", len(buffer))
                self.failure = None
            self._segment_bytes += len(buffer)
            self._bytes += len(buffer)
            self._written = self._appended
            buffer.clear()
            if self._segment_bytes >= self.segment_size:
                self._roll_over()
            self.check_room()
        if self.sync and self._syncer is not None:
            if self._written > self._durable:
                self._syncer.request(self._written)
        else:
            self._synced(self._written)

    def _write_failed(self, error: OSError, size_before: int) -> None:
        """Nothing of the failed write stays in the file (a half record would end
        recovery there); the records wait in memory and the write is tried again
        every RETRY_S, so that what was accepted is written once there is room. No
        RECEIPT for what is not on disk: the clients owed one are told at once."""
        try:
            _truncate(self._fd, size_before)
        except OSError as truncating:
            log.error("journal: could not cut a failed write back (%s); recovery stops at it", truncating.strerror)
        reason = error.strerror or str(error)
        if self.failure is None:
            log.error("journal: write failed (%s): persistent messages are refused until it works; "
                      "%d bytes of records wait in memory, retried every %.0f s", reason, len(self._buffer), RETRY_S)
        self.failure = reason
        self._tell_of_failed_write(reason)
        self._collect()  # consumers may have emptied old segments: their room comes back now
        self._flush_scheduled = True
        self.reactor.callLater(RETRY_S, self._flush)

    def _tell_of_failed_write(self, reason: str) -> None:
        kept: deque[tuple[int, Deferred, bool]] = deque()
        unwritten: list[tuple[int, Deferred, bool]] = []
        for entry in self._waiters:
            (unwritten if entry[2] and entry[0] > self._written else kept).append(entry)
        if not unwritten:
            return
        self._waiters = kept
        error = StoreError(f"the store cannot write ({reason}); it is kept in memory and written if room returns "
                           "before this node stops, so a resend may duplicate it")
        for _, waiter, _ in unwritten:
            waiter.errback(error)

    def _sync_failed(self, error: OSError) -> None:
        """After a failed fsync the kernel may have dropped the unwritten pages and
        marked them clean: a later fsync could succeed without them. So nothing is
        acknowledged from here on; what waits for durability gets an error, and
        the node must restart to recover from what is really on disk."""
        reason = error.strerror or str(error)
        self.broken = self.failure = f"sync failed ({reason}); restart the node"
        log.critical("journal: fsync failed (%s): nothing more will be acknowledged; restart the node, which "
                     "recovers what is really on disk", reason)
        waiters, self._waiters = self._waiters, deque()
        for _, waiter, _ in waiters:
            waiter.errback(StoreError(self.broken))

    def _synced(self, position: int) -> None:
        if position > self._durable:
            self._durable = position
        self.syncs += 1
        waiters = self._waiters
        while waiters and waiters[0][0] <= self._durable:
            waiters.popleft()[1].callback(None)
        if self._compacting is not None and self._compacting[1] <= self._durable:
            path, self._compacting = self._compacting[0], None
            self._delete(path)
            self._collect_soon()

    def when_durable(self, told_of_failed_writes: bool = False) -> Deferred:
        """Fire once everything recorded so far is durable. A failed fsync fails
        every waiter. A failed write (records kept, retried) fails only waiters
        that asked ``told_of_failed_writes``: a client owed a RECEIPT must hear
        now, while a peer keeps custody and can wait for the retry."""
        if self._appended <= self._durable:
            return succeed(None)
        if self.broken is not None:
            return fail(StoreError(self.broken))
        d: Deferred[None] = Deferred()
        self._waiters.append((self._appended, d, told_of_failed_writes))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.reactor.callLater(0, self._flush)
        return d

    # -- segments -------------------------------------------------------------------------

    def _open_segment(self, number: int) -> None:
        fd = os.open(segment_path(self.dir, number), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(self.dir)
        old = self._fd
        self._fd = fd
        self._segment = number
        self._segment_bytes = os.fstat(fd).st_size
        self._live.setdefault(number, {})
        self._live_bytes.setdefault(number, 0)
        if self.sync:
            if self._syncer is None:
                self._syncer = _Syncer(self, self._max_sync_delay)
                self._syncer.current_fd = fd
                self._syncer.start()
            else:
                with self._syncer.cond:
                    self._syncer.retired.append(old)
                    self._syncer.current_fd = fd
                    self._syncer.cond.notify()
        elif old >= 0:
            os.close(old)

    def _roll_over(self) -> None:
        self._open_segment(self._segment + 1)
        self._collect()

    # -- what is stored -------------------------------------------------------------------

    def _forget_id(self, message_id: str) -> None:
        left = self._ids.pop(message_id, 1) - 1
        if left:
            self._ids[message_id] = left

    def holds(self, message_id: str) -> bool:
        """Whether a message with this id is still stored in some queue."""
        return message_id in self._ids

    def disk_bytes(self) -> int:
        """The journal's size on disk (its segment files)."""
        return self._bytes

    def segment_count(self) -> int:
        return len(self._live)

    # -- catalog --------------------------------------------------------------------------

    def load_catalog(self, vhost: str = DEFAULT_VHOST) -> dict:
        return self.catalog.load(vhost)

    def save_catalog(self, catalog: dict, vhost: str = DEFAULT_VHOST) -> None:
        self.catalog.save(catalog, vhost)

    # -- shutdown -------------------------------------------------------------------------

    def close(self) -> Deferred:
        """Write and sync what is pending, then release the files. While writing
        fails (a full disk) it waits up to CLOSE_PATIENCE_S for room, then fails
        with StoreError saying what was not written: everything acknowledged
        before is on disk, and the next start recovers it."""
        self._flush()
        d = self.when_durable()
        if self.failure is not None or self._buffer:
            timer = self.reactor.callLater(CLOSE_PATIENCE_S, self._give_up, d)
            d.addBoth(lambda result: (timer.cancel() if timer.active() else None, result)[1])

        def stop(result: object) -> object:
            self._closed = True
            if self._room_check is not None and self._room_check.active():
                self._room_check.cancel()
            if self._syncer is not None:
                with self._syncer.cond:
                    self._syncer.stopping = True
                    self._syncer.cond.notify()
                self._syncer.join(5)
                self._syncer = None
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            return result

        return d.addBoth(stop)

    def _give_up(self, closing: Deferred) -> None:
        if closing.called:
            return
        unwritten = len(self._buffer)
        self._waiters = deque(entry for entry in self._waiters if entry[1] is not closing)
        closing.errback(StoreError(f"{unwritten} bytes of journal records were not written ({self.failure}); "
                                   "nothing they held was acknowledged"))
