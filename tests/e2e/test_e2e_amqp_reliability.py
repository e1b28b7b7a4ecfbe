"""AMQP when it matters: no confirmed message lost across kill -9, logins and the
authorization map, flow control (connection.blocked), heart-beats, fair dispatch
with prefetch, priorities, and pika's asynchronous SelectConnection and kombu."""

from __future__ import annotations

import threading
import time

import pika
import pika.exceptions
import pytest
from amqp_support import AMQP_ON, drain
from e2e_support import security_config, unique
from kombu import Connection, Exchange, Queue


def test_no_confirmed_message_is_lost_when_the_node_is_killed(broker_factory, amqp):
    node = broker_factory(sets=[AMQP_ON])
    queue = unique("confirmed")
    confirmed: list[int] = []
    stop = threading.Event()

    def publish() -> None:
        channel = amqp(node).channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        i = 0
        try:
            while not stop.is_set():
                channel.basic_publish("", queue, b"%d" % i, pika.BasicProperties(delivery_mode=2))
                confirmed.append(i)  # basic_publish returned: the broker confirmed it
                i += 1
        except (pika.exceptions.AMQPError, OSError):
            pass  # the node died under us

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    deadline = time.monotonic() + 30
    while len(confirmed) < 300:
        assert time.monotonic() < deadline and publisher.is_alive(), f"only {len(confirmed)} confirms"
        time.sleep(0.01)
    node.kill9()
    stop.set()
    publisher.join(10)
    assert confirmed
    node.restart(graceful=False)
    channel = amqp(node).channel()
    count = channel.queue_declare(queue, passive=True).method.message_count
    assert count >= len(confirmed)  # unconfirmed ones may be there too
    bodies = {int(body) for _, _, body in drain(channel, queue, count)}
    assert set(confirmed) <= bodies


USERS = {"alice": ["apps"], "bob": ["readers"]}
RULES = [{"destination": "/queue/jobs.>", "read": ["apps", "readers"], "write": ["apps"]}]


def test_logins_and_the_authorization_map(broker_factory, amqp, hashes):
    node = broker_factory(config=security_config(hashes, USERS, RULES), sets=[AMQP_ON])
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        amqp(node, "alice", "wrong")
    alice = amqp(node, "alice", "alice-secret").channel()
    alice.queue_declare("jobs.eu")
    alice.basic_publish("", "jobs.eu", b"job")
    bob = amqp(node, "bob", "bob-secret").channel()
    assert bob.basic_get("jobs.eu", auto_ack=True)[2] == b"job"  # bob may read
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        bob.basic_publish("", "jobs.eu", b"forged")
        bob.queue_declare("jobs.eu", passive=True)  # a round trip: the refusal shows
    assert refused.value.reply_code == 403 and "write on /queue/jobs.eu" in refused.value.reply_text
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        amqp(node, "alice", "alice-secret").channel().queue_declare("payroll")
    assert refused.value.reply_code == 403


def test_a_publisher_past_the_memory_limit_hears_blocked_then_unblocked(broker_factory, amqp):
    node = broker_factory(sets=[AMQP_ON, "broker.memory_limit=2MiB"])
    queue = unique("flood")
    events: list[str] = []
    publisher = amqp(node)
    publisher.add_on_connection_blocked_callback(lambda *a: events.append("blocked"))
    publisher.add_on_connection_unblocked_callback(lambda *a: events.append("unblocked"))
    channel = publisher.channel()
    channel.queue_declare(queue)
    body = b"x" * 65536
    for _ in range(64):  # 4 MiB: past the limit
        channel.basic_publish("", queue, body)
    publisher.process_data_events(time_limit=1)
    assert events == ["blocked"]
    consumer = amqp(node).channel()
    drained = 0
    deadline = time.monotonic() + 30
    while drained < 64:  # every publish gets in once consumers make room: none is lost
        method, _, _ = consumer.basic_get(queue, auto_ack=True)
        drained += method is not None
        publisher.process_data_events(time_limit=0.01)
        assert time.monotonic() < deadline, (drained, events)
    publisher.process_data_events(time_limit=0.5)
    assert events[:2] == ["blocked", "unblocked"] and events[-1] == "unblocked"
    assert all(a != b for a, b in zip(events, events[1:], strict=False))  # each blocked is followed by unblocked


def test_a_client_that_goes_silent_is_disconnected_after_two_heartbeats(broker_factory, amqp):
    node = broker_factory(sets=[AMQP_ON])
    connection = amqp(node, heartbeat=1)
    channel = connection.channel()
    time.sleep(3.5)  # pika sends no heart-beats while it is not asked to do anything
    with pytest.raises((pika.exceptions.AMQPConnectionError, pika.exceptions.StreamLostError,
                        pika.exceptions.ChannelWrongStateError)):
        channel.queue_declare(unique("after"))
        connection.process_data_events(time_limit=1)
    assert "no heartbeat from the client" in node.stderr()


def test_prefetch_one_spreads_work_by_what_each_consumer_can_take(broker_factory, amqp):
    node = broker_factory(sets=[AMQP_ON])
    queue = unique("fair")
    producer = amqp(node).channel()
    producer.queue_declare(queue)
    for i in range(40):
        producer.basic_publish("", queue, b"%d" % i)
    slow_connection, fast_connection = amqp(node), amqp(node)
    slow, fast = slow_connection.channel(), fast_connection.channel()
    for channel in (slow, fast):
        channel.basic_qos(prefetch_count=1)
    slow_got, fast_got = [], []
    slow.basic_consume(queue, lambda ch, method, props, body: slow_got.append(method.delivery_tag))
    fast.basic_consume(queue, lambda ch, method, props, body: (fast_got.append(body),
                                                               ch.basic_ack(method.delivery_tag)))
    deadline = time.monotonic() + 20
    while len(fast_got) + len(slow_got) < 40 and time.monotonic() < deadline:
        fast_connection.process_data_events(time_limit=0.05)
        slow_connection.process_data_events(time_limit=0.01)
    assert len(slow_got) == 1 and len(fast_got) == 39  # the slow one never acked its first


def test_higher_priorities_are_delivered_first(broker_factory, amqp):
    node = broker_factory(sets=[AMQP_ON])
    channel = amqp(node).channel()
    queue = unique("prio")
    channel.queue_declare(queue, arguments={"x-max-priority": 9})
    for priority in (1, 9, 5, 0):
        channel.basic_publish("", queue, b"p%d" % priority, pika.BasicProperties(priority=priority))
    assert [channel.basic_get(queue, auto_ack=True)[2] for _ in range(4)] == [b"p9", b"p5", b"p1", b"p0"]


def test_pika_select_connection_and_kombu(broker_factory):
    node = broker_factory(sets=[AMQP_ON])
    from amqp_support import amqp_port

    port = amqp_port(node)
    queue = unique("async")
    received: list[bytes] = []

    def on_open(connection) -> None:
        connection.channel(on_open_callback=on_channel)

    def on_channel(channel) -> None:
        channel.queue_declare(queue, callback=lambda _: declared(channel))

    def declared(channel) -> None:
        channel.basic_consume(queue, lambda ch, method, props, body: (received.append(body),
                                                                      ch.basic_ack(method.delivery_tag),
                                                                      ch.connection.close()))
        channel.basic_publish("", queue, b"async hello")

    connection = pika.SelectConnection(pika.ConnectionParameters("127.0.0.1", port), on_open_callback=on_open,
                                       on_open_error_callback=lambda c, e: c.ioloop.stop(),
                                       on_close_callback=lambda c, e: c.ioloop.stop())
    timer = threading.Timer(15, lambda: connection.ioloop.add_callback_threadsafe(connection.ioloop.stop))
    timer.start()
    connection.ioloop.start()
    timer.cancel()
    assert received == [b"async hello"]

    with Connection(f"amqp://guest:guest@127.0.0.1:{port}//") as kombu_connection:
        media = Exchange(unique("media"), "direct", durable=True)
        video = Queue(unique("video"), exchange=media, routing_key="video")
        with kombu_connection.Producer() as producer:
            producer.publish({"clip": "a.mp4", "n": 1}, exchange=media, routing_key="video", declare=[video],
                             serializer="json")
        got = []
        with kombu_connection.Consumer(video, callbacks=[lambda body, message: (got.append(body), message.ack())]):
            kombu_connection.drain_events(timeout=10)
        assert got == [{"clip": "a.mp4", "n": 1}]


def test_connections_past_max_connections_are_refused_and_the_others_go_on(broker_factory, amqp):
    node = broker_factory(sets=[AMQP_ON, "amqp.max_connections=1"])
    first = amqp(node).channel()
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        amqp(node)
    queue = unique("still")
    first.queue_declare(queue)
    first.basic_publish("", queue, b"fine")
    assert first.basic_get(queue, auto_ack=True)[2] == b"fine"
    assert "amqp.max_connections (1) reached" in node.stderr()
