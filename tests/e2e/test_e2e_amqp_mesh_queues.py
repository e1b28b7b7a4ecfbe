"""A queue of the mesh is one queue for AMQP clients on any node (issue 26): a passive
queue.declare finds it wherever it is and counts its messages and consumers on every
node, basic.get pulls a message from the node that holds it, and queue.purge empties
it everywhere. Real nodes over real links, pika clients, STOMP senders."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pika
import pytest
from amqp_support import AMQP_ON
from e2e_support import unique
from mesh_support import mesh_fixture, send_many, wait_until  # noqa: F401  (the fixture)

RACE_MESSAGES = int(os.environ.get("MESHGATE_GET_RACE_MESSAGES", "10000"))


def passive_count(connection, queue: str) -> tuple[int, int] | None:
    """(message_count, consumer_count) of a passive declare; None for its 404."""
    channel = connection.channel()
    try:
        ok = channel.queue_declare(queue, passive=True).method
    except pika.exceptions.ChannelClosedByBroker as closed:
        assert closed.reply_code == 404, closed
        return None
    channel.close()
    return ok.message_count, ok.consumer_count


def test_a_queue_on_another_node_is_declared_passively_and_got_on_this_one(mesh, amqp):
    a, b, c = mesh(3, sets=[AMQP_ON])
    queue = unique("bar-back")
    send_many(b.client(), "/queue/" + queue, [f"m{i}" for i in range(5)])
    on_a = amqp(a.proc)
    wait_until(lambda: passive_count(on_a, queue) == (5, 0), "a to count b's five messages", timeout=15,
               interval=0.2)
    assert passive_count(amqp(c.proc), unique("nowhere")) is None  # a queue no node has is still a 404
    channel = on_a.channel()
    got = []
    for _ in range(5):
        method, _, body = channel.basic_get(queue)
        assert method is not None, f"get-empty after {got}, though b held five"
        assert not method.redelivered
        channel.basic_ack(method.delivery_tag)
        got.append(body.decode())
    assert sorted(got) == [f"m{i}" for i in range(5)]
    assert channel.basic_get(queue) == (None, None, None)
    assert passive_count(on_a, queue) == (0, 0)


def test_consumers_on_other_nodes_count_in_a_passive_declare(mesh, amqp):
    a, b, c = mesh(3, sets=[AMQP_ON])
    queue = unique("counted")
    for node in (b, c):
        consumer = amqp(node.proc).channel()
        consumer.queue_declare(queue)
        consumer.basic_consume(queue, lambda *args: None)
    wait_until(lambda: passive_count(amqp(a.proc), queue) == (0, 2), "a to count the consumers on b and c",
               timeout=15, interval=0.2)


def test_a_purge_on_one_node_empties_the_queue_on_every_node(mesh, amqp):
    a, b, c = mesh(3, sets=[AMQP_ON])
    queue = unique("purged")
    send_many(b.client(), "/queue/" + queue, ["on b"] * 3)
    send_many(c.client(), "/queue/" + queue, ["on c"] * 4)
    on_a = amqp(a.proc)
    wait_until(lambda: passive_count(on_a, queue) == (7, 0), "a to count the seven", timeout=15, interval=0.2)
    channel = on_a.channel()
    assert channel.queue_purge(queue).method.message_count == 7
    assert passive_count(on_a, queue) == (0, 0)
    assert passive_count(amqp(b.proc), queue) == (0, 0)


@pytest.mark.slow
def test_gets_racing_on_four_nodes_take_every_message_exactly_once(mesh, amqp):
    nodes = mesh(4, sets=[AMQP_ON])
    queue = unique("raced")
    publisher = amqp(nodes[0].proc).channel()
    publisher.queue_declare(queue)
    publisher.confirm_delivery()
    for i in range(RACE_MESSAGES):
        publisher.basic_publish("", queue, b"%d" % i)
    got: list[list[bytes]] = [[] for _ in nodes]
    errors: list[BaseException] = []
    done = threading.Event()

    def drain(index: int) -> None:
        try:
            channel = amqp(nodes[index].proc).channel()
            while not done.is_set():
                method, _, body = channel.basic_get(queue, auto_ack=True)
                if method is not None:
                    got[index].append(body)
                    if sum(map(len, got)) >= RACE_MESSAGES:
                        done.set()
        except BaseException as error:  # shown by the main thread
            errors.append(error)
            done.set()

    threads = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(len(nodes))]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    done.wait(timeout=240)
    done.set()
    for thread in threads:
        thread.join(timeout=10)
    assert not errors, errors
    counts = Counter(body for bodies in got for body in bodies)
    assert not [body for body, n in counts.items() if n > 1], "a message was got twice"
    assert len(counts) == RACE_MESSAGES, (f"{RACE_MESSAGES - len(counts)} never got in "
                                          f"{time.monotonic() - started:.0f} s; per node {list(map(len, got))}")
    assert sum(1 for bodies in got if bodies) >= 2, f"only one node got any: {list(map(len, got))}"


def drain_everywhere(channels, queue: str, want: int, timeout: float = 30) -> list[tuple[str, bool]]:
    """(body, redelivered) of every message got, with acks, from ``channels`` in turn
    until ``want`` distinct bodies came and none is left anywhere."""
    got: list[tuple[str, bool]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        empty = 0
        for channel in channels:
            method, _, body = channel.basic_get(queue)
            if method is None:
                empty += 1
                continue
            channel.basic_ack(method.delivery_tag)
            got.append((body.decode(), method.redelivered))
        if empty == len(channels) and len({body for body, _ in got}) >= want:
            return got
    return got


@pytest.mark.parametrize("killed", ["asker", "holder"])
def test_a_node_killed_after_a_pull_loses_nothing(mesh, amqp, killed):
    a, b = mesh(2, sets=[AMQP_ON])
    queue = unique("pulled")
    sent = [f"m{i}" for i in range(200)]
    send_many(b.client(), "/queue/" + queue, sent)
    channel = amqp(a.proc).channel()
    wait_until(lambda: passive_count(amqp(a.proc), queue) == (200, 0), "a to count b's messages", timeout=15,
               interval=0.2)
    method, _, first = channel.basic_get(queue)  # pulls half of b's to a, and holds one unacked
    assert method is not None
    if killed == "holder":  # taken for good: of the rest, none may be lost
        channel.basic_ack(method.delivery_tag)
        sent.remove(first.decode())
    (a if killed == "asker" else b).kill9()
    (a if killed == "asker" else b).restart()
    a.wait_linked(b)
    got = drain_everywhere([amqp(a.proc).channel(), amqp(b.proc).channel()], queue, len(sent))
    counts = Counter(body for body, _ in got)
    assert sorted(counts) == sorted(sent), f"lost: {sorted(set(sent) - set(counts))}"
    fresh = Counter(body for body, redelivered in got if not redelivered)
    assert not [body for body, n in fresh.items() if n > 1], "a duplicate not marked redelivered"
    if killed == "asker":  # the unacked get came back, marked redelivered
        assert (first.decode(), True) in got


def test_a_delete_on_one_node_cancels_consumers_and_drops_messages_on_every_node(mesh, amqp):
    a, b, c = mesh(3, sets=[AMQP_ON])
    consumed, waiting = unique("consumed"), unique("waiting")
    to_b = amqp(b.proc)
    on_b = to_b.channel()
    on_b.queue_declare(consumed)
    cancelled = []
    on_b.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = on_b.basic_consume(consumed, lambda *args: None)
    send_many(c.client(), "/queue/" + waiting, ["on c"] * 3)
    on_a = amqp(a.proc)
    wait_until(lambda: passive_count(on_a, consumed) == (0, 1) and passive_count(on_a, waiting) == (3, 0),
               "a to count b's consumer and c's messages", timeout=15, interval=0.2)
    for queue, flag, words in ((consumed, "if_unused", "1 consumer"), (waiting, "if_empty", "3 message")):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            on_a.channel().queue_delete(queue, **{flag: True})
        assert refused.value.reply_code == 406 and words in refused.value.reply_text, refused.value
    assert on_a.channel().queue_delete(consumed).method.message_count == 0
    wait_until(lambda: to_b.process_data_events(0.1) or cancelled == [tag], "b's consumer to hear basic.cancel",
               timeout=10)
    assert on_a.channel().queue_delete(waiting).method.message_count == 3
    for queue in (consumed, waiting):  # no node keeps the queue: not even one made to follow b's consumer
        wait_until(lambda queue=queue: passive_count(on_a, queue) is None, f"{queue} to be gone from every node",
                   timeout=10, interval=0.2)
        assert passive_count(amqp(c.proc), queue) is None


def test_an_exclusive_queue_goes_from_every_node_with_its_connection(mesh, amqp):
    a, b = mesh(2, sets=[AMQP_ON])
    owner = amqp(a.proc)
    queue = owner.channel().queue_declare("", exclusive=True).method.queue
    on_b = amqp(b.proc)
    wait_until(lambda: passive_count(on_b, queue) == (0, 0), "b to learn the queue's definition", timeout=15,
               interval=0.2)
    send_many(b.client(), "/queue/" + queue, ["waits on b"] * 3)
    wait_until(lambda: passive_count(on_b, queue) == (3, 0), "b to count its three", timeout=15, interval=0.2)
    owner.close()
    wait_until(lambda: passive_count(on_b, queue) is None, "the queue to go from b too", timeout=15, interval=0.2)


def test_an_auto_delete_queue_stays_while_another_node_consumes_it(mesh, amqp):
    a, b = mesh(2, sets=[AMQP_ON])
    declarer = amqp(a.proc).channel()
    queue = unique("auto")
    declarer.queue_declare(queue, auto_delete=True)
    tag = declarer.basic_consume(queue, lambda *args: None)
    consumer_on_b = amqp(b.proc).channel()
    wait_until(lambda: passive_count(amqp(b.proc), queue) is not None, "b to learn the queue", timeout=15,
               interval=0.2)
    got = []
    consumer_on_b.basic_consume(queue, lambda channel, method, properties, body: got.append(body))
    on_a = amqp(a.proc)
    wait_until(lambda: passive_count(on_a, queue) == (0, 2), "a to count both consumers", timeout=15, interval=0.2)
    declarer.basic_cancel(tag)
    assert passive_count(on_a, queue) == (0, 1)
    declarer.basic_publish("", queue, b"still routed")
    wait_until(lambda: consumer_on_b.connection.process_data_events(0.1) or got, "b's consumer to get it",
               timeout=10)


def test_kombu_and_py_amqp_get_and_count_a_queue_held_on_another_node(mesh):
    import amqp as py_amqp
    from amqp_support import amqp_port, amqp_url
    from kombu import Connection

    a, b, c = mesh(3, sets=[AMQP_ON])
    queue = unique("clients")
    send_many(c.client(), "/queue/" + queue, [f"m{i}" for i in range(4)])
    with py_amqp.Connection(f"127.0.0.1:{amqp_port(a.proc)}") as connection:
        channel = connection.channel()
        wait_until(lambda: channel.queue_declare(queue, passive=True)[1] == 4, "py-amqp on a to count c's four",
                   timeout=15, interval=0.2)
        got = channel.basic_get(queue, no_ack=True)
        assert got is not None and got.body.startswith(b"m")
    with Connection(amqp_url(b.proc)) as connection:
        simple = connection.SimpleQueue(queue)  # declares it (as kombu does), then basic.get
        bodies = []
        for _ in range(3):
            message = simple.get(block=True, timeout=10)
            bodies.append(message.body)
            message.ack()
        simple.close()
    assert sorted([got.body.decode(), *(body if isinstance(body, str) else body.decode() for body in bodies)]) == [
        f"m{i}" for i in range(4)]


def test_flow_control_blocks_a_node_s_own_publishers_and_gets_elsewhere_release_it(mesh, amqp):
    a, b = mesh(2, sets=[AMQP_ON, "broker.memory_limit=4MiB"])
    queue = unique("flood")
    events: list[str] = []
    flooder = amqp(b.proc)
    flooder.add_on_connection_blocked_callback(lambda *args: events.append("blocked"))
    flooder.add_on_connection_unblocked_callback(lambda *args: events.append("unblocked"))
    channel = flooder.channel()
    channel.queue_declare(queue)
    for _ in range(80):  # 5 MiB on b: past its limit
        channel.basic_publish("", queue, b"x" * 65536)
    flooder.process_data_events(time_limit=1)
    assert events == ["blocked"]
    on_a = amqp(a.proc).channel()  # a has room: its publishers go on
    on_a.confirm_delivery()
    for i in range(10):
        on_a.basic_publish("", queue, b"from a %d" % i)
    drained = 0
    deadline = time.monotonic() + 60
    while drained < 90:  # gets on a pull b's messages over, and b has room again
        method, _, _ = on_a.basic_get(queue, auto_ack=True)
        drained += method is not None
        flooder.process_data_events(time_limit=0.01)
        assert time.monotonic() < deadline, (drained, events)
    flooder.process_data_events(time_limit=0.5)
    assert events[:2] == ["blocked", "unblocked"], events
