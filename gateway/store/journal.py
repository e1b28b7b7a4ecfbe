"""An append-only journal with group commit, the default durable store.

Records (message added / message removed) are appended to segment files.
Writes are buffered within one reactor turn and written with one ``write``;
a sync thread then covers everything written so far with one ``fdatasync``
and fires every waiter it covers, so many connections' persistent sends share
one disk sync. Segments are deleted oldest-first once nothing in them is live
(which keeps removals of older segments' messages safe to forget), and an old
segment that is mostly dead has its live messages re-appended so one stuck
message cannot pin the disk. See docs/architecture.md for why a journal.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterator

from twisted.internet.defer import Deferred, fail, succeed

from gateway.broker.message import Message
from gateway.store.catalog import CatalogFile
from gateway.store.files import fsync_dir
from gateway.store.records import (
    ADD_TIMED,
    HEAD_SIZE,
    REMOVE,
    encode_add,
    encode_remove,
    record_head,
    replay,
    vhost_add_record,
    vhost_remove_record,
)
from model.names import DEFAULT_VHOST

log = logging.getLogger(__name__)

_SEGMENT_SUFFIX = ".log"
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


class JournalStore:
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
        self.limit = limit  # journal bytes past which persistent producers wait
        self.max_disk_usage = max_disk_usage  # percent of the filesystem, likewise
        self.blocked: str | None = None  # why producers wait now, else None
        self.blocked_since = 0.0
        self.on_blocked: Callable[[str], None] = lambda reason: None
        self.on_resumed: Callable[[float], None] = lambda waited: None
        self._room_waiters: list[Callable[[], None]] = []
        self._room_check = None
        self._collect_scheduled = False
        # The segment whose live records were copied, and where the copies end: it goes once they are durable.
        self._compacting: tuple[Path, int] | None = None
        self._bytes = 0  # the segment files' sizes
        self.broken: str | None = None  # a failed sync: nothing more can be made durable
        self.catalog = CatalogFile(self.root / "catalog.json")

    @property
    def position(self) -> int:
        """Bytes recorded so far; a change means there is something to make durable."""
        return self._appended

    # -- recovery -------------------------------------------------------------------------

    def recover(self) -> Iterator[tuple[str, Message]]:
        live: dict[tuple[str, str], tuple[str, Message]] = {}
        segments = self._segment_numbers()
        for number in segments:
            self._live.setdefault(number, {})
            self._live_bytes.setdefault(number, 0)
            self._replay(number, live, last=number == segments[-1])
            self._bytes += self._path(number).stat().st_size
        for key, (_, message) in live.items():
            self._ids[message.id] = self._ids.get(message.id, 0) + 1
            self._live[message.segment][key] = message
            self._live_bytes[message.segment] += message.size
            self._sequence = max(self._sequence, message.sequence)
        self._open_segment((segments[-1] + 1) if segments else 1)
        self._collect()
        # Enqueue order, not journal order: compaction moves old messages forward.
        return iter(sorted(live.values(), key=lambda entry: entry[1].sequence))

    def _segment_numbers(self) -> list[int]:
        return sorted(int(p.stem) for p in self.dir.glob("*" + _SEGMENT_SUFFIX) if p.stem.isdigit())

    def _path(self, number: int) -> Path:
        return self.dir / f"{number:08d}{_SEGMENT_SUFFIX}"

    def _replay(self, number: int, live: dict, last: bool) -> None:
        path = self._path(number)
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if not size:
                return
            # Mapped, not read: only the records' own bytes are copied out, so a
            # segment holding a 100 MiB message (or many dead ones) is never all in memory.
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                pos = replay(data, size, number, live)
        if pos < size:
            if last:
                # A torn tail from a crash mid-write: nothing after it was ever acknowledged.
                log.warning("journal %s: truncating %d bytes of torn tail", path.name, size - pos)
                with open(path, "r+b") as f:
                    f.truncate(pos)
            else:
                log.error("journal %s: corrupt record at offset %d; skipping the rest of the segment", path.name, pos)

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
        fd = os.open(self._path(number), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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

    def _collect(self) -> None:
        """Delete dead segments, oldest first; compact a mostly-dead oldest one."""
        self._collect_scheduled = False
        while len(self._live) >= 2:
            oldest = min(self._live)
            live = self._live[oldest]
            path = self._path(oldest)
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

    def _collect_soon(self) -> None:
        if not self._collect_scheduled:
            self._collect_scheduled = True
            self.reactor.callLater(0, self._collect)

    def _delete(self, path: Path) -> None:
        try:
            self._bytes -= path.stat().st_size
        except OSError:
            return  # gone already
        path.unlink(missing_ok=True)
        if self.blocked is not None:
            self.check_room()

    # -- room: store.limit and store.max_disk_usage -----------------------------------------

    def check_room(self) -> None:
        """Whether persistent producers must wait (``blocked`` says why), checked
        after every write and every deleted segment, and every second while they wait
        (other files on the disk may come and go)."""
        reason = None
        if self.limit is not None and self._bytes >= self.limit:
            reason = f"the journal reached store.limit ({self._bytes} of {self.limit} bytes)"
        elif self.max_disk_usage < 100:
            used = self.disk_usage()
            if used is not None and used >= self.max_disk_usage:
                reason = f"the disk is {used:.0f}% full (store.max_disk_usage {self.max_disk_usage}%)"
        was, self.blocked = self.blocked, reason
        if reason is not None and was is None:
            self.blocked_since = time.monotonic()
            log.warning("store: %s; producers of persistent messages wait for room", reason)
            self.on_blocked(reason)
            self._room_check = self.reactor.callLater(RETRY_S, self._recheck)
            self._collect_soon()  # files emptied since the last roll-over may go at once
        elif reason is None and was is not None:
            waited = time.monotonic() - self.blocked_since
            log.warning("store: room again after %.1f s; producers resume", waited)
            waiters, self._room_waiters = self._room_waiters, []
            for resume in waiters:
                resume()
            self.on_resumed(waited)

    def _recheck(self) -> None:
        self._room_check = None
        if self.blocked is not None and not self._closed:
            self._collect()
            self.check_room()
            if self.blocked is not None and self._room_check is None:
                self._room_check = self.reactor.callLater(RETRY_S, self._recheck)

    def when_room(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` once producers may go on (at once if they may now)."""
        if self.blocked is None:
            resume()
        else:
            self._room_waiters.append(resume)

    def disk_usage(self) -> float | None:
        """Percent of the store's filesystem in use (as df counts: blocks not free to
        unprivileged users), or None if it cannot be told."""
        stat = self._filesystem()
        if stat is None or not stat.f_blocks:
            return None
        return 100.0 * (stat.f_blocks - stat.f_bavail) / stat.f_blocks

    def disk_free(self) -> int | None:
        """Bytes free to the node on the store's filesystem, or None if it cannot be told."""
        stat = self._filesystem()
        return None if stat is None else stat.f_bavail * stat.f_frsize

    def _filesystem(self) -> os.statvfs_result | None:
        try:
            return os.statvfs(self.root)
        except OSError:
            return None

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
