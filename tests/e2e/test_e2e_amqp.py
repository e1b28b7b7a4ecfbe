"""AMQP 0-9-1 with real clients against a real node: pika publishes and consumes
through every exchange type with acks, nacks, rejects, confirms, transactions,
TTL and dead-letter exchanges; a channel-wide basic.qos (global) shared by a
channel's consumers; STOMP and AMQP clients share queues and topics; errors close
the channel or the connection with the right reply code and touch nothing else;
the management model lists a connection's channels."""

from __future__ import annotations

import socket
import struct
import time
from collections import Counter

import pika
import pika.exceptions
import pytest
from amqp_support import (
    amqp_broker,
    amqp_port,
    await_deliveries,
    channels_holding_unacked,
    declare_dead_lettered,
    drain,
    expect_no_more,
    publish_numbered,
)
from e2e_support import HOST, manage_result, unique

from model.mesh import ChannelSummary
from model.requests import CloseConnection, Connections


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with amqp_broker(tmp_path_factory, "amqp") as broker:
        yield broker


def test_publish_consume_ack_with_properties_and_typed_headers(node, amqp):
    channel = amqp(node).channel()
    queue = unique("orders")
    channel.queue_declare(queue, durable=True)
    sent = pika.BasicProperties(content_type="application/json", delivery_mode=2, priority=7, correlation_id="c-1",
                                reply_to="replies", message_id="m-1", type="order", app_id="shop",
                                headers={"retries": 0, "eta": None, "limits": [None, 30], "ok": True, "who": "x"})
    for i in range(20):
        channel.basic_publish("", queue, b"order %d" % i, sent)
    got = drain(channel, queue, 20)
    assert [body for _, _, body in got] == [b"order %d" % i for i in range(20)]
    method, properties, _ = got[0]
    assert method.exchange == "" and method.routing_key == queue and not method.redelivered
    assert properties.headers == sent.headers
    for field in ("content_type", "delivery_mode", "priority", "correlation_id", "reply_to", "message_id", "type",
                  "app_id"):
        assert getattr(properties, field) == getattr(sent, field), field
    assert channel.queue_declare(queue, passive=True).method.message_count == 0


def test_nack_requeues_marked_redelivered_and_reject_dead_letters_through_the_dlx(node, amqp):
    channel = amqp(node).channel()
    queue, dead = unique("work"), unique("dead")
    channel.exchange_declare(dead, "fanout")
    channel.queue_declare(dead)
    channel.queue_bind(dead, dead)
    channel.queue_declare(queue, arguments={"x-dead-letter-exchange": dead})
    channel.basic_publish("", queue, b"twice")
    channel.basic_publish("", queue, b"poison")
    method, _, body = channel.basic_get(queue)
    assert body == b"twice" and not method.redelivered
    channel.basic_nack(method.delivery_tag, requeue=True)  # back at the head, as in RabbitMQ
    method, _, body = channel.basic_get(queue)
    assert body == b"twice" and method.redelivered
    channel.basic_ack(method.delivery_tag)
    method, _, body = channel.basic_get(queue)
    assert body == b"poison"
    channel.basic_reject(method.delivery_tag, requeue=False)
    method, properties, body = channel.basic_get(dead, auto_ack=True)
    assert body == b"poison" and properties.headers["dead-letter-reason"] == "rejected"
    assert channel.basic_get(queue) == (None, None, None)


def test_queue_ttl_expires_into_the_dead_letter_exchange(node, amqp):
    channel = amqp(node).channel()
    queue, expired = unique("short"), unique("expired")
    declare_dead_lettered(channel, queue, expired, {"x-message-ttl": 200})
    channel.basic_publish("", queue, b"stale")
    channel.basic_publish("", queue, b"per message", pika.BasicProperties(expiration="60000"))
    deadline = time.monotonic() + 10
    while channel.queue_declare(expired, passive=True).method.message_count < 1:
        assert time.monotonic() < deadline, "the expired message never reached the dead-letter exchange"
        time.sleep(0.1)
    assert channel.basic_get(expired, auto_ack=True)[2] == b"stale"
    assert channel.basic_get(queue, auto_ack=True)[2] == b"per message"


def test_every_exchange_type_routes_and_mandatory_unroutable_comes_back(node, amqp):
    channel = amqp(node).channel()
    channel.confirm_delivery()
    names = {kind: unique(kind) for kind in ("direct", "fanout", "topic", "headers")}
    for kind, name in names.items():
        channel.exchange_declare(name, kind)
    queues = {q: channel.queue_declare("", exclusive=True).method.queue for q in ("pdf", "all", "eu", "match")}
    channel.queue_bind(queues["pdf"], names["direct"], "pdf")
    channel.queue_bind(queues["all"], names["fanout"])
    channel.queue_bind(queues["eu"], names["topic"], "eu.#")
    channel.queue_bind(queues["match"], names["headers"], arguments={"x-match": "all", "format": "pdf"})
    channel.exchange_bind(names["fanout"], names["topic"], "eu.#")  # exchange to exchange
    channel.basic_publish(names["direct"], "pdf", b"direct")
    channel.basic_publish(names["topic"], "eu.orders.new", b"topic")
    channel.basic_publish(names["headers"], "", b"headers", pika.BasicProperties(headers={"format": "pdf"}))
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish(names["direct"], "gif", b"nowhere", mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", unique("no-such-queue"), b"nowhere", mandatory=True)

    def bodies(queue: str) -> list[bytes]:
        found = []
        while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
            found.append(got[2])
        return found

    assert bodies(queues["pdf"]) == [b"direct"]
    assert bodies(queues["eu"]) == [b"topic"]
    assert bodies(queues["all"]) == [b"topic"]  # through the topic exchange's binding to the fanout
    assert bodies(queues["match"]) == [b"headers"]


def test_confirms_come_once_persistent_messages_are_durable(node, amqp):
    channel = amqp(node).channel()
    queue = unique("confirmed")
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    publish_numbered(channel, queue, 500, pika.BasicProperties(delivery_mode=2))  # raises on a nack
    assert channel.queue_declare(queue, passive=True).method.message_count == 500


def test_transactions_publish_on_commit_only(node, amqp):
    channel = amqp(node).channel()
    queue = unique("tx")
    channel.queue_declare(queue)
    channel.tx_select()
    channel.basic_publish("", queue, b"rolled back")
    channel.tx_rollback()
    channel.basic_publish("", queue, b"committed")
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    channel.tx_commit()
    assert channel.basic_get(queue, auto_ack=True)[2] == b"committed"
    assert channel.basic_get(queue) == (None, None, None)


def test_purge_and_delete_say_how_many_and_delete_cancels_consumers(node, amqp):
    connection = amqp(node)
    channel = connection.channel()
    queue = unique("counted")
    channel.queue_declare(queue)
    for _ in range(5):
        channel.basic_publish("", queue, b"x")
    assert channel.queue_purge(queue).method.message_count == 5
    channel.basic_publish("", queue, b"taken")
    channel.basic_publish("", queue, b"left")
    cancelled = []
    watcher = connection.channel()
    watcher.basic_qos(prefetch_count=1)
    watcher.add_on_cancel_callback(cancelled.append)
    watcher.basic_consume(queue, lambda *a: None)
    connection.process_data_events(time_limit=0.5)
    other = connection.channel()
    assert other.queue_delete(queue).method.message_count == 1
    connection.process_data_events(time_limit=1)
    assert cancelled, "the consumer of a deleted queue hears basic.cancel"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(queue, passive=True)
    assert closed.value.reply_code == 404


def test_an_exclusive_queue_is_locked_to_its_connection_and_goes_with_it(node, amqp):
    owner = amqp(node)
    queue = owner.channel().queue_declare("", exclusive=True).method.queue
    assert queue.startswith("amq.gen-")
    other = amqp(node).channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as locked:
        other.basic_consume(queue, lambda *a: None)
    assert locked.value.reply_code == 405
    owner.close()
    probe = amqp(node).channel()
    deadline = time.monotonic() + 5
    while True:
        try:
            probe.queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker as gone:
            assert gone.reply_code == 404
            break
        assert time.monotonic() < deadline, "the exclusive queue outlived its connection"
        time.sleep(0.1)
        probe = amqp(node).channel()


def test_channel_errors_close_the_channel_with_their_code_and_the_connection_goes_on(node, amqp):
    connection = amqp(node)
    queue = unique("args")
    connection.channel().queue_declare(queue, arguments={"x-message-ttl": 1000})
    for action, code in [
        (lambda ch: ch.basic_consume(unique("missing"), lambda *a: None), 404),
        (lambda ch: ch.queue_declare(queue, arguments={"x-message-ttl": 2000}), 406),
        (lambda ch: ch.basic_publish(unique("no-exchange"), "k", b"x"), 404),
        (lambda ch: ch.exchange_declare("amq.mine", "direct"), 403),
        (lambda ch: ch.queue_declare(unique("bad"), arguments={"x-message-ttl": "soon"}), 406),
        (lambda ch: ch.basic_ack(999), 406),
    ]:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            action(channel)
            channel.queue_declare(queue, passive=True, arguments={})  # a round trip: errors after a publish show
        assert closed.value.reply_code == code, closed.value
    assert connection.is_open
    assert connection.channel().queue_declare(queue, passive=True).method.queue == queue


def _raw_handshake(node) -> socket.socket:
    sock = socket.create_connection((HOST, amqp_port(node)), timeout=10)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    return sock


def _read_frames(sock: socket.socket, until: bytes, limit: float = 10) -> bytes:
    data = b""
    deadline = time.monotonic() + limit
    while until not in data and time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_malformed_frame_closes_only_its_connection_with_501(node, amqp):
    bystander = amqp(node).channel()
    queue = unique("bystander")
    bystander.queue_declare(queue)
    sock = _raw_handshake(node)
    _read_frames(sock, b"PLAIN")  # connection.start
    sock.sendall(b"\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x0b\x00")  # no 0xCE frame end
    data = _read_frames(sock, b"\xce", limit=5)
    close = data[data.index(b"\x00\x0a\x00\x32"):]  # connection.close: class 10, method 50
    assert struct.unpack(">H", close[4:6])[0] == 501 and b"0xCE" in close
    sock.close()
    bystander.basic_publish("", queue, b"still fine")
    assert bystander.basic_get(queue, auto_ack=True)[2] == b"still fine"


def test_a_wrong_protocol_header_gets_ours_back(node):
    sock = socket.create_connection((HOST, amqp_port(node)), timeout=10)
    sock.sendall(b"AMQP\x01\x01\x00\x0a")
    assert _read_frames(sock, b"\x09\x01") == b"AMQP\x00\x00\x09\x01"
    assert sock.recv(100) == b""  # and closed
    sock.close()


def test_stomp_and_amqp_clients_share_queues_and_topics(node, amqp, connect):
    channel = amqp(node).channel()
    queue = unique("shared")
    channel.queue_declare(queue)
    stomp = connect(node)
    stomp.send("/queue/" + queue, "from stomp", headers={"correlation-id": "c-9", "color": "red"}, receipt=True)
    _, properties, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"from stomp" and properties.correlation_id == "c-9" and properties.headers["color"] == "red"
    stomp.subscribe("/queue/" + queue)
    channel.basic_publish("", queue, b"from amqp", pika.BasicProperties(content_type="text/plain",
                                                                          headers={"n": 3}))
    (message,) = stomp.listener.wait_for(1)
    assert message.body == "from amqp" and message.headers["content-type"] == "text/plain"
    assert message.headers["n"] == "3"
    # Topics: amq.topic is STOMP's /topic/, both ways.
    news = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(news, "amq.topic", "news.#")
    stomp.subscribe("/topic/news.eu")
    stomp.send("/topic/news.eu", "stomp news", receipt=True)
    channel.basic_publish("amq.topic", "news.eu", b"amqp news")
    stomp.listener.wait_until(lambda: len(stomp.listener.messages) >= 3, "both news on STOMP")
    assert sorted(m.body for m in stomp.listener.messages[1:]) == ["amqp news", "stomp news"]
    got = sorted(channel.basic_get(news, auto_ack=True)[2] for _ in range(2))
    assert got == [b"amqp news", b"stomp news"]


def test_deliveries_can_be_acked_or_nacked_after_their_consumer_is_cancelled(node, amqp):
    connection = amqp(node)
    channel = connection.channel()
    queue = unique("cancelled")
    channel.queue_declare(queue)
    for body in (b"one", b"two"):
        channel.basic_publish("", queue, body)
    held = []
    tag = channel.basic_consume(queue, lambda ch, method, props, body: held.append((method.delivery_tag, body)))
    while len(held) < 2:
        connection.process_data_events(time_limit=0.1)
    channel.basic_cancel(tag)
    channel.basic_ack(held[0][0])
    channel.basic_nack(held[1][0], requeue=True)
    assert channel.is_open
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"two" and method.redelivered
    assert channel.basic_get(queue) == (None, None, None)


def test_a_max_length_queue_drops_its_oldest_into_the_dead_letter_exchange(node, amqp):
    channel = amqp(node).channel()
    queue, dropped = unique("bounded"), unique("dropped")
    declare_dead_lettered(channel, queue, dropped, {"x-max-length": 3})
    publish_numbered(channel, queue, 5)
    assert [channel.basic_get(queue, auto_ack=True)[2] for _ in range(3)] == [b"2", b"3", b"4"]
    method, properties, body = channel.basic_get(dropped, auto_ack=True)
    assert body == b"0" and properties.headers["dead-letter-reason"] == "maxlen"
    assert channel.basic_get(dropped, auto_ack=True)[2] == b"1"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare(unique("reject"), arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    assert refused.value.reply_code == 406


def test_an_amqp_connection_is_one_connection_in_the_model_and_an_admin_can_close_it(node, amqp):
    connection = amqp(node)
    channels = [connection.channel() for _ in range(3)]
    queue = unique("listed")
    channels[0].queue_declare(queue)
    channels[1].basic_consume(queue, lambda *a: None)
    rows = [c for c in manage_result(node.port, Connections()) if c.protocol == "amqp"]
    assert len(rows) == 1 and rows[0].subscriptions == 1 and rows[0].version == "0-9-1"
    manage_result(node.port, CloseConnection(connection=rows[0].id, reason="maintenance"))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.process_data_events(time_limit=5)
        channels[2].queue_declare(queue, passive=True)
    assert closed.value.reply_code == 320 and "maintenance" in closed.value.reply_text


def test_an_exclusive_consumer_keeps_a_queue_to_itself(node, amqp):
    connection = amqp(node)
    channel = connection.channel()
    queue = unique("solo")
    channel.queue_declare(queue)
    tag = channel.basic_consume(queue, lambda *a: None, exclusive=True)
    other = amqp(node).channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        other.basic_consume(queue, lambda *a: None)
    assert refused.value.reply_code == 403 and "exclusive" in refused.value.reply_text
    channel.basic_cancel(tag)
    assert amqp(node).channel().basic_consume(queue, lambda *a: None)  # free again
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        amqp(node).channel().basic_consume(queue, lambda *a: None, exclusive=True)
    assert refused.value.reply_code == 403


# -- basic.qos with global: one limit shared by a channel's consumers (RabbitMQ's meaning) ------------


def _consumer(got: list):
    """A consumer callback that keeps (consumer tag, delivery tag) and acks nothing."""
    return lambda channel, method, properties, body: got.append((method.consumer_tag, method.delivery_tag))


def _waiting(channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).method.message_count


def _consuming_and_publishing(connection, name: str) -> tuple:
    """A channel to consume on, one to publish on, and a new queue named after ``name``."""
    channel, publisher = connection.channel(), connection.channel()
    queue = unique(name)
    channel.queue_declare(queue)
    return channel, publisher, queue


def test_a_global_qos_is_one_limit_for_all_the_consumers_of_a_channel(node, amqp):
    connection = amqp(node)
    channel, publisher, queue = _consuming_and_publishing(connection, "global")
    channel.basic_qos(prefetch_count=3, global_qos=True)
    got: list[tuple[str, int]] = []
    consumers = {channel.basic_consume(queue, _consumer(got)) for _ in range(2)}
    publish_numbered(publisher, queue, 10)
    await_deliveries(connection, got, 3)
    expect_no_more(connection, got, 3)
    assert {consumer for consumer, _ in got} == consumers  # shared by the two, not 3 each
    assert _waiting(publisher, queue) == 7
    channel.basic_ack(got[0][1])  # room for exactly one more
    await_deliveries(connection, got, 4)
    expect_no_more(connection, got, 4)
    assert _waiting(publisher, queue) == 6
    # One ack at a time, oldest first: each lets one more through, to both consumers in turn.
    for acked in range(1, 7):
        channel.basic_ack(got[acked][1])
        await_deliveries(connection, got, 4 + acked)
    expect_no_more(connection, got, 10)
    assert _waiting(publisher, queue) == 0
    assert all(count >= 4 for count in Counter(consumer for consumer, _ in got).values()), got


def test_a_global_and_a_per_consumer_qos_both_hold_for_every_delivery(node, amqp):
    connection = amqp(node)
    channel, publisher, queue = _consuming_and_publishing(connection, "both")
    channel.basic_qos(prefetch_count=2)  # each consumer made from now on
    channel.basic_qos(prefetch_count=5, global_qos=True)  # the channel's consumers together
    got: list[tuple[str, int]] = []
    consumers = [channel.basic_consume(queue, _consumer(got)) for _ in range(3)]
    publish_numbered(publisher, queue, 20)
    await_deliveries(connection, got, 5)
    expect_no_more(connection, got, 5)
    held = Counter(consumer for consumer, _ in got)
    assert sorted(held.values()) == [1, 2, 2] and set(held) == set(consumers), held
    assert _waiting(publisher, queue) == 15
    full = next(consumer for consumer, count in held.items() if count == 2)
    channel.basic_ack(next(tag for consumer, tag in got if consumer == full))
    held[full] -= 1
    await_deliveries(connection, got, 6)
    expect_no_more(connection, got, 6)
    held[got[-1][0]] += 1
    assert sum(held.values()) == 5 and max(held.values()) == 2, held
    assert _waiting(publisher, queue) == 14


def test_a_global_qos_of_zero_lifts_the_channel_limit(node, amqp):
    connection = amqp(node)
    channel, publisher, queue = _consuming_and_publishing(connection, "unlimited")
    channel.basic_qos(prefetch_count=3, global_qos=True)
    got: list[tuple[str, int]] = []
    channel.basic_consume(queue, _consumer(got))
    publish_numbered(publisher, queue, 10)
    await_deliveries(connection, got, 3)
    expect_no_more(connection, got, 3)
    channel.basic_qos(prefetch_count=0, global_qos=True)  # 0: no limit, for the consumers there are too
    await_deliveries(connection, got, 10)
    assert _waiting(publisher, queue) == 0


def test_the_model_lists_an_amqp_connections_channels(node, amqp, connect):
    connect(node)  # a STOMP connection: no channels
    connection = amqp(node)
    queue = unique("channels")
    confirming, consuming = channels_holding_unacked(connection, queue, published=3, held=2, prefetch=2,
                                                     global_prefetch=4)
    transacting = connection.channel()
    transacting.tx_select()
    assert transacting.basic_get(queue)[0] is not None  # the third message, not acked
    connections = manage_result(node.port, Connections())
    rows = [c for c in connections if c.protocol == "amqp"]
    assert len(rows) == 1, rows
    row = rows[0]
    assert row.channels == 3 and row.subscriptions == 1 and row.unacked == 3
    assert row.channel_details == [
        ChannelSummary(number=confirming.channel_number, confirm=True),
        ChannelSummary(number=consuming.channel_number, consumers=1, unacked=2, prefetch=2, global_prefetch=4),
        ChannelSummary(number=transacting.channel_number, unacked=1, transactional=True),
    ]
    stomp = [c for c in connections if c.protocol == "stomp"]
    assert stomp and all(c.channels == 0 and c.channel_details == [] for c in stomp)
    transacting.close()
    row = next(c for c in manage_result(node.port, Connections()) if c.protocol == "amqp")
    assert row.channels == 2 and [c.number for c in row.channel_details] == [confirming.channel_number,
                                                                              consuming.channel_number]


def test_an_amqp_connection_is_listed_once_open_before_any_channel(node, amqp, connect):
    stomp = connect(node)  # listed from CONNECT on: an AMQP connection is too, from connection.open
    stomp_row = next(c for c in manage_result(node.port, Connections()) if c.protocol == "stomp")
    connection = amqp(node)  # open: connection.open done, no channel yet
    rows = [c for c in manage_result(node.port, Connections()) if c.protocol == "amqp"]
    assert len(rows) == 1, rows
    row = rows[0]
    assert (row.channels, row.channel_details, row.subscriptions, row.unacked) == (0, [], 0, 0)
    assert row.version == "0-9-1" and row.user == stomp_row.user
    assert row.remote.startswith(HOST + ":")
    channel = connection.channel()  # a channel adds to the row, not a row
    rows = [c for c in manage_result(node.port, Connections()) if c.protocol == "amqp"]
    assert [(r.id, r.channels) for r in rows] == [(row.id, 1)]
    channel.close()
    manage_result(node.port, CloseConnection(connection=row.id, reason="maintenance"))
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.process_data_events(time_limit=5)
    assert closed.value.reply_code == 320 and "maintenance" in closed.value.reply_text
    deadline = time.monotonic() + 5
    while [c for c in manage_result(node.port, Connections()) if c.protocol == "amqp"]:
        assert time.monotonic() < deadline, "the closed connection is still listed"
        time.sleep(0.05)
    stomp.disconnect()


def test_a_full_channel_holds_back_a_consumer_that_joins_it_but_not_a_no_ack_one(node, amqp):
    connection = amqp(node)
    channel, publisher = connection.channel(), connection.channel()
    first, second, free = unique("first"), unique("second"), unique("free")
    for queue in (first, second, free):
        channel.queue_declare(queue)
        publish_numbered(publisher, queue, 5)
    channel.basic_qos(prefetch_count=2, global_qos=True)
    got: list[tuple[str, int]] = []
    channel.basic_consume(first, _consumer(got))
    await_deliveries(connection, got, 2)
    joined = channel.basic_consume(second, _consumer(got))  # waiting messages, but the channel is full
    unlimited: list[bytes] = []
    channel.basic_consume(free, lambda ch, method, props, body: unlimited.append(body), auto_ack=True)
    await_deliveries(connection, unlimited, 5)  # no_ack deliveries are not held against the limit
    expect_no_more(connection, got, 2)
    assert _waiting(publisher, second) == 5
    channel.basic_ack(got[0][1])
    channel.basic_ack(got[1][1])
    await_deliveries(connection, got, 4)
    assert joined in {consumer for consumer, _ in got[2:]}  # the room went to both queues' consumers


def test_deliveries_that_basic_recover_sends_again_can_be_acked(node, amqp):
    connection = amqp(node)
    channel = connection.channel()
    queue = unique("recovered")
    channel.queue_declare(queue)
    publish_numbered(channel, queue, 2)
    got: list = []
    channel.basic_consume(queue, lambda ch, method, props, body: got.append(method))
    await_deliveries(connection, got, 2)
    channel.basic_recover(requeue=True)
    await_deliveries(connection, got, 4)
    assert [method.redelivered for method in got] == [False, False, True, True]
    for method in got[2:]:
        channel.basic_ack(method.delivery_tag)
    assert _waiting(channel, queue) == 0 and channel.is_open  # the new delivery tags were known
