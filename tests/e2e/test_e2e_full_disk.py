"""A node whose data dir is a small real filesystem (a tmpfs this test mounts; CI
runs as root) filled by persistent sends: no RECEIPT for what is not on disk, an
ERROR naming the full disk for what is refused (no client hangs for good),
non-persistent traffic and new subscriptions still working, and persistent sends
coming back by themselves once a consumer has drained the queue; after a kill -9
the node recovers exactly what was receipted and not consumed."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
import stomp.exception
from e2e_support import manage_result, unique
from mesh_support import mesh_fixture  # noqa: F401

from model.requests import Events, Nodes

pytestmark = pytest.mark.timeout(300)  # bounded waits add up on a busy 2-core machine
BODY = "x" * 32 * 1024
SENT = 400  # 12.5 MiB of bodies for an 8 MiB disk


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode:
        pytest.fail(f"mounting a tmpfs needs root (CI runs as root): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_refuses_persistent_sends_with_an_error_and_recovers_by_itself(broker_factory, connect,
                                                                                   small_disk):
    # max_disk_usage 100: no limit stops the producer first; the disk itself fills.
    broker = broker_factory(data_dir=small_disk / "data",
                            sets=["store.journal_file_size=1MiB", "store.max_disk_usage=100"])
    queue = "/queue/" + unique("full")
    producer = connect(broker)
    for i in range(SENT):
        try:
            producer.send(queue, BODY, receipt=f"m{i}", wait=False, persistent="true", seq=str(i))
        except (stomp.exception.StompException, OSError):
            break  # the broker said ERROR and closed: sends after it cannot go
    # Bounded: the producer owed receipts for the failed write is told at once, not left hanging.
    error = producer.listener.wait_error(timeout=30)
    assert error.headers["message"].startswith("not stored: the store cannot write (No space left on device)")
    receipted = {rid for rid in producer.listener.receipts}
    assert 0 < len(receipted) < SENT

    # Reads, non-persistent traffic and a new queue's subscription all still work.
    other = connect(broker)
    fresh = "/queue/" + unique("fresh")
    other.subscribe(fresh)
    other.send(fresh, "not persistent", receipt=True)
    assert other.listener.wait_for(1)[0].body == "not persistent"

    # A graceful stop on the full disk says what it could not write and exits 1 ...
    broker.stop(expect=1)
    assert "stopped with the store failing" in broker.describe()
    # ... and the restart recovers every receipted message.
    broker.start()
    consumer = connect(broker)
    consumer.subscribe(queue, ack="client-individual")
    consumer.send(queue, "fence")  # a queue is FIFO: everything stored comes before it
    messages = consumer.listener.wait_for_body("fence", timeout=30)  # prefetch (1000) holds them all
    recovered = [f"m{m.headers['seq']}" for m in messages if m.body != "fence"]
    # Every receipted message, once; a message written but not yet synced when the ERROR came may be
    # there too (stored without a RECEIPT: at least once), but never twice.
    assert set(recovered) >= receipted and len(recovered) == len(set(recovered))
    for message in messages[:-1]:
        consumer.ack(message)
    # The last ACK's RECEIPT comes once every ACK is on disk (the drained files' room back, if it was short).
    consumer.ack(messages[-1], receipt=True)

    # Persistent sends are accepted again, receipted, and survive a kill -9; nothing consumed comes back.
    later = connect(broker)
    for i in range(5):
        later.send(queue, f"after-{i}", receipt=True, persistent="true")
    broker.kill9()
    broker.start()
    again = connect(broker)
    again.subscribe(queue)
    again.send(queue, "fence", receipt=True)  # a queue is FIFO: whatever was recovered comes before it
    arrived = [m.body for m in again.listener.wait_for_body("fence", timeout=30)]
    assert arrived[:arrived.index("fence")] == [f"after-{i}" for i in range(5)]


def sending(producer, queue: str, count: int, prefix: str = "m") -> threading.Thread:
    """Send ``count`` persistent messages from a thread of their own: past the limit the
    broker stops reading, and once the socket's buffers are full ``sendall`` waits."""

    def send() -> None:
        for i in range(count):
            producer.send(queue, BODY, receipt=f"{prefix}{i}", wait=False, persistent="true", seq=str(i))

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("limit", ["store.limit", "store.max_disk_usage"])
def test_at_a_limit_producers_wait_instead_and_resume_when_consumers_make_room(broker_factory, connect, limit,
                                                                                request):
    if limit == "store.limit":  # 2 MiB of journal on an ordinary disk
        broker = broker_factory(sets=["store.journal_file_size=256KiB", "store.limit=2MiB"])
    else:  # the default 90% of a real 8 MiB filesystem
        disk = request.getfixturevalue("small_disk")
        broker = broker_factory(data_dir=disk / "data", sets=["store.journal_file_size=256KiB"])
    count = 200 if limit == "store.limit" else 300  # 6.25 MiB, 9.4 MiB: past the limit
    queue = "/queue/" + unique("limit")
    producer = connect(broker)
    sender = sending(producer, queue, count)
    # The producer is not read on: its sends wait in the socket, no ERROR, no receipts beyond the limit.
    producer.listener.wait_until(lambda: len(producer.listener.receipts) >= 40, "receipts up to the limit", timeout=60)
    time.sleep(0.5)  # let it stall: nothing more may be receipted while blocked
    stalled = len(producer.listener.receipts)
    assert stalled < count and not producer.listener.errors
    # Non-persistent traffic goes on.
    other = connect(broker)
    fresh = "/queue/" + unique("fresh")
    other.subscribe(fresh)
    other.send(fresh, "not persistent", receipt=True)
    assert other.listener.wait_for(1)[0].body == "not persistent"
    # A sender asking fail-if-no-space gets an ERROR naming the limit, at once.
    impatient = connect(broker)
    impatient.send(queue, "now or never", persistent="true", receipt="x", wait=False, **{"fail-if-no-space": "true"})
    assert limit in impatient.listener.wait_error(timeout=30).headers["message"]
    # A consumer drains; the producer resumes by itself and every message is receipted and consumed once.
    consumer = connect(broker)
    consumer.subscribe(queue)
    producer.listener.wait_until(lambda: len(producer.listener.receipts) == count, "every receipt", timeout=60)
    sender.join(10)
    seqs = [m.headers["seq"] for m in consumer.listener.wait_for(count, timeout=60)]
    assert sorted(seqs, key=int) == [str(i) for i in range(count)]
    # The model and the events say what happened.
    events = manage_result(broker.port, Events(kinds=["producers_blocked", "producers_resumed"]))
    kinds = [type(e).__name__ for e in events]
    assert kinds[:2] == ["ProducersBlocked", "ProducersResumed"]
    (summary,) = manage_result(broker.port, Nodes()).nodes
    node = summary.node
    assert node.store_blocked is None and node.disk_free > 0
    assert node.store_limit == (2 * 1024 * 1024 if limit == "store.limit" else None)


def test_a_mesh_node_with_no_room_leaves_custody_with_the_sender_until_it_has_room(mesh):
    a, b = mesh(2, sets=["store.journal_file_size=128KiB", "store.limit=1MiB"])
    filler, orders = "/queue/" + unique("filler"), "/queue/" + unique("orders")
    local = b.client()
    sender = sending(local, filler, 64, prefix="f")  # 2 MiB for a 1 MiB limit: b's store fills up
    local.listener.wait_until(lambda: len(local.listener.receipts) >= 20, "receipts until the limit", timeout=60)
    consumer = b.client()
    consumer.subscribe(orders)
    producer = a.client()
    for i in range(20):
        producer.send(orders, f"order-{i}", receipt=True, persistent="true")  # stored on a, receipted by a
    a.wait_log(r"has no room to store messages; they wait here")
    assert consumer.listener.messages == []  # b took none of them: a keeps custody
    drain = b.client()
    drain.subscribe(filler)  # b's room comes back as its own queue drains
    drain.listener.wait_for(64, timeout=60)
    sender.join(10)
    bodies = [m.body for m in consumer.listener.wait_for(20, timeout=60)]
    assert sorted(bodies) == sorted(f"order-{i}" for i in range(20))
