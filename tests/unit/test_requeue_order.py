"""Requeued messages go back where they were (issue 26): by their enqueue order in the
queue, ahead of everything that came after them, whatever order they come back in;
by priority first in a queue of several priorities. The broker core alone, with
sessions whose sinks record what they are given."""

from __future__ import annotations

import pytest

from gateway.broker.broker import Broker
from gateway.broker.message import Message
from gateway.broker.queue import CLIENT, CLIENT_INDIVIDUAL, Subscription
from gateway.broker.session import Session
from gateway.store.memory import MemoryStore


class Recorder:
    """A session's sink: the bodies it was given, in order."""

    def __init__(self) -> None:
        self.given: list[tuple[Subscription, Message]] = []

    def deliver(self, subscription: Subscription, message: Message) -> None:
        self.given.append((subscription, message))

    def bodies(self) -> list[bytes]:
        return [message.body for _, message in self.given]


def consumer(broker: Broker, name: str, queue: str, prefetch: int, ack_mode: str = CLIENT_INDIVIDUAL,
             selector: str | None = None) -> tuple[Session, Recorder, Subscription]:
    recorder = Recorder()
    session = broker.open_session(recorder, name)
    return session, recorder, session.subscribe("s", "queue", queue, ack_mode, prefetch, selector)


def send(broker: Broker, queue: str, bodies: list[bytes], priority: int = 4) -> None:
    for body in bodies:
        broker.send("queue", queue, {"n": body.decode()}, body, priority=priority)


def numbered(prefix: str, count: int) -> list[bytes]:
    return [b"%s%d" % (prefix.encode(), i) for i in range(count)]


def waiting(broker: Broker, queue: str) -> list[bytes]:
    return [message.body for message in broker.queues[queue]]


def nack(session: Session, sub: Subscription, *bodies: bytes) -> None:
    """NACK (requeue) the deliveries with these bodies, one by one, in this order."""
    by_body = {message.body: message.id for message in sub.inflight.values()}
    for body in bodies:
        session.settle(sub, by_body[body], cumulative=False, accept=False)


@pytest.fixture
def broker() -> Broker:
    return Broker(MemoryStore(), compile_selector=lambda text: (lambda headers: headers.get("n") == text))


def test_messages_nacked_one_by_one_in_any_order_return_in_their_original_order(broker):
    session, _, sub = consumer(broker, "a", "q", prefetch=20)
    send(broker, "q", numbered("m", 20))
    send(broker, "q", numbered("later", 3))  # beyond the prefetch: these wait
    session.writable = False  # what comes back stays in the queue, to be looked at
    nack(session, sub, *numbered("m", 20))  # m0 first: each later one must not jump ahead of it
    assert waiting(broker, "q") == numbered("m", 20) + numbered("later", 3)


def test_a_message_returns_to_its_own_place_between_messages_still_held(broker):
    session, _, sub = consumer(broker, "a", "q", prefetch=10)
    send(broker, "q", numbered("m", 12))
    session.writable = False
    nack(session, sub, b"m2", b"m7", b"m5")
    assert waiting(broker, "q") == [b"m2", b"m5", b"m7", b"m10", b"m11"]


def test_what_sessions_return_one_after_another_lands_in_the_queue_s_order(broker):
    first, _, _ = consumer(broker, "a", "q", prefetch=5)
    second, _, _ = consumer(broker, "b", "q", prefetch=5)
    send(broker, "q", numbered("m", 10))  # taken in turns: a m0 m2 …, b m1 m3 …
    second.close()
    first.close()
    assert waiting(broker, "q") == numbered("m", 10)


def test_a_session_with_two_consumers_of_a_queue_returns_them_whole_to_a_waiting_consumer(broker):
    session = broker.open_session(Recorder(), "a")
    session.subscribe("s1", "queue", "q", CLIENT_INDIVIDUAL, 5)
    session.subscribe("s2", "queue", "q", CLIENT_INDIVIDUAL, 5)
    send(broker, "q", numbered("m", 10))
    _, waiting_consumer, _ = consumer(broker, "b", "q", prefetch=100)
    session.close()
    assert waiting_consumer.bodies() == numbered("m", 10)


def test_a_cumulative_nack_returns_everything_before_later_messages(broker):
    session, recorder, sub = consumer(broker, "a", "q", prefetch=20, ack_mode=CLIENT)
    send(broker, "q", numbered("m", 20) + numbered("later", 2))
    last = recorder.given[-1][1]
    session.settle(sub, last.id, cumulative=True, accept=False)
    # Redelivered to the same consumer, which had room again, in the original order.
    assert recorder.bodies()[20:] == numbered("m", 20)
    assert all(message.redelivered for _, message in recorder.given[20:])


def test_a_priority_queue_serves_by_priority_after_a_requeue_and_by_order_within_one(broker):
    session, _, sub = consumer(broker, "a", "q", prefetch=12)
    for i in range(12):
        broker.send("queue", "q", {}, b"p%d-%d" % ((1, 5, 9)[i % 3], i), priority=(1, 5, 9)[i % 3])
    send(broker, "q", [b"late9"], priority=9)
    session.writable = False
    nack(session, sub, *[message.body for message in list(sub.inflight.values())])
    assert waiting(broker, "q") == [b"p9-2", b"p9-5", b"p9-8", b"p9-11", b"late9",
                                    b"p5-1", b"p5-4", b"p5-7", b"p5-10",
                                    b"p1-0", b"p1-3", b"p1-6", b"p1-9"]


def test_a_message_a_selector_took_from_the_middle_goes_back_to_the_middle(broker):
    send(broker, "q", numbered("m", 6))
    session, _, sub = consumer(broker, "a", "q", prefetch=1, selector="m3")
    assert list(sub.inflight.values())[0].body == b"m3"
    session.writable = False
    nack(session, sub, b"m3")
    assert waiting(broker, "q") == numbered("m", 6)


def test_a_transaction_rolled_back_with_the_session_returns_its_acks_in_place(broker):
    session, _, sub = consumer(broker, "a", "q", prefetch=6)
    send(broker, "q", numbered("m", 8))
    session.begin("t")
    by_body = {message.body: message.id for message in sub.inflight.values()}
    for body in (b"m4", b"m1", b"m3"):
        session.settle(sub, by_body[body], cumulative=False, transaction="t")
    session.close()
    assert waiting(broker, "q") == numbered("m", 8)


def test_requeues_still_count_delivery_attempts_towards_the_dead_letter_queue():
    broker = Broker(MemoryStore(), max_delivery_attempts=2)
    session, recorder, sub = consumer(broker, "a", "q", prefetch=3)
    send(broker, "q", numbered("m", 3))
    nack(session, sub, b"m1")  # back at once to the same consumer: its second delivery
    assert recorder.bodies() == [b"m0", b"m1", b"m2", b"m1"]
    session.writable = False
    nack(session, sub, b"m2", b"m1", b"m0")  # m1 has had its two attempts
    assert waiting(broker, "q") == [b"m0", b"m2"]
    assert [message.headers["original-message-id"] for message in broker.queues["DLQ"]] == [
        message.id for _, message in recorder.given[1:2]]


def test_messages_put_back_by_the_mesh_keep_their_places_too(broker):
    """What a busy peer refused (mesh.forwarding's put_back) and a requeue both go by order."""
    session, _, sub = consumer(broker, "a", "q", prefetch=4)
    send(broker, "q", numbered("m", 6))
    queue = broker.queues["q"]
    session.writable = False
    held = list(sub.inflight.values())
    sub.inflight.clear()
    queue.put_back([held[3], held[1]])
    queue.put_back([held[2], held[0]])
    assert waiting(broker, "q") == numbered("m", 6)
