"""The data dir's files for high availability: the epoch (atomic, monotonic), the
lock with its lease, the standby files; and a standby waiting on the lock."""

from __future__ import annotations

import logging
import os

import pytest
from twisted.internet.testing import MemoryReactorClock

from meshgate.datadir import (
    EPOCH_FILE,
    DataDir,
    EpochError,
    Lease,
    NodeStartError,
    next_epoch,
    read_epoch,
    write_epoch,
)
from meshgate.ha import Standby

# -- the epoch -----------------------------------------------------------------------------------


def test_a_data_dir_without_an_epoch_is_at_zero(tmp_path):
    assert read_epoch(tmp_path) == 0


def test_next_epoch_counts_up_by_one_and_is_written_before_it_is_returned(tmp_path):
    assert [next_epoch(tmp_path) for _ in range(3)] == [1, 2, 3]
    assert (tmp_path / EPOCH_FILE).read_text() == "3\n"
    assert read_epoch(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [EPOCH_FILE]  # no temporary file left behind


@pytest.mark.parametrize("epoch", [4, 3, 0, -1])
def test_an_epoch_never_goes_backwards_nor_repeats(tmp_path, epoch):
    write_epoch(tmp_path, 4)
    with pytest.raises(EpochError, match="not above"):
        write_epoch(tmp_path, epoch)
    assert read_epoch(tmp_path) == 4


def test_a_write_that_fails_before_the_rename_leaves_the_old_epoch_whole(tmp_path, monkeypatch):
    write_epoch(tmp_path, 7)

    def crash(src, dst):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        write_epoch(tmp_path, 8)
    monkeypatch.undo()
    assert read_epoch(tmp_path) == 7


def test_a_write_that_cannot_even_open_its_temporary_file_leaves_the_old_epoch(tmp_path):
    write_epoch(tmp_path, 2)
    (tmp_path / (EPOCH_FILE + ".tmp")).mkdir()  # open() fails on it
    with pytest.raises(OSError):
        write_epoch(tmp_path, 3)
    assert read_epoch(tmp_path) == 2


def test_the_epoch_is_synced_and_renamed_into_place(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    write_epoch(tmp_path, 1)
    # The file's data before the rename, the directory's entry after it.
    assert calls == ["fsync", "replace", "fsync"]


@pytest.mark.parametrize("text", ["", "two\n", "-3\n", "1.5"])
def test_an_unreadable_epoch_is_an_error_not_a_zero(tmp_path, text):
    (tmp_path / EPOCH_FILE).write_text(text)
    with pytest.raises(EpochError, match="epoch"):
        read_epoch(tmp_path)


# -- the lock and its lease -----------------------------------------------------------------------


def test_one_holder_at_a_time_and_the_other_reads_its_lease(tmp_path):
    holder, other = DataDir(tmp_path), DataDir(tmp_path)
    assert holder.try_lock() and holder.locked
    assert not other.try_lock() and not other.locked
    epoch = holder.next_epoch()
    holder.write_lease(Lease(pid=os.getpid(), host="h1", epoch=epoch, renewed=10.0, since=9.0))
    assert other.holder() == Lease(pid=os.getpid(), host="h1", epoch=1, renewed=10.0, since=9.0)
    with pytest.raises(EpochError):
        other.next_epoch()  # only the holder starts an epoch
    holder.unlock()
    assert other.try_lock()
    other.unlock()


def test_without_shared_store_a_second_process_is_refused_naming_the_holder(tmp_path):
    holder, other = DataDir(tmp_path), DataDir(tmp_path)
    holder.try_lock()
    holder.write_lease(Lease(pid=4242, host="h1", epoch=3))
    with pytest.raises(NodeStartError) as refused:
        other.lock()
    message = str(refused.value)
    assert "in use by another meshgate process (pid 4242 on h1, epoch 3)" in message
    assert 'mode = "shared-store"' in message
    holder.unlock()


def test_renewals_rewrite_the_lease_in_place_at_a_fixed_length(tmp_path):
    holder = DataDir(tmp_path)
    holder.try_lock()
    holder.write_lease(Lease(pid=123456, host="a-long-host-name.example.com", epoch=99, renewed=1.0e9, since=1.0))
    holder.write_lease(Lease(pid=1, host="h", epoch=1, renewed=2.0), sync=False)
    data = (tmp_path / "lock").read_bytes()
    assert len(data) == 256 and Lease.decode(data) == Lease(pid=1, host="h", epoch=1, renewed=2.0)
    holder.unlock()


@pytest.mark.parametrize(("data", "lease"), [
    (b"4242", Lease(pid=4242)),  # what nodes before leases wrote
    (b"", None),
    (b'{"pid": 12, "host": "h", "ep', None),  # torn
    (Lease(pid=7, host="h", epoch=2, renewed=3.5, since=1.25).encode(), Lease(pid=7, host="h", epoch=2, renewed=3.5,
                                                                               since=1.25)),
])
def test_leases_decode_old_torn_and_new(data, lease):
    assert Lease.decode(data) == lease


def test_standby_files_are_listed_and_removed(tmp_path):
    standby = DataDir(tmp_path)
    standby.write_standby(since=100.0)
    (record,) = DataDir(tmp_path).standbys().values()
    assert (record.pid, record.host, record.since) == (os.getpid(), standby.host, 100.0)
    standby.remove_standby()
    assert DataDir(tmp_path).standbys() == {}


# -- the standby ----------------------------------------------------------------------------------


def test_a_standby_waits_while_the_lock_is_held_and_takes_it_once_released(tmp_path, caplog):
    clock = MemoryReactorClock()
    holder = DataDir(tmp_path)
    holder.try_lock()
    holder.write_lease(Lease(pid=4242, host="h1", epoch=1, renewed=1.0))
    data_dir = DataDir(tmp_path)
    standby = Standby(data_dir, clock, poll_s=0.1, lease_s=1.0)
    took = []
    with caplog.at_level(logging.INFO, logger="meshgate.ha"):
        standby.wait().addCallback(took.append)
        for _ in range(30):
            clock.advance(0.1)
    assert took == [] and not data_dir.locked
    assert any("held by pid 4242 on h1, epoch 1; waiting for its lock" in r.getMessage() for r in caplog.records)
    assert list(DataDir(tmp_path).standbys()) == [data_dir.standby_file().name]  # the holder can see it waits
    holder.unlock()
    clock.advance(0.1)
    assert data_dir.locked and len(took) == 1
    assert DataDir(tmp_path).standbys() == {}  # no longer waiting
    assert any("taking over" in r.getMessage() for r in caplog.records)
    data_dir.unlock()


def test_a_standby_says_once_when_the_holder_falls_silent_and_does_not_take_over(tmp_path, caplog):
    clock = MemoryReactorClock()
    holder = DataDir(tmp_path)
    holder.try_lock()
    holder.write_lease(Lease(pid=4242, host="h1", epoch=1, renewed=1.0))
    standby = Standby(DataDir(tmp_path), clock, poll_s=0.1, lease_s=1.0)
    took = []
    with caplog.at_level(logging.INFO, logger="meshgate.ha"):
        standby.wait().addCallback(took.append)
        for _ in range(120):  # 12 s of a lease that never changes: hung, but holding the lock
            clock.advance(0.1)
    silent = [r for r in caplog.records if "has not renewed its lease" in r.getMessage()]
    assert len(silent) == 1 and silent[0].levelno == logging.WARNING and "no takeover" in silent[0].getMessage()
    assert took == []
    holder.write_lease(Lease(pid=4242, host="h1", epoch=1, renewed=2.0))
    with caplog.at_level(logging.INFO, logger="meshgate.ha"):
        clock.advance(1.0)
    assert any("renews its lease again" in r.getMessage() for r in caplog.records)
    standby.stop()
    holder.unlock()
