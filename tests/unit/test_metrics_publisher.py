"""metrics/: the stream publisher and the reporter's entries, against a real redis-server."""

from __future__ import annotations

import socket
import time

import msgspec
import pytest
import redis
from twisted.internet.testing import MemoryReactorClock

from management.events import EventLog
from meshgate.redis_server import RedisServer, free_port
from metrics.publisher import StreamPublisher
from metrics.reporter import EVENTS, SNAPSHOTS, MetricsReporter
from model import SCHEMA_VERSION, Link, MetricsStatus, Node, PartialQueue, Snapshot
from model.events import AnyEvent, DeadLetter, LinkUp


def wait_for(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def publishers():
    """Make publishers; every one is stopped at the end (briefly: Redis may be gone by then)."""
    made: list[StreamPublisher] = []

    def make(url: str, **options) -> StreamPublisher:
        publisher = StreamPublisher(url, **options)
        made.append(publisher)
        return publisher

    yield make
    for publisher in made:
        publisher.stop(patience=1.0)


def client_for(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=5.0)


def numbers(client: redis.Redis, key: str) -> list[int]:
    return [int(fields[b"n"]) for _, fields in client.xrange(key)]


def unreachable_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"  # free: nobody listens there


# -- writing ----------------------------------------------------------------------------------


def test_entries_go_to_prefixed_streams_with_their_fields_in_order(redis_server, publishers):
    publisher = publishers(redis_server.url, prefix="mg-test")
    publisher.start()
    for n in range(50):
        publisher.offer("snapshots", {"n": n, "node": "node-1", "data": b'{"x":1}'})
        if n % 10 == 0:
            publisher.offer("events", {"n": n, "kind": "link_up"})
    client = client_for(redis_server)
    wait_for(lambda: client.xlen("mg-test:snapshots") == 50 and client.xlen("mg-test:events") == 5,
             what="every entry written")
    entries = client.xrange("mg-test:snapshots")
    assert [fields for _, fields in entries] == [
        {b"n": str(n).encode(), b"node": b"node-1", b"data": b'{"x":1}'} for n in range(50)
    ]
    ids = [entry_id for entry_id, _ in entries]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split(b"-"))))
    assert numbers(client, "mg-test:events") == [0, 10, 20, 30, 40]
    assert client.exists("snapshots", "events") == 0  # nothing written without the prefix
    wait_for(lambda: publisher.status().buffered == 0, what="the buffer to empty")
    assert publisher.written == 55 and publisher.dropped == 0
    assert publisher.status() == MetricsStatus(state="ok", buffered=0, dropped=0, last_error=None)


def test_maxlen_trims_approximately_but_bounded(redis_server, publishers):
    # MAXLEN ~ N: Redis removes only whole macro nodes (stream-node-max-entries entries each), so the
    # stream keeps at least N entries and fewer than N + one node; the newest are the ones kept.
    client = client_for(redis_server)
    node_size = int(client.config_get("stream-node-max-entries")["stream-node-max-entries"])
    maxlen, offered = 1000, 8000
    publisher = publishers(redis_server.url, prefix="trim", maxlen=maxlen, buffer_size=offered)
    publisher.start()
    for n in range(offered):
        publisher.offer("s", {"n": n})
    wait_for(lambda: publisher.written == offered, what="every entry written")
    length = client.xlen("trim:s")
    assert maxlen <= length < maxlen + node_size
    assert numbers(client, "trim:s") == list(range(offered - length, offered))
    assert publisher.dropped == 0


def test_entries_kept_for_a_time_trim_what_is_older(redis_server, publishers):
    """Snapshots are kept for a time (MINID), whatever the number of nodes writing them."""
    admin = client_for(redis_server)
    hour_ago = int((time.time() - 3600) * 1000)
    for i in range(1000):  # whole stream nodes of old entries, so approximate trimming can drop them
        admin.xadd("keep:s", {"n": "old"}, id=f"{hour_ago + i}-0")
    publisher = publishers(redis_server.url, prefix="keep", maxlen=10_000)
    publisher.start()
    publisher.offer("s", {"n": "new"}, keep_seconds=60)
    wait_for(lambda: publisher.written == 1, what="the new entry to be written")
    left = [fields[b"n"] for _, fields in admin.xrange("keep:s")]
    block = int(admin.config_get("stream-node-max-entries")["stream-node-max-entries"])
    assert left[-1] == b"new" and left.count(b"old") < block  # the old ones went, but for part of one stream node


def test_a_full_buffer_is_written_in_batches_and_status_follows(redis_server, publishers):
    publisher = publishers(redis_server.url, prefix="big", buffer_size=5000)
    for n in range(2000):
        publisher.offer("s", {"n": n})
    # Not started yet: everything waits, and more than a batch waiting is "behind".
    status = publisher.status()
    assert (status.state, status.buffered, status.dropped, status.last_error) == ("behind", 2000, 0, None)
    publisher.start()
    wait_for(lambda: publisher.status().buffered == 0, what="the buffer to empty")
    assert numbers(client_for(redis_server), "big:s") == list(range(2000))
    assert publisher.status().state == "ok"


# -- Redis down -------------------------------------------------------------------------------


def test_redis_down_from_the_start_never_blocks_and_drops_the_oldest(publishers):
    publisher = publishers(unreachable_url(), buffer_size=100)
    publisher.start()
    offered = 20_000
    started = time.perf_counter()
    for n in range(offered):
        publisher.offer("s", {"n": n})
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"{offered} offers took {elapsed:.2f} s"
    status = publisher.status()
    assert status.buffered == 100  # never more than buffer_size
    assert publisher.dropped == offered - 100 == status.dropped  # exactly what did not fit
    wait_for(lambda: publisher.status().state == "behind" and publisher.status().last_error is not None,
             what="status behind")
    status = publisher.status()
    assert "ConnectionError" in status.last_error
    assert status.buffered == 100 and status.dropped == offered - 100
    assert publisher.written == 0


def test_the_newest_entries_wait_for_redis_and_arrive_when_it_comes(redis_servers, publishers):
    port = free_port()
    publisher = publishers(f"redis://127.0.0.1:{port}/0", prefix="late", buffer_size=30)
    publisher.start()
    for n in range(100):
        publisher.offer("s", {"n": n})
    wait_for(lambda: publisher.status().last_error is not None, what="the first failure")
    assert publisher.dropped == 70
    server = redis_servers(port)
    wait_for(lambda: publisher.status().state == "ok", timeout=30.0, what="publishing to resume")
    wait_for(lambda: publisher.status().buffered == 0, what="the buffer to empty")
    assert numbers(client_for(server), "late:s") == list(range(70, 100))  # the oldest went, as counted
    assert publisher.status().last_error is None and publisher.dropped == 70


def test_publishing_resumes_by_itself_after_redis_is_killed_and_restarted(redis_servers, publishers):
    server = redis_servers()
    publisher = publishers(server.url, prefix="chaos")
    publisher.start()
    sent = 0

    def publish_until(predicate, timeout=30.0, what="condition"):
        """Offer an entry about every 5 ms, as a node does, until ``predicate``."""
        nonlocal sent
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            publisher.offer("s", {"n": sent})
            sent += 1
            time.sleep(0.005)

    publish_until(lambda: publisher.written >= 50, what="the first entries written")
    server.kill()
    first_after_kill = sent
    publish_until(lambda: publisher.status().state == "behind", what="status behind")
    assert publisher.status().last_error is not None
    publish_until(lambda: sent >= first_after_kill + 100, what="more entries while down")
    assert publisher.status().buffered > 0 and publisher.dropped == 0
    restarted = redis_servers(server.port)
    publish_until(lambda: publisher.status().state == "ok", what="publishing to resume")
    last = sent
    wait_for(lambda: publisher.status().buffered == 0, what="the buffer to empty")
    # The new server starts empty (no persistence): it holds a contiguous run ending with the last
    # entry offered, covering at least everything offered since the kill, each once, in order.
    got = numbers(client_for(restarted), "chaos:s")
    assert got == list(range(got[0], last))
    assert got[0] <= first_after_kill
    status = publisher.status()
    assert (status.state, status.buffered, status.dropped, status.last_error) == ("ok", 0, 0, None)


def test_retries_back_off_while_redis_is_down_even_as_entries_keep_coming(publishers):
    publisher = publishers(unreachable_url())
    attempts = []
    failed = publisher._failed

    def counting(error):
        attempts.append(time.monotonic())
        failed(error)

    publisher._failed = counting  # each failure is one attempt to write
    publisher.start()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:  # an entry every 10 ms, as events keep coming
        publisher.offer("s", {"n": 1})
        time.sleep(0.01)
    # Backoff from 0.2 s, doubling: attempts near 0, 0.2, 0.6, 1.4 s. Not one per entry (about 200).
    assert 2 <= len(attempts) <= 8, f"{len(attempts)} attempts in 2 s"


# -- stopping ---------------------------------------------------------------------------------


def test_stop_writes_what_is_buffered(redis_server, publishers):
    publisher = publishers(redis_server.url, prefix="flush")
    publisher.start()
    for n in range(3000):
        publisher.offer("s", {"n": n})
    publisher.stop(patience=10.0)
    assert not publisher._thread.is_alive()
    assert numbers(client_for(redis_server), "flush:s") == list(range(3000))


def test_stop_returns_within_its_patience_when_redis_refuses(publishers):
    publisher = publishers(unreachable_url())
    publisher.start()
    for n in range(1000):
        publisher.offer("s", {"n": n})
    wait_for(lambda: publisher.status().state == "behind" and publisher.status().last_error, what="a failure")
    started = time.monotonic()
    publisher.stop(patience=1.0)
    assert time.monotonic() - started < 1.5
    assert not publisher._thread.is_alive()  # it gave up on what Redis would not take
    assert publisher.status().buffered == 1000


def test_stop_returns_within_its_patience_when_redis_hangs(publishers):
    # A listener that never answers: connections complete in the kernel's backlog, reads hang.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        publisher = publishers(f"redis://127.0.0.1:{silent.getsockname()[1]}/0")
        publisher.start()
        for n in range(10):
            publisher.offer("s", {"n": n})
        time.sleep(0.2)  # let the thread get stuck in its write (not an assertion)
        started = time.monotonic()
        publisher.stop(patience=0.5)
        assert time.monotonic() - started < 1.0
        assert publisher.written == 0


def test_stop_without_start_returns_at_once():
    publisher = StreamPublisher(unreachable_url())
    publisher.offer("s", {"n": 1})
    started = time.monotonic()
    publisher.stop(patience=5.0)
    assert time.monotonic() - started < 0.5


# -- dropped counts what was lost ---------------------------------------------------------------


def test_dropped_counts_only_entries_that_never_reach_redis(redis_server, publishers):
    admin = client_for(redis_server)
    publisher = publishers(redis_server.url, prefix="count", buffer_size=5, maxlen=10_000)
    publisher.start()
    publisher.offer("s", {"n": 0})
    wait_for(lambda: publisher.written == 1, what="the connection to be up")
    admin.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
    try:
        publisher.offer("s", {"n": 1})
        # The publisher is now inside its write of [1], held by the pause.
        wait_for(lambda: admin.info("clients")["blocked_clients"] == 1, what="the write to be held")
        for n in range(2, 11):  # a full buffer: the oldest not on its way leave it, and are counted as dropped
            publisher.offer("s", {"n": n})
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    wait_for(lambda: publisher.status().buffered == 0, what="the buffer to empty")
    got = numbers(admin, "count:s")
    lost = [n for n in range(11) if n not in got]
    assert got == [0, 1, 7, 8, 9, 10]  # 1 was on its way: it stayed, and arrived
    assert publisher.dropped == len(lost) == 5


# -- the reporter's entries -------------------------------------------------------------------


def a_snapshot(seq: int) -> Snapshot:
    node = Node(id="node-1", name="alpha", version="0.1.0", started_at=1700000000.0, last_seen=1700000005.0)
    return Snapshot(
        seq=seq, taken_at=1700000005.0 + seq, node=node,
        links=[Link(node="node-1", peer="node-2", peer_name="beta", direction="dialled", dialled=True, state="up",
                    since=1700000001.0)],
        queues=[PartialQueue(node="node-1", name="orders", depth=3, in_flight=1, consumers=2)],
    )


def test_reporter_entries_carry_node_seq_schema_and_the_snapshot(redis_server, publishers):
    clock = MemoryReactorClock()
    clock.advance(1700000000)
    taken = []

    def snapshot():
        taken.append(a_snapshot(len(taken) + 1))
        return taken[-1]

    publisher = publishers(redis_server.url, prefix="rep")
    reporter = MetricsReporter(publisher, snapshot, interval=1.0, reactor=clock)
    reporter.start()  # the first snapshot at once, then one per interval
    assert len(taken) == 1
    clock.advance(1.0)
    clock.advance(1.0)
    assert len(taken) == 3
    client = client_for(redis_server)
    wait_for(lambda: client.xlen(f"rep:{SNAPSHOTS}") == 3, what="three snapshots")
    entries = [fields for _, fields in client.xrange(f"rep:{SNAPSHOTS}")]
    for seq, (fields, expected) in enumerate(zip(entries, taken, strict=True), start=1):
        assert set(fields) == {b"node", b"seq", b"schema", b"boot", b"at", b"queues", b"data"}
        assert fields[b"node"] == b"node-1"
        assert fields[b"seq"] == str(seq).encode()
        assert fields[b"schema"] == str(SCHEMA_VERSION).encode()
        assert (float(fields[b"boot"]), float(fields[b"at"])) == (expected.node.started_at, expected.taken_at)
        assert int(fields[b"queues"]) == expected.queues_version
        assert msgspec.json.decode(fields[b"data"], type=Snapshot) == expected
    reporter.stop()
    assert not clock.getDelayedCalls()
    clock.advance(5.0)
    assert len(taken) == 3  # stopped: no more snapshots


def test_a_snapshot_that_takes_long_spaces_the_next_ones_out(redis_server, publishers):
    """However many queues a node has, taking snapshots stays a small share of the reactor."""
    from metrics.reporter import MAX_SHARE

    clock = MemoryReactorClock()
    clock.advance(1700000000)
    costs = []

    def slow_snapshot():
        started = time.perf_counter()
        while time.perf_counter() - started < 0.05:  # as a node with many thousands of queues
            pass
        costs.append(1)
        return a_snapshot(len(costs))

    reporter = MetricsReporter(publishers(redis_server.url, prefix="slow"), slow_snapshot, interval=1.0,
                               reactor=clock)
    reporter.start()
    (call,) = clock.getDelayedCalls()
    assert call.getTime() - clock.seconds() >= 0.05 / MAX_SHARE > 1.0
    assert reporter.last_cost >= 0.05
    reporter.stop()


def test_reporter_event_entries_carry_node_kind_schema_and_the_event(redis_server, publishers):
    clock = MemoryReactorClock()
    clock.advance(1700000000)
    publisher = publishers(redis_server.url, prefix="rep")
    publisher.start()
    reporter = MetricsReporter(publisher, lambda: a_snapshot(1), interval=1.0, reactor=clock)
    log = EventLog("node-1", clock)
    log.sinks.append(reporter.publish_event)
    link_up = LinkUp(peer="node-2", peer_name="beta", dialled=False)
    log.emit(link_up)
    log.count(DeadLetter(queue="orders", reason="expired", dead_letter_queue="DLQ", count=0), 3)
    clock.advance(1.0)
    client = client_for(redis_server)
    wait_for(lambda: client.xlen(f"rep:{EVENTS}") == 2, what="two events")
    entries = [fields for _, fields in client.xrange(f"rep:{EVENTS}")]
    assert [set(fields) for fields in entries] == [{b"node", b"kind", b"schema", b"data"}] * 2
    assert [fields[b"kind"] for fields in entries] == [b"link_up", b"dead_letter"]
    assert all(fields[b"node"] == b"node-1" and fields[b"schema"] == b"1" for fields in entries)
    decoded = [msgspec.json.decode(fields[b"data"], type=AnyEvent) for fields in entries]
    assert decoded[0] == link_up and decoded[0].time == 1700000000.0
    assert type(decoded[1]) is DeadLetter and decoded[1].count == 3 and decoded[1].node == "node-1"
    assert client.exists(f"rep:{SNAPSHOTS}") == 0  # events only: publish_snapshot was never called


def test_a_window_s_deepest_depth_is_what_the_queue_reached_between_snapshots_and_starts_afresh_each_window(
        redis_server, publishers):
    from gateway.broker.broker import Broker
    from gateway.broker.message import Message
    from management.state import LocalState
    from model.mesh import Addresses
    from tests.protocol.mesh_harness import KeepingStore

    clock = MemoryReactorClock()
    clock.advance(1_700_000_003.0)  # 3 s into a 10-second window
    broker = Broker(KeepingStore(), clock=clock)
    state = LocalState(node_id="n1", name="n1", started_at=clock.seconds(), broker=broker, mesh=None, clock=clock,
                       addresses=Addresses)
    reporter = MetricsReporter(publishers(redis_server.url, prefix="win"), state.snapshot, interval=1.0,
                               reactor=clock, roll_window=state.roll_depth_window)
    queue = broker.queue("orders")
    reporter.start()
    version = broker.queues_version
    ids = iter(range(30))
    for _ in range(30):  # between two snapshots: up to 30 and down to 4
        queue.put(Message(f"m{next(ids)}", "queue", "orders", {}, b"x"))
    queue.take(26)
    clock.advance(1.0)
    [partial] = state.snapshot().queues
    assert (partial.depth, partial.window_depth_max) == (4, 30)
    clock.advance(6.0)  # the next window began: its deepest so far is the depth then
    [partial] = state.snapshot().queues
    assert (partial.depth, partial.window_depth_max) == (4, 4)
    broker.queue("audit")
    assert state.snapshot().queues_version == version + 1  # a queue created: the set's version goes up
    reporter.stop()
