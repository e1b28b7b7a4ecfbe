"""The journal store: group commit, recovery, torn tails, segment collection."""

from __future__ import annotations

import queue
import time

import pytest

from gateway.broker.message import Message
from gateway.store.journal import JournalStore


class LoopReactor:
    """Just enough reactor for the store: callLater(0) and callFromThread,
    run by hand so a test decides when the reactor turns."""

    def __init__(self) -> None:
        self.calls: queue.Queue = queue.Queue()

    def callLater(self, delay, func, *args):
        self.calls.put((func, args))

    def callFromThread(self, func, *args):
        self.calls.put((func, args))

    def run_until(self, predicate, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("condition not reached")
            try:
                func, args = self.calls.get(timeout=remaining)
            except queue.Empty:
                continue
            func(*args)


def message(n: int, body: bytes = b"payload", **headers: str) -> Message:
    return Message(f"m-{n}", "queue", "orders", dict(headers), body, persistent=True, priority=n % 10)


def open_store(path, reactor=None, **options) -> tuple[JournalStore, LoopReactor, list]:
    reactor = reactor or LoopReactor()
    store = JournalStore(path, reactor, **options)
    recovered = list(store.recover())
    return store, reactor, recovered


def durable(store: JournalStore, reactor: LoopReactor) -> None:
    d = store.when_durable()
    fired = []
    d.addCallback(fired.append)
    reactor.run_until(lambda: fired)


def close(store: JournalStore, reactor: LoopReactor) -> None:
    fired = []
    store.close().addCallback(fired.append)
    reactor.run_until(lambda: fired)


def test_added_messages_recover_with_headers_and_order(tmp_path):
    store, reactor, recovered = open_store(tmp_path)
    assert recovered == []
    for n in range(5):
        store.add("Q:orders", message(n, b"body\0%d" % n, color="red", note="a\nb"))
    store.remove("Q:orders", _stored(store, "m-1"))
    durable(store, reactor)
    close(store, reactor)
    _, _, recovered = open_store(tmp_path)
    assert [(key, m.id) for key, m in recovered] == [("Q:orders", f"m-{n}") for n in (0, 2, 3, 4)]
    first = recovered[0][1]
    assert first.body == b"body\x000" and first.headers == {"color": "red", "note": "a\nb"}
    assert first.persistent and first.kind == "queue" and first.address == "orders"


def test_header_with_nul_survives(tmp_path):
    store, reactor, _ = open_store(tmp_path)
    store.add("Q:q", message(1, odd="a\0b"))
    durable(store, reactor)
    close(store, reactor)
    _, _, recovered = open_store(tmp_path)
    assert recovered[0][1].headers == {"odd": "a\0b"}


def test_many_writes_share_few_syncs(tmp_path):
    store, reactor, _ = open_store(tmp_path)
    waiters = []
    for n in range(2000):
        store.add("Q:q", message(n))
        if n % 100 == 0:
            store.when_durable().addCallback(waiters.append)
    reactor.run_until(lambda: len(waiters) == 20)
    assert store.syncs < 20  # group commit: far fewer fsyncs than waiters or writes


def test_waiter_fires_only_after_sync(tmp_path):
    store, reactor, _ = open_store(tmp_path)
    store.add("Q:q", message(1))
    fired = []
    store.when_durable().addCallback(fired.append)
    assert fired == []
    reactor.run_until(lambda: fired)
    assert store.when_durable().called  # nothing new: already durable


def test_torn_tail_is_truncated_and_earlier_records_kept(tmp_path):
    store, reactor, _ = open_store(tmp_path)
    for n in range(3):
        store.add("Q:q", message(n))
    durable(store, reactor)
    close(store, reactor)
    segment = sorted((tmp_path / "journal").glob("*.log"))[-1]
    data = segment.read_bytes()
    segment.write_bytes(data[:-7])  # a crash in the middle of the last record
    _, _, recovered = open_store(tmp_path)
    assert [m.id for _, m in recovered] == ["m-0", "m-1"]
    assert segment.stat().st_size < len(data) - 7 + 1


def test_dead_segments_are_deleted_and_live_ones_compacted(tmp_path):
    store, reactor, _ = open_store(tmp_path, segment_size=4096)
    pinned = message(0, b"x" * 100)
    store.add("Q:q", pinned)
    for n in range(1, 400):
        m = message(n, b"y" * 100)
        store.add("Q:q", m)
        store.remove("Q:q", m)
        if n % 20 == 0:
            durable(store, reactor)
    durable(store, reactor)
    # One live message must not pin every segment written since.
    assert store.segment_count() <= 4
    close(store, reactor)
    _, _, recovered = open_store(tmp_path, segment_size=4096)
    assert [m.id for _, m in recovered] == ["m-0"]


def test_sync_never_still_records(tmp_path):
    store, reactor, _ = open_store(tmp_path, sync=False)
    store.add("Q:q", message(1))
    durable(store, reactor)
    assert store.syncs >= 1
    close(store, reactor)
    _, _, recovered = open_store(tmp_path)
    assert len(recovered) == 1


def _stored(store: JournalStore, message_id: str) -> Message:
    for live in store._live.values():
        for (_, mid), m in live.items():
            if mid == message_id:
                return m
    raise KeyError(message_id)


@pytest.mark.parametrize("count", [1, 50])
def test_catalog_round_trip(tmp_path, count):
    store, reactor, _ = open_store(tmp_path)
    catalog = {"queues": [f"q{i}" for i in range(count)], "durable": {"a.b": {"topic": "t", "selector": None}}}
    store.save_catalog(catalog)
    close(store, reactor)
    assert JournalStore(tmp_path, LoopReactor()).load_catalog() == catalog


def test_recovery_keeps_enqueue_order_across_compaction(tmp_path):
    store, reactor, _ = open_store(tmp_path, segment_size=4096)
    kept = []
    for n in range(300):
        m = message(n, b"z" * 100)
        store.add("Q:q", m)
        if n % 50 == 0:
            kept.append(m.id)
        else:
            store.remove("Q:q", m)
        if n % 20 == 0:
            durable(store, reactor)
    for n in range(300, 310):
        m = message(n, b"z" * 100)
        store.add("Q:q", m)
        kept.append(m.id)
    durable(store, reactor)
    close(store, reactor)
    _, _, recovered = open_store(tmp_path, segment_size=4096)
    assert [m.id for _, m in recovered] == kept


def test_mesh_path_survives_recovery(tmp_path):
    store, reactor, _ = open_store(tmp_path)
    m = message(1)
    m.path = ("node-a", "node-b")
    store.add("Q:q", m)
    durable(store, reactor)
    close(store, reactor)
    _, _, recovered = open_store(tmp_path)
    assert recovered[0][1].path == ("node-a", "node-b")
