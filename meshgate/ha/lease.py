"""The data dir's lock on a shared store (``[ha] mode = "shared-store"``, docs/ha.md).

A node whose data dir's lock is held waits as the *standby*: it exposes nothing,
tries the lock every ``poll_interval_ms`` and says who holds it and how long its
lease has been silent. The *holder* renews its lease every ``lease_interval_ms``
and, each time, reads the data dir's epoch: a higher epoch than its own means
another process took the data dir over (the lock failed to keep them apart: a
partitioned network filesystem), and this one must stop serving at once.

Silence is judged by when the lease last *changed*, on the reader's own clock, so
clocks that differ between hosts do not matter."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from twisted.internet import defer, task, threads

from meshgate.datadir import DataDir, EpochError, Lease
from model.mesh import Standby as StandbyModel

log = logging.getLogger("meshgate.ha")

SILENT_AFTER = 5  # lease intervals without a renewal before a standby says the holder is silent
STALE_STANDBY_S = 60.0  # a standby file unchanged this long is a standby that died: removed


class Standby:
    """Waits for the data dir's lock; ``wait()`` fires with the seconds waited once
    this process holds it."""

    def __init__(self, data_dir: DataDir, reactor, poll_s: float, lease_s: float) -> None:
        self.data_dir = data_dir
        self.reactor = reactor
        self.poll_s = poll_s
        self.lease_s = lease_s
        self.since = time.time()
        self.started = reactor.seconds()
        self.holder: Lease | None = None
        self.changed_at = self.started  # when the holder's lease last changed, by this clock
        self.silent_reported = False
        self._next_report = 0.0
        self._loop: task.LoopingCall | None = None
        self._done: defer.Deferred | None = None

    def wait(self) -> defer.Deferred:
        self._done = defer.Deferred()
        self._observe(first=True)
        self._loop = task.LoopingCall(self._poll)
        self._loop.clock = self.reactor
        self._loop.start(self.poll_s, now=False)
        return self._done

    def stop(self) -> None:
        """The process stops while waiting: no longer listed as a standby."""
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self.data_dir.remove_standby()
        self.data_dir.close_probe()

    def _poll(self) -> None:
        now = self.reactor.seconds()
        try:
            locked = self.data_dir.try_lock()
        except OSError as error:  # the filesystem failing (an NFS server away): keep trying
            if now >= self._next_report:
                log.warning("standby: cannot try the lock of data dir %s: %s", self.data_dir.path, error)
                self._next_report = now + self.lease_s
            return
        if locked:
            assert self._loop is not None and self._done is not None  # both set by wait(), which polls
            self._loop.stop()
            self.data_dir.remove_standby()
            holder = self.holder.describe() if self.holder is not None else "a holder that left no lease"
            log.warning("standby: the lock of data dir %s is free (%s, lease last renewed %.1f s before); "
                        "taking over after waiting %.1f s", self.data_dir.path, holder, now - self.changed_at,
                        now - self.started)
            self._done.callback(now - self.started)
            return
        if now >= self._next_report:
            self._observe()

    def _observe(self, first: bool = False) -> None:
        """Read the holder's lease, say what changed, and say this standby waits."""
        now = self.reactor.seconds()
        self._next_report = now + self.lease_s
        lease = self.data_dir.holder()
        previous = self.holder
        if lease is not None and lease != previous:
            self.holder = lease
            self.changed_at = now
            if self.silent_reported:
                self.silent_reported = False
                log.info("standby: the holder (%s) renews its lease again", lease.describe())
            if first or previous is None or (lease.pid, lease.host, lease.epoch) != \
                    (previous.pid, previous.host, previous.epoch):
                log.info("standby (ha.mode = shared-store): data dir %s is held by %s; waiting for its lock "
                         "(tried every %.0f ms), with no client listeners and no mesh links until then",
                         self.data_dir.path, lease.describe(), self.poll_s * 1000)
        elif first:
            log.info("standby (ha.mode = shared-store): data dir %s is held by a process that left no lease; "
                     "waiting for its lock, with no client listeners and no mesh links until then",
                     self.data_dir.path)
        silent = now - self.changed_at
        if not self.silent_reported and silent >= SILENT_AFTER * self.lease_s:
            self.silent_reported = True
            who = self.holder.describe() if self.holder is not None else "the holder"
            log.warning("standby: %s has not renewed its lease for %.0f s: it may be hung or cut off from the "
                        "data dir; it still holds the lock, so there is no takeover until it lets go "
                        "(docs/ha.md)", who, silent)
        try:
            self.data_dir.write_standby(self.since)
        except OSError as error:
            log.debug("standby: cannot write the standby file: %s", error)


class LeaseKeeper:
    """The holder's side: renew the lease, watch the epoch, see the standbys. The
    file work runs on a thread, so a slow shared filesystem never stalls the reactor."""

    def __init__(self, data_dir: DataDir, reactor, interval_s: float, epoch: int, since: float,
                 on_replaced: Callable[[str], None], sync: bool = True) -> None:
        self.data_dir = data_dir
        self.reactor = reactor
        self.interval_s = interval_s
        self.epoch = epoch
        self.since = since
        self.on_replaced = on_replaced
        self.sync = sync
        self.standbys: list[StandbyModel] = []
        self._seen: dict[str, tuple[float, float]] = {}  # standby file -> (its renewed stamp, when it last changed)
        self._loop: task.LoopingCall | None = None
        self._running: defer.Deferred | None = None
        self._busy_since = 0.0
        self._stuck_reported = False
        self._failure = ""  # what went wrong last, logged once until it recovers
        self._stopped = False

    def lease(self) -> Lease:
        return Lease(pid=os.getpid(), host=self.data_dir.host, epoch=self.epoch, renewed=time.time(),
                     since=self.since)

    def start(self) -> None:
        self.data_dir.write_lease(self.lease(), sync=self.sync)
        self._loop = task.LoopingCall(self._tick)
        self._loop.clock = self.reactor
        self._loop.start(self.interval_s, now=False)

    def stop(self) -> defer.Deferred:
        """No renewal after this; fires once one under way has finished."""
        self._stopped = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._running is None:
            return defer.succeed(None)
        done: defer.Deferred[None] = defer.Deferred()
        self._running.addBoth(lambda _: done.callback(None))
        return done

    def _tick(self) -> None:
        now = self.reactor.seconds()
        if self._running is not None:
            if not self._stuck_reported and now - self._busy_since > 5 * self.interval_s:
                self._stuck_reported = True
                log.warning("ha: renewing the lease in %s has taken %.0f s so far: the data dir's filesystem "
                            "does not answer", self.data_dir.path, now - self._busy_since)
            return
        self._busy_since = now
        self._running = threads.deferToThreadPool(self.reactor, self.reactor.getThreadPool(), self._work)
        self._running.addBoth(self._done)

    def _work(self) -> tuple[int | None, str, dict]:
        """On a thread: the epoch first (a replaced holder writes nothing more), then
        the lease, then the standby files."""
        found: int | None
        try:
            epoch = self.data_dir.epoch()
        except EpochError as error:
            found, problem = None, str(error)
        else:
            if epoch > self.epoch:
                return epoch, "", {}
            found, problem = epoch, ""
        if not self._stopped:
            try:
                self.data_dir.write_lease(self.lease(), sync=self.sync)
            except OSError as error:
                problem = problem or f"cannot renew the lease in {self.data_dir.path / 'lock'}: {error}"
        return found, problem, self.data_dir.standbys()

    def _done(self, result) -> None:
        self._running = None
        if self._stopped:
            return
        if self._stuck_reported:
            self._stuck_reported = False
            log.info("ha: the lease is renewed again")
        if not isinstance(result, tuple):  # a Failure: say it, go on
            log.warning("ha: lease renewal failed: %s", result.getErrorMessage())
            return
        found, problem, standbys = result
        if found is not None and found > self.epoch:
            self.on_replaced(
                f"data dir {self.data_dir.path} was taken over by another process: its epoch is {found}, this "
                f"node's is {self.epoch}; this node was replaced and stops serving")
            return
        if problem != self._failure:
            if problem:
                log.warning("ha: %s (tried again every %.1f s)", problem, self.interval_s)
            else:
                log.info("ha: the lease is renewed again")
            self._failure = problem
        self._track(standbys)

    def _track(self, found: dict) -> None:
        """Standbys whose files change are waiting; one unchanged for three intervals
        is not counted, and one unchanged for a minute is removed (it died)."""
        now = self.reactor.seconds()
        seen = self._seen
        live = []
        for name, record in found.items():
            stamp, changed = seen.get(name, (None, now))
            if stamp != record.renewed:
                changed = now
            seen[name] = (record.renewed, changed)
            if now - changed <= max(3 * self.interval_s, 3.0):
                live.append(StandbyModel(host=record.host, pid=record.pid, since=record.since))
            elif now - changed > STALE_STANDBY_S:
                self.data_dir.remove_standby_file(name)
        for name in set(seen) - set(found):
            del seen[name]
        self.standbys = sorted(live, key=lambda s: (s.host, s.pid))
