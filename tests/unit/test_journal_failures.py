"""The journal when the disk fails (gateway/store/journal.py), with its file layer
made to fail: ENOSPC on write (a full disk), EIO on fsync, and a close on a
full disk. Never a RECEIPT (a fired waiter) for what is not on disk; what was
acknowledged is recovered; writing resumes by itself when there is room."""

from __future__ import annotations

import errno
import json
import os

import pytest
from twisted.internet.testing import MemoryReactorClock

from gateway.broker.broker import Broker
from gateway.broker.errors import BrokerError
from gateway.selector import compile_selector
from gateway.store import files, journal
from gateway.store.journal import StoreError
from tests.unit.test_journal import close, durable, message, open_store


class Disk:
    """The file layer, failing on demand: ``full`` makes every write after
    ``room`` more bytes fail with ``error`` (ENOSPC; the first one partly written)."""

    def __init__(self, monkeypatch) -> None:
        self.full = False
        self.room = 0
        self.error = errno.ENOSPC
        self.sync_error: int | None = None
        monkeypatch.setattr(journal, "_write", self.write)
        monkeypatch.setattr(journal, "_datasync", self.datasync)

    def write(self, fd: int, data) -> int:
        if self.full:
            if self.room <= 0:
                raise OSError(self.error, os.strerror(self.error))
            written = os.write(fd, data[:self.room])
            self.room -= written
            return written
        return os.write(fd, data)

    def datasync(self, fd: int) -> None:
        if self.sync_error is not None:
            raise OSError(self.sync_error, os.strerror(self.sync_error))
        os.fdatasync(fd)


def waiter(store, told_of_failed_writes: bool = False):
    fired, failed = [], []
    store.when_durable(told_of_failed_writes).addCallbacks(fired.append, failed.append)
    return fired, failed


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_a_failing_write_acknowledges_nothing_leaves_no_half_record_and_writing_resumes_by_itself(
        tmp_path, monkeypatch, error):
    disk = Disk(monkeypatch)
    disk.error = error
    store, reactor, _ = open_store(tmp_path)
    store.add("Q:orders", message(1))
    durable(store, reactor)
    segment = max(tmp_path.glob("journal/*.log"))
    size = segment.stat().st_size
    disk.full, disk.room = True, 10  # room for a few bytes of the next record, not all of it
    store.add("Q:orders", message(2, b"x" * 1000))
    fired, failed = waiter(store)  # a peer's custody: it waits for the retry
    client_fired, client_failed = waiter(store, told_of_failed_writes=True)  # a client owed a RECEIPT
    reactor.run_until(lambda: store.failure is not None)
    assert store.failure == os.strerror(error)
    assert segment.stat().st_size == size  # the partial record was cut off
    assert client_fired == [] and client_failed[0].check(StoreError)
    assert f"cannot write ({os.strerror(error)})" in str(client_failed[0].value)
    for _ in range(5):  # retries, still full
        reactor.run_until(lambda: True)
    assert fired == [] and failed == []  # no receipt, and no error for what will be written
    disk.full = False
    reactor.run_until(lambda: fired)
    assert store.failure is None
    close(store, reactor)
    _, _, recovered = open_store(tmp_path)
    assert [m.id for _, m in recovered] == ["m-1", "m-2"]


def test_while_writing_fails_persistent_sends_are_refused_and_the_rest_goes_on(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    store, reactor, _ = open_store(tmp_path)
    broker = Broker(store, clock=MemoryReactorClock(), compile_selector=compile_selector)
    disk.full = True
    broker.send("queue", "orders", {}, b"first", persistent=True)
    reactor.run_until(lambda: store.failure is not None)
    with pytest.raises(BrokerError, match="store cannot write .No space left on device"):
        broker.send("queue", "orders", {}, b"second", persistent=True)
    assert broker.send("queue", "orders", {}, b"not persistent") is not None
    assert [m.body for m in broker.queues["orders"].take_all()] == [b"first", b"not persistent"]


def test_a_failed_fsync_errs_every_waiter_and_nothing_is_acknowledged_after_it(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    store, reactor, _ = open_store(tmp_path)
    disk.sync_error = errno.EIO
    store.add("Q:orders", message(1))
    fired, failed = waiter(store)
    reactor.run_until(lambda: failed)
    assert fired == [] and failed[0].check(StoreError) and "sync failed" in str(failed[0].value)
    disk.sync_error = None  # a later fsync that succeeds proves nothing about the lost pages
    store.add("Q:orders", message(2))
    late_fired, late_failed = waiter(store)
    assert late_fired == [] and late_failed and "restart the node" in store.failure


def test_closing_on_a_full_disk_fails_with_what_was_not_written_and_keeps_what_was(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    store, reactor, _ = open_store(tmp_path)
    store.add("Q:orders", message(1))
    durable(store, reactor)
    disk.full = True
    store.add("Q:orders", message(2))
    outcome = []
    store.close().addBoth(outcome.append)
    reactor.run_until(lambda: outcome, timeout=10)
    assert isinstance(outcome[0].value, StoreError) and "were not written" in str(outcome[0].value)
    disk.full = False
    _, _, recovered = open_store(tmp_path)
    assert [m.id for _, m in recovered] == ["m-1"]  # acknowledged: kept; never acknowledged: not there


def test_a_catalog_that_cannot_be_written_leaves_the_old_one_and_errs_the_request(tmp_path, monkeypatch):
    store, reactor, _ = open_store(tmp_path)
    broker = Broker(store, clock=MemoryReactorClock(), compile_selector=compile_selector)
    broker.queue("kept")
    before = (tmp_path / "catalog.json").read_text()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "fsync", full)  # the disk fills as the new catalog is made durable
    broker.queue("new")  # a queue works without its catalog entry: no error for it
    with pytest.raises(BrokerError, match="catalog could not be saved .No space left on device"):
        broker.save_catalog()
    assert (tmp_path / "catalog.json").read_text() == before and json.loads(before)["queues"] == ["kept"]
    assert not list(tmp_path.glob("*.tmp"))


def test_at_its_limit_the_store_says_blocked_and_consumed_segments_bring_the_room_back(tmp_path, monkeypatch):
    store, reactor, _ = open_store(tmp_path, segment_size=4096, limit=16 * 1024)
    said = []
    store.on_blocked, store.on_resumed = (lambda reason: said.append(reason)), (lambda waited: said.append("room"))
    added = []
    while store.blocked is None:
        added.append(message(len(added), b"x" * 1000))
        store.add("Q:orders", added[-1])
        durable(store, reactor)
    assert "store.limit" in store.blocked and said == [store.blocked]
    resumed = []
    store.when_room(lambda: resumed.append(True))
    assert resumed == []
    for m in added:
        store.remove("Q:orders", m)
    reactor.run_until(lambda: resumed)
    assert store.blocked is None and said[-1] == "room" and store.disk_bytes() < 16 * 1024

