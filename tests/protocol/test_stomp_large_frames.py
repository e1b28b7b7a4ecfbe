"""Large frames on the STOMP side: their bytes count against the broker's memory
limit as they arrive, a client whose frame arrives while memory is full stops
being read, and a client that goes mid-frame gives the memory back."""

from __future__ import annotations

from twisted.internet.testing import StringTransport

from gateway.stomp.codec import encode_frame
from tests.protocol.stomp_harness import Harness

MiB = 1024 * 1024


def send_frame(body: bytes, destination: str = "/queue/big") -> bytes:
    return encode_frame("SEND", {"destination": destination, "content-length": str(len(body))}, body, version="1.2")


def test_a_frame_counts_against_memory_as_it_arrives_and_once_when_queued():
    harness = Harness()
    client = harness.client()
    frame = send_frame(b"x" * MiB)
    client.raw(frame[: MiB // 2])
    assert MiB // 2 - 100 <= harness.broker.memory_used <= MiB // 2
    client.raw(frame[MiB // 2:])
    assert len(harness.broker.queues["big"]) == 1
    assert MiB <= harness.broker.memory_used < MiB + 4096  # the queued message only: the arrival's count is gone


def test_a_client_that_goes_mid_frame_gives_the_memory_back():
    harness = Harness()
    client = harness.client()
    client.raw(send_frame(b"x" * MiB)[: MiB // 2])
    assert harness.broker.memory_used > 0
    client.drop()
    assert harness.broker.memory_used == 0


def test_a_frame_arriving_while_memory_is_full_pauses_its_client_until_memory_drains():
    harness = Harness(memory_limit=2 * MiB)
    filler = harness.client()
    filler.send("SEND", {"destination": "/queue/full"}, b"f" * (2 * MiB))  # fills memory on its own
    big = harness.client()
    big.raw(send_frame(b"x" * MiB)[: MiB // 4])
    assert big.transport.producerState == "paused"
    consumer = harness.client()
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/full"})
    assert len(consumer.messages()) == 1
    assert big.transport.producerState == "producing"


def test_a_frame_that_alone_fills_memory_is_read_on_so_it_can_finish():
    harness = Harness(memory_limit=MiB)
    client = harness.client()
    frame = send_frame(b"x" * (2 * MiB))
    client.raw(frame[: 3 * MiB // 2])  # past the limit, but no one else holds memory
    assert client.transport.producerState == "producing"
    client.raw(frame[3 * MiB // 2:])
    assert len(harness.broker.queues["big"]) == 1


def test_a_frame_that_tips_its_own_transaction_over_the_limit_is_read_on_to_its_error():
    """Its own transaction holds the memory: paused, it would wait for itself forever."""
    harness = Harness(memory_limit=MiB)
    client = harness.client()
    client.send("BEGIN", {"transaction": "t"})
    client.send("SEND", {"destination": "/queue/big", "transaction": "t"}, b"t" * (MiB - 400 - 1000))
    frame = encode_frame("SEND", {"destination": "/queue/big", "transaction": "t"}, b"t" * 4000, version="1.2")
    client.raw(frame[:2000])  # with the transaction's bytes, past the limit
    assert harness.broker.memory_full
    assert client.transport.producerState == "producing"
    client.raw(frame[2000:])
    assert [f.command for f in client.frames()] == ["ERROR"]


LARGE = bytes(range(1, 256)) * (3 * MiB // 255 + 7)  # over 3 MiB (and no NUL): written in pieces


class SlowSocket(StringTransport):
    """A socket whose buffer is full once ``limit`` bytes wait in it, as Twisted's
    TCP transport says (pauseProducing at once), until the test drains it."""

    def __init__(self, limit: int = 64 * 1024) -> None:
        super().__init__()
        self.limit = limit
        self.waiting = 0

    def write(self, data: bytes) -> None:
        super().write(data)
        self.waiting += len(data)
        if self.waiting > self.limit and self.producerState == "producing":
            self.producer.pauseProducing()
            self.producerState = "paused"

    def drain(self) -> None:
        """The peer read everything so far."""
        self.waiting = 0
        if self.producerState == "paused":
            self.producerState = "producing"
            self.producer.resumeProducing()

    def drain_all(self, rounds: int = 100) -> None:
        for _ in range(rounds):
            self.drain()


def test_a_large_body_goes_out_as_the_socket_takes_it_holding_the_shared_body_not_a_copy():
    harness = Harness()
    subscribers = [harness.client(transport=SlowSocket()) for _ in range(3)]
    for subscriber in subscribers:
        subscriber.send("SUBSCRIBE", {"id": "t", "destination": "/topic/big"})
    harness.client().send("SEND", {"destination": "/topic/big"}, LARGE)
    bodies = set()
    for subscriber in subscribers:
        assert subscriber.transport.producerState == "paused"
        assert len(subscriber.transport.value()) < 2 * 256 * 1024  # a head and a piece out, not 3 MiB
        bodies.update(id(item.obj) for item in subscriber.protocol._stream if isinstance(item, memoryview))
    assert len(bodies) == 1  # one body, shared by reference by every subscriber
    for subscriber in subscribers:
        subscriber.transport.drain_all()
        (message,) = subscriber.messages()
        assert message.body == LARGE


def test_nothing_goes_between_the_pieces_of_a_large_body_and_what_waited_follows_it_in_order():
    harness = Harness()
    consumer = harness.client(transport=SlowSocket())
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q"})
    producer = harness.client()
    producer.send("SEND", {"destination": "/queue/q"}, LARGE)
    producer.send("SEND", {"destination": "/queue/q"}, b"small, sent after")
    consumer.send("BEGIN", {"transaction": "t", "receipt": "during"})  # its RECEIPT waits behind the body
    assert b"RECEIPT" not in consumer.transport.value()
    consumer.transport.drain_all()
    frames = consumer.frames()
    assert [(f.command, len(f.body)) for f in frames] == [
        ("MESSAGE", len(LARGE)), ("RECEIPT", 0), ("MESSAGE", len(b"small, sent after"))]
    assert frames[0].body == LARGE


def test_heart_beats_are_not_written_inside_a_large_body():
    harness = Harness()
    consumer = harness.client(heart_beat="0,1000", transport=SlowSocket())
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q"})
    harness.client().send("SEND", {"destination": "/queue/q"}, LARGE)
    written = consumer.transport.value()
    harness.clock.advance(5)  # several heart-beat periods while the socket is full
    assert consumer.transport.value() == written
    consumer.transport.drain_all()
    assert [f.body for f in consumer.frames()] == [LARGE]
