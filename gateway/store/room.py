"""Room for persistent messages: store.limit and store.max_disk_usage.

:class:`RoomWatch` is mixed into the journal (gateway/store/journal.py). It decides
whether producers of persistent messages must wait (``blocked`` says why), tells
the node when that starts and ends, and resumes the waiting producers once there
is room. ``blocked`` stays a plain attribute of the store because every persistent
SEND and publish reads it. What the watch uses of the journal is declared in
:class:`RoomOwner` (each method's ``self``).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Protocol

log = logging.getLogger("gateway.store.journal")  # its lines are the journal's: same logger name

LOOK_AGAIN_S = 1.0  # while producers wait, room is looked for this often


class RoomOwner(Protocol):
    root: Path
    reactor: Any  # IReactorTime (a MemoryReactorClock in tests)
    _bytes: int  # the segment files' sizes
    _closed: bool
    limit: int | None
    max_disk_usage: int
    blocked: str | None
    blocked_since: float
    on_blocked: Callable[[str], None]
    on_resumed: Callable[[float], None]
    _room_waiters: list[Callable[[], None]]
    _room_check: Any  # the reactor's delayed call of the next look, or None

    def _collect(self) -> None: ...

    def _collect_soon(self) -> None: ...

    def check_room(self) -> None: ...

    def disk_usage(self) -> float | None: ...

    def _recheck(self) -> None: ...

    def _filesystem(self) -> os.statvfs_result | None: ...


class RoomWatch:
    def __init__(self, limit: int | None, max_disk_usage: int) -> None:
        self.limit = limit  # journal bytes past which persistent producers wait
        self.max_disk_usage = max_disk_usage  # percent of the filesystem, likewise
        self.blocked: str | None = None  # why producers wait now, else None
        self.blocked_since = 0.0
        self.on_blocked: Callable[[str], None] = lambda reason: None
        self.on_resumed: Callable[[float], None] = lambda waited: None
        self._room_waiters: list[Callable[[], None]] = []
        self._room_check: Any = None

    def check_room(self: RoomOwner) -> None:
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
            self._room_check = self.reactor.callLater(LOOK_AGAIN_S, self._recheck)
            self._collect_soon()  # files emptied since the last roll-over may go at once
        elif reason is None and was is not None:
            waited = time.monotonic() - self.blocked_since
            log.warning("store: room again after %.1f s; producers resume", waited)
            waiters, self._room_waiters = self._room_waiters, []
            for resume in waiters:
                resume()
            self.on_resumed(waited)

    def _recheck(self: RoomOwner) -> None:
        self._room_check = None
        if self.blocked is not None and not self._closed:
            self._collect()
            self.check_room()
            if self.blocked is not None and self._room_check is None:
                self._room_check = self.reactor.callLater(LOOK_AGAIN_S, self._recheck)

    def when_room(self: RoomOwner, resume: Callable[[], None]) -> None:
        """Call ``resume`` once producers may go on (at once if they may now)."""
        if self.blocked is None:
            resume()
        else:
            self._room_waiters.append(resume)

    def disk_usage(self: RoomOwner) -> float | None:
        """Percent of the store's filesystem in use (as df counts: blocks not free to
        unprivileged users), or None if it cannot be told."""
        stat = self._filesystem()
        if stat is None or not stat.f_blocks:
            return None
        return 100.0 * (stat.f_blocks - stat.f_bavail) / stat.f_blocks

    def disk_free(self: RoomOwner) -> int | None:
        """Bytes free to the node on the store's filesystem, or None if it cannot be told."""
        stat = self._filesystem()
        return None if stat is None else stat.f_bavail * stat.f_frsize

    def _filesystem(self: RoomOwner) -> os.statvfs_result | None:
        try:
            return os.statvfs(self.root)
        except OSError:
            return None
