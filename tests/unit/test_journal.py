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
        call = _Call(func, args)
        self.calls.put((call, ()))
        return call

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


class _Call:
    """A delayed call as the reactor hands it back: it can be cancelled."""

    def __init__(self, func, args) -> None:
        self.func, self.args, self.cancelled, self.called = func, args, False, False

    def __call__(self) -> None:
        if not self.cancelled:
            self.called = True
            self.func(*self.args)

    def active(self) -> bool:
        return not (self.cancelled or self.called)

    def cancel(self) -> None:
        self.cancelled = True


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


def test_mostly_dead_segments_are_compacted_one_at_a_time(tmp_path):
    """A consumer that drains a long backlog leaves many old segments mostly dead at
    once; compacting them all before any copy is durable would hold each twice and
    could fill the disk that compaction was meant to free."""
    store, reactor, _ = open_store(tmp_path, segment_size=4096)
    messages = [message(n, b"z" * 100) for n in range(300)]
    for m in messages:
        store.add("Q:q", m)
        if m.id.endswith("0"):
            durable(store, reactor)  # a flush per 10 messages: a segment per ~25
    durable(store, reactor)
    assert store.segment_count() >= 8
    kept = [m.id for m in messages[::25]]
    for m in messages:
        if m.id not in kept:
            store.remove("Q:q", _stored(store, m.id))
    segments = tmp_path / "journal"
    most_held_twice = 0

    def settled() -> bool:
        nonlocal most_held_twice
        held_twice = len(list(segments.glob("*.log"))) - store.segment_count()
        most_held_twice = max(most_held_twice, held_twice)
        return store.segment_count() <= 4 and held_twice == 0

    extra = message(999, b"z" * 100)
    store.add("Q:q", extra)  # a roll-over starts the collection
    kept.append(extra.id)
    reactor.run_until(settled)
    assert most_held_twice == 1
    close(store, reactor)
    _, _, recovered = open_store(tmp_path, segment_size=4096)
    assert [m.id for _, m in recovered] == kept


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


# -- records written before messages carried their accept time ---------------------------------


def _old_add_record(queue_key: str, m: Message) -> bytes:
    """An add record as a journal written before ``created`` existed holds it: type 1, no time."""
    import zlib

    from gateway.broker.message import encode_headers
    from gateway.store.records import ADD, ADD_FIELDS, HEAD, KINDS

    key, mid, address = queue_key.encode(), m.id.encode(), m.address.encode()
    headers, henc = encode_headers(m.headers)
    path = ",".join(m.path).encode()
    payload = b"".join((
        ADD_FIELDS.pack(len(key), len(mid), KINDS[m.kind], len(address), len(headers), len(m.body), m.priority,
                        m.expires, m.deliveries, henc, m.sequence, len(path)),
        key, mid, address, headers, m.body, path,
    ))
    return HEAD.pack(len(payload), zlib.crc32(payload, ADD), ADD) + payload


def test_journal_from_before_created_still_recovers(tmp_path):
    old = []
    for n in range(3):
        m = message(n, b"old body %d" % n, color="blue")
        m.sequence = n + 1
        m.expires = 1234567 if n == 1 else 0
        old.append(m)
    old[2].path = ("node-a",)
    journal = tmp_path / "journal"
    journal.mkdir()
    (journal / "00000001.log").write_bytes(b"".join(_old_add_record("Q:orders", m) for m in old))
    store, reactor, recovered = open_store(tmp_path)
    assert [(key, m.id) for key, m in recovered] == [("Q:orders", "m-0"), ("Q:orders", "m-1"), ("Q:orders", "m-2")]
    for (_, got), want in zip(recovered, old, strict=True):
        assert got.created == 0.0  # unknown: no latency is counted for it
        assert (got.body, got.headers, got.priority, got.expires, got.sequence, got.persistent) == (
            want.body, want.headers, want.priority, want.expires, want.sequence, True)
    assert recovered[2][1].path == ("node-a",)
    # It stays removable, and new messages follow it in order.
    store.remove("Q:orders", recovered[0][1])
    new = message(9)
    new.created = 1700000123.456789
    store.add("Q:orders", new)
    durable(store, reactor)
    close(store, reactor)
    _, _, again = open_store(tmp_path)
    assert [m.id for _, m in again] == ["m-1", "m-2", "m-9"]
    assert [m.created for _, m in again] == [0.0, 0.0, 1700000123.456789]


def test_created_survives_recovery(tmp_path):
    store, reactor, _ = open_store(tmp_path)
    timed = message(1)
    timed.created = 1700000000.123456
    untimed = message(2)  # created 0.0: unknown
    store.add("Q:q", timed)
    store.add("Q:q", untimed)
    durable(store, reactor)
    close(store, reactor)
    segment = sorted((tmp_path / "journal").glob("*.log"))[-1].read_bytes()
    from gateway.store.records import ADD_TIMED, HEAD

    assert HEAD.unpack_from(segment, 0)[2] == ADD_TIMED  # written as type 3
    _, _, recovered = open_store(tmp_path)
    assert [(m.id, m.created) for _, m in recovered] == [("m-1", 1700000000.123456), ("m-2", 0.0)]
