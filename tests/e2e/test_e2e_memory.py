"""broker.memory_limit: a producer flooding a queue nobody reads is slowed down (its
socket stops being read) instead of growing the broker without bound, and nothing is
lost once a consumer drains the queue."""

from __future__ import annotations

import threading
import time

import pytest
from e2e_support import unique
from raw_stomp import RawClient, encode

COUNT = 50_000
BODY_SIZE = 1024
MB = 1024 * 1024


class Flood(threading.Thread):
    """Writes the whole pipelined flood with sendall, in chunks, counting what the
    kernel accepted; blocks (and so stops counting) when the broker stops reading."""

    def __init__(self, client: RawClient, data: bytes, chunk: int = 64 * 1024) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.data = data
        self.chunk = chunk
        self.sent = 0
        self.error: BaseException | None = None
        self.progress = threading.Condition()

    def run(self) -> None:
        sock = self.client.sock
        sock.settimeout(None)
        try:
            view = memoryview(self.data)
            for start in range(0, len(view), self.chunk):
                sock.sendall(view[start:start + self.chunk])
                with self.progress:
                    self.sent = min(len(view), start + self.chunk)
                    self.progress.notify_all()
        except BaseException as error:  # reported by the test
            self.error = error

    def wait_stalled(self, quiet: float, limit: float) -> int:
        """Wait until nothing more was accepted for ``quiet`` seconds (or ``limit`` passed)."""
        deadline = time.monotonic() + limit
        with self.progress:
            last = self.sent
            while time.monotonic() < deadline and self.sent < len(self.data):
                self.progress.wait(quiet)
                if self.sent == last:
                    break
                last = self.sent
            return self.sent


def _count_messages(consumer: RawClient, expected: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    numbers = []
    while len(numbers) < expected:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"only {len(numbers)} of {expected} messages arrived within {timeout}s"
        frame = consumer.read_frame(remaining)
        assert frame.command == "MESSAGE", frame
        numbers.append(int(frame.headers["n"]))
    return numbers


@pytest.mark.slow
def test_memory_limit_slows_producer_and_loses_nothing(broker_factory, raw):
    broker = broker_factory(sets=["broker.memory_limit=2MiB"])
    destination = "/queue/" + unique("flood")
    producer, consumer = raw(broker), raw(broker)
    producer.connect("1.2")
    consumer.connect("1.2")
    baseline = broker.rss()
    body = b"x" * BODY_SIZE
    data = b"".join(
        encode("SEND", {"destination": destination, "n": str(i), "content-length": str(BODY_SIZE)}, body)
        for i in range(COUNT)
    )
    total = len(data)
    flood = Flood(producer, data)
    flood.start()
    accepted = flood.wait_stalled(quiet=1.0, limit=15.0)
    rss_growth = broker.rss() - baseline
    assert flood.error is None, flood.error
    assert accepted < total, "the broker read the whole 50 MB flood without pushing back"
    # 2 MiB of messages, plus bookkeeping and buffers: far below the 50 MB written.
    assert rss_growth < 25 * MB, f"broker RSS grew by {rss_growth / MB:.1f} MB with memory_limit=2MiB"
    assert broker.running

    consumer.send_frame("SUBSCRIBE", {"destination": destination, "id": "drain", "ack": "auto"})
    numbers = _count_messages(consumer, COUNT, timeout=90)
    flood.join(30)
    assert not flood.is_alive() and flood.error is None, flood.error
    assert numbers == list(range(COUNT))
    assert broker.rss() - baseline < 60 * MB


def test_memory_limit_producer_resumes_while_consumer_is_live(broker_factory, raw):
    """With a live consumer from the start the limit must not deadlock anything."""
    broker = broker_factory(sets=["broker.memory_limit=1MiB"])
    destination = "/queue/" + unique("live")
    producer, consumer = raw(broker), raw(broker)
    consumer.connect("1.2")
    consumer.send_frame("SUBSCRIBE", {"destination": destination, "id": "s", "ack": "client-individual",
                                      "activemq.prefetchSize": "50", "receipt": "sub"})
    consumer.expect("RECEIPT")
    producer.connect("1.2")
    count = 5000
    data = b"".join(encode("SEND", {"destination": destination, "n": str(i)}, b"y" * 2048) for i in range(count))
    flood = Flood(producer, data)
    flood.start()
    numbers = []
    deadline = time.monotonic() + 60
    while len(numbers) < count:
        frame = consumer.read_frame(max(0.1, deadline - time.monotonic()))
        assert frame.command == "MESSAGE", frame
        numbers.append(int(frame.headers["n"]))
        consumer.send_frame("ACK", {"id": frame.headers["ack"]})
    flood.join(30)
    assert flood.error is None
    assert numbers == list(range(count))


@pytest.mark.slow
def test_memory_limit_covers_messages_pending_in_a_transaction(broker_factory, raw):
    """Messages SENT inside a transaction are held by the broker until COMMIT too: a
    client pipelining 50 MB into a transaction it never commits must not grow the
    broker without bound (it may be slowed down or refused with an ERROR)."""
    broker = broker_factory(sets=["broker.memory_limit=2MiB"])
    destination = "/queue/" + unique("txflood")
    producer = raw(broker)
    producer.connect("1.2")
    producer.send_frame("BEGIN", {"transaction": "big"})
    baseline = broker.rss()
    body = b"x" * BODY_SIZE
    data = b"".join(
        encode("SEND", {"destination": destination, "transaction": "big", "content-length": str(BODY_SIZE)},
               body)
        for _ in range(COUNT)
    )
    flood = Flood(producer, data)
    flood.start()
    flood.wait_stalled(quiet=1.0, limit=20.0)
    rss_growth = broker.rss() - baseline
    assert rss_growth < 25 * MB, (
        f"broker RSS grew by {rss_growth / MB:.1f} MB (memory_limit=2MiB) while a client piled "
        f"{flood.sent / MB:.1f} MB into an uncommitted transaction")


def test_transaction_larger_than_memory_limit_does_not_hang(broker_factory, raw, connect):
    """A transaction bigger than memory_limit must end one way or the other -- COMMIT
    accepted (RECEIPT) or refused (ERROR) -- never a producer stuck forever because its
    own uncommitted messages fill the memory it waits for."""
    broker = broker_factory(sets=["broker.memory_limit=1MiB"])
    destination = "/queue/" + unique("bigtx")
    consumer = connect(broker)
    consumer.subscribe(destination)
    producer = raw(broker)
    producer.connect("1.2")
    body = b"t" * BODY_SIZE
    data = (encode("BEGIN", {"transaction": "big"})
            + b"".join(encode("SEND", {"destination": destination, "transaction": "big"}, body)
                       for _ in range(3000))
            + encode("COMMIT", {"transaction": "big", "receipt": "committed"}))
    flood = Flood(producer, data)
    flood.start()
    try:
        frame = producer.read_frame(timeout=20)
    except AssertionError:
        pytest.fail(f"no RECEIPT or ERROR 20 s after a 3 MB transaction (1 MiB limit); the producer got "
                    f"{flood.sent / MB:.1f} of {len(data) / MB:.1f} MB in and is stuck")
    assert frame.command in ("RECEIPT", "ERROR"), frame
    if frame.command == "RECEIPT":
        assert len(consumer.listener.wait_for(3000, timeout=30)) == 3000
