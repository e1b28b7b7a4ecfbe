"""Store flow control on the STOMP side: a producer of persistent messages is not
read while the store has no room, asks for an ERROR instead with
fail-if-no-space, gets one after store.fail_after_ms, and is read again once
there is room; non-persistent producers are never held."""

from __future__ import annotations

from gateway.stomp.protocol import StompSettings
from tests.protocol.stomp_harness import Harness

REASON = "the disk is 95% full (store.max_disk_usage 90%)"


class NoRoom:
    """Installed on the harness's store: no room until ``room()``."""

    def __init__(self, store) -> None:
        self.store = store
        store.blocked = REASON
        self.waiters = []
        store.when_room = self.waiters.append

    def room(self) -> None:
        self.store.blocked = None
        waiters, self.waiters = self.waiters, []
        for resume in waiters:
            resume()


def test_a_persistent_producer_waits_for_room_and_a_non_persistent_one_does_not():
    harness = Harness()
    disk = NoRoom(harness.broker.store)
    producer, other = harness.client(), harness.client()
    producer.send("SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "r1"}, b"kept")
    assert producer.transport.producerState == "paused"
    assert [f.headers.get("receipt-id") for f in producer.frames()] == ["r1"]  # the SEND itself was taken
    other.send("SEND", {"destination": "/queue/q"}, b"not persistent")
    assert other.transport.producerState == "producing"
    disk.room()
    assert producer.transport.producerState == "producing"


def test_fail_if_no_space_gets_an_error_naming_the_reason_and_stores_nothing():
    harness = Harness()
    NoRoom(harness.broker.store)
    producer = harness.client()
    producer.send("SEND", {"destination": "/queue/q", "persistent": "true", "fail-if-no-space": "true"}, b"m")
    (error,) = producer.frames()
    assert error.command == "ERROR" and REASON in error.headers["message"]
    assert "q" not in harness.broker.queues or len(harness.broker.queues["q"]) == 0


def test_a_producer_waiting_longer_than_fail_after_ms_gets_an_error():
    harness = Harness(StompSettings(no_space_fail_after_ms=5000))
    NoRoom(harness.broker.store)
    producer = harness.client()
    producer.send("SEND", {"destination": "/queue/q", "persistent": "true"}, b"m")
    harness.clock.advance(4.9)
    assert producer.frames() == [] and not producer.closed
    harness.clock.advance(0.2)
    (error,) = producer.frames()
    assert error.command == "ERROR" and "store.fail_after_ms" in error.headers["message"] and producer.closed
