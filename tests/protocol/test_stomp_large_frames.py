"""Large frames on the STOMP side: their bytes count against the broker's memory
limit as they arrive, a client whose frame arrives while memory is full stops
being read, and a client that goes mid-frame gives the memory back."""

from __future__ import annotations

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
