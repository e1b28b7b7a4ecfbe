"""The node's data dir as files: its lock and the lease written in it, its epoch,
the standbys waiting on it, and the node's persistent identity. No Twisted here:
:mod:`meshgate.ha` runs the waiting and the renewing (docs/ha.md).

- ``lock``: an exclusive ``flock``, held by the one process that serves the data
  dir. The holder writes its *lease* in it (pid, host, epoch, when renewed) and
  renews it every ``ha.lease_interval_ms``, always through the descriptor that
  holds the lock: where ``flock`` is emulated by POSIX locks (Linux NFS clients),
  closing any other descriptor of the file would drop the lock.
- ``epoch``: an integer that grows by one each time a process takes the data dir
  in ``shared-store`` mode, written atomically (temporary file, fsync, rename,
  fsync of the directory). The holder reads it every lease interval: a higher
  number means another process took the data dir over, so this one was replaced.
- ``standby/HOST-PID.json``: one per waiting standby, rewritten every lease
  interval, so the holder can report who is waiting (the model's ``standbys``).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from gateway.store.files import fsync_dir, write_json_atomically

LOCK_FILE = "lock"
EPOCH_FILE = "epoch"
STANDBY_DIR = "standby"
_LEASE_SIZE = 256  # the lease is rewritten in place at a fixed length: a reader never sees it shrink


class NodeStartError(Exception):
    """The node cannot start; the message says why and what to do."""


class EpochError(Exception):
    """The epoch file cannot be read or would go backwards."""


@dataclass(frozen=True)
class Lease:
    """What the lock's holder says of itself in the lock file."""

    pid: int
    host: str = ""
    epoch: int = 0
    renewed: float = 0.0  # the holder's wall clock; readers judge silence by when it last changed
    since: float = 0.0  # when the holder took the lock

    def encode(self) -> bytes:
        text = json.dumps({"pid": self.pid, "host": self.host, "epoch": self.epoch, "renewed": round(self.renewed, 3),
                           "since": round(self.since, 3)}, separators=(",", ":"))
        return text.encode().ljust(_LEASE_SIZE - 1) + b"\n"

    @classmethod
    def decode(cls, data: bytes) -> Lease | None:
        """The lease, or None for an empty or torn one. A bare pid (what nodes
        without leases wrote) is a lease that is never renewed."""
        text = data.decode("utf-8", "replace").strip()
        if text.isdigit():
            return cls(pid=int(text))
        try:
            found = json.loads(text)
            return cls(pid=int(found["pid"]), host=str(found.get("host", "")), epoch=int(found.get("epoch", 0)),
                       renewed=float(found.get("renewed", 0.0)), since=float(found.get("since", 0.0)))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        host = f" on {self.host}" if self.host else ""
        return f"pid {self.pid}{host}" + (f", epoch {self.epoch}" if self.epoch else "")


@dataclass(frozen=True)
class StandbyRecord:
    """A standby waiting on the data dir, as its file says."""

    host: str
    pid: int
    since: float  # when it started waiting (its wall clock)
    renewed: float


# -- the epoch ---------------------------------------------------------------------------------


def read_epoch(path: str | os.PathLike) -> int:
    """The data dir's epoch; 0 when it never had one."""
    file = Path(path) / EPOCH_FILE
    try:
        text = file.read_text()
    except FileNotFoundError:
        return 0
    except OSError as error:
        raise EpochError(f"cannot read {file}: {error.strerror}") from None
    try:
        epoch = int(text.strip())
    except ValueError:
        raise EpochError(f"{file} does not hold an epoch (an integer): {text[:40]!r}") from None
    if epoch < 0:
        raise EpochError(f"{file} holds a negative epoch: {epoch}")
    return epoch


def write_epoch(path: str | os.PathLike, epoch: int) -> None:
    """Replace the epoch with a higher one, durably: after a crash the file holds the
    old number or the new one, never a torn one, and the rename has reached the disk.
    Refuses to go backwards or stay still (an epoch is never reused)."""
    directory = Path(path)
    current = read_epoch(directory)
    if epoch <= current:
        raise EpochError(f"epoch {epoch} is not above the data dir's epoch {current}")
    tmp = directory / (EPOCH_FILE + ".tmp")
    try:
        with open(tmp, "w") as f:
            f.write(f"{epoch}\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, directory / EPOCH_FILE)
    fsync_dir(directory)


def next_epoch(path: str | os.PathLike) -> int:
    """Start a new epoch: one above the data dir's, written before it is returned."""
    epoch = read_epoch(path) + 1
    write_epoch(path, epoch)
    return epoch


# -- the data dir ------------------------------------------------------------------------------


class DataDir:
    """The node's directory: its persistent identity, its exclusive lock and lease,
    its epoch."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._fd: int | None = None  # the descriptor holding the lock (the holder's only one on the lock file)
        self._probe: int | None = None  # a standby's descriptor, kept open between attempts
        self.host = socket.gethostname()

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def try_lock(self) -> bool:
        """Take the exclusive lock if no other process holds it (never waits)."""
        if self._fd is not None:
            return True
        if self._probe is None:
            self.path.mkdir(parents=True, exist_ok=True)
            self._probe = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._fd, self._probe = self._probe, None
        return True

    def lock(self) -> None:
        """Take the lock or refuse to start (``ha.mode = "none"``)."""
        if not self.try_lock():
            message = self.in_use_message()
            self.close_probe()
            raise NodeStartError(message)

    def in_use_message(self) -> str:
        holder = self.holder()
        who = holder.describe() if holder is not None else "pid unknown"
        return (f"data dir {self.path} is in use by another meshgate process ({who}); stop that node or give this "
                'one another --data directory (or set [ha] mode = "shared-store" to wait as its standby)')

    def holder(self) -> Lease | None:
        """The lease the lock's holder wrote (read afresh: over NFS, opening the file
        again is what makes its newest content visible). Never called by the holder."""
        try:
            with open(self.path / LOCK_FILE, "rb") as f:
                return Lease.decode(f.read(_LEASE_SIZE))
        except OSError:
            return None

    def write_lease(self, lease: Lease, sync: bool = True) -> None:
        """Renew the lease in place through the locked descriptor; ``sync`` makes it
        reach a shared filesystem's server, where other hosts' standbys read it."""
        fd = self._fd
        if fd is None:
            raise OSError("the data dir is not locked")
        os.pwrite(fd, lease.encode(), 0)
        if sync:
            os.fdatasync(fd)

    def unlock(self) -> None:
        self.close_probe()
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None

    def close_probe(self) -> None:
        if self._probe is not None:
            os.close(self._probe)
            self._probe = None

    # -- the epoch ---------------------------------------------------------------------------

    def epoch(self) -> int:
        return read_epoch(self.path)

    def next_epoch(self) -> int:
        if self._fd is None:
            raise EpochError("only the lock's holder starts an epoch")
        return next_epoch(self.path)

    # -- standbys ----------------------------------------------------------------------------

    def standby_file(self, pid: int | None = None) -> Path:
        return self.path / STANDBY_DIR / f"{self.host}-{pid or os.getpid()}.json"

    def write_standby(self, since: float) -> None:
        """Say this process waits as a standby (rewritten every lease interval; not
        synced: it is news, not state)."""
        file = self.standby_file()
        file.parent.mkdir(exist_ok=True)
        tmp = file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"host": self.host, "pid": os.getpid(), "since": round(since, 3),
                                   "renewed": round(time.time(), 3)}))
        os.replace(tmp, file)

    def remove_standby(self) -> None:
        try:
            self.standby_file().unlink(missing_ok=True)
        except OSError:
            pass

    def standbys(self) -> dict[str, StandbyRecord]:
        """Every standby file, by name (stale ones too: the reader judges by change)."""
        found: dict[str, StandbyRecord] = {}
        try:
            entries = list((self.path / STANDBY_DIR).glob("*.json"))
        except OSError:
            return found
        for entry in entries:
            try:
                data = json.loads(entry.read_text())
                found[entry.name] = StandbyRecord(host=str(data["host"]), pid=int(data["pid"]),
                                                  since=float(data["since"]), renewed=float(data["renewed"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # gone meanwhile, or being replaced
        return found

    def remove_standby_file(self, name: str) -> None:
        try:
            (self.path / STANDBY_DIR / name).unlink(missing_ok=True)
        except OSError:
            pass

    # -- identity ----------------------------------------------------------------------------

    def identity(self, name: str) -> dict:
        """Load or create the node id; count this start (a part of message ids)."""
        path = self.path / "node.json"
        if path.exists():
            identity = json.loads(path.read_text())
        else:
            identity = {"id": str(uuid.uuid4()), "name": name, "boots": 0}
        identity["boots"] += 1
        write_json_atomically(path, identity)
        return identity
