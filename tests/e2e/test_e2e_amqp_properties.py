"""Issue 26, exact properties, with real clients against real broker processes: a message
comes back (basic.get, basic.consume, on the node it was published on and on a mesh
peer) with exactly the properties its publisher set, byte for byte; pika and py-amqp
read every property and every field-table type as they sent it; a STOMP-published
message read over AMQP and published back keeps the mapping of docs/amqp.md."""

from __future__ import annotations

import datetime
from decimal import Decimal

import amqp as py_amqp
import pika
import pika.spec
import pytest
from amqp_support import AMQP_ON, RawChannel, amqp_broker, amqp_port
from e2e_support import HOST, unique
from mesh_support import mesh_fixture, wait_until  # noqa: F401  (the fixture)

from tests.amqp_every_type import ALONE, every_property

PIKA_FIELDS = ("content_type", "content_encoding", "headers", "delivery_mode", "priority", "correlation_id",
               "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id", "cluster_id")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with amqp_broker(tmp_path_factory, "props") as broker:
        yield broker


def pika_decoded(flags: int, raw: bytes) -> dict:
    """What pika makes of these property bytes (its own decoder), field by field."""
    properties = pika.spec.BasicProperties()
    properties.decode(flags.to_bytes(2, "big") + raw)
    return {name: getattr(properties, name) for name in PIKA_FIELDS}


def as_pika_reads(properties: pika.spec.BasicProperties) -> dict:
    return {name: getattr(properties, name) for name in PIKA_FIELDS}


@pytest.fixture
def raw_channel(node):
    channel = RawChannel(node)
    yield channel
    channel.close()


def test_every_property_and_every_field_type_come_back_byte_for_byte(node, raw_channel):
    queue = unique("exact")
    raw_channel.declare(queue)
    sent = every_property()
    raw_channel.publish(queue, *sent)
    assert raw_channel.get(queue) == sent
    for name, alone in ALONE.items():  # each property alone: it and nothing else
        if name == "expiration":
            alone = (alone[0], b"\x0560000")  # 0 ms: gone before a get, as in RabbitMQ
        raw_channel.publish(queue, *alone)
        assert raw_channel.get(queue) == alone, name
    raw_channel.publish(queue, 0, b"")
    assert raw_channel.get(queue) == (0, b"")


def test_persistent_messages_come_back_byte_for_byte_after_a_restart(broker_factory):
    node = broker_factory(sets=[AMQP_ON])
    queue = unique("restart")
    sent = [every_property(delivery_mode=2), (0x5000, b"\x04gzip\x02")]  # content_encoding and delivery_mode 2
    channel = RawChannel(node)
    channel.declare(queue, durable=True)
    for flags, raw in sent:
        channel.publish(queue, flags, raw)
    channel.declare(queue, durable=True)  # answered after the publishes before it: the node has them
    channel.close()
    node.restart()
    channel = RawChannel(node)
    try:
        assert {channel.get(queue), channel.get(queue)} == set(sent)  # priority 9 first: either order is fine
    finally:
        channel.close()


def test_pika_gets_and_consumes_only_content_encoding_when_only_that_was_published(node, amqp):
    channel = amqp(node).channel()
    queue = unique("encoding")
    channel.queue_declare(queue)
    for _ in range(2):
        channel.basic_publish("", queue, b"x", pika.BasicProperties(content_encoding="gzip"))
    method, properties, _ = channel.basic_get(queue, auto_ack=True)
    expected = {name: None for name in PIKA_FIELDS} | {"content_encoding": "gzip"}
    assert as_pika_reads(properties) == expected
    for method, properties, _ in channel.consume(queue, inactivity_timeout=10, auto_ack=True):
        assert method is not None, "no delivery"
        assert as_pika_reads(properties) == expected
        break
    channel.cancel()


def test_pika_reads_every_property_and_field_type_as_sent(node, amqp, raw_channel):
    queue = unique("typed")
    raw_channel.declare(queue)
    flags, raw = every_property()
    raw_channel.publish(queue, flags, raw)
    _, properties, _ = amqp(node).channel().basic_get(queue, auto_ack=True)
    expected = pika_decoded(flags, raw)
    assert as_pika_reads(properties) == expected
    assert [type(v) for v in properties.headers["nested"].values()] == [
        type(v) for v in expected["headers"]["nested"].values()]


def test_py_amqp_gets_what_it_published_and_what_it_reads_of_every_type(node, raw_channel):
    connection = py_amqp.Connection(f"{HOST}:{amqp_port(node)}", userid="guest", password="guest")
    connection.connect()
    try:
        channel = connection.channel()
        queue = unique("pyamqp")
        channel.queue_declare(queue)
        headers = {"n": 5, "big": -2 ** 40, "ok": True, "ratio": 0.25, "price": Decimal("1.50"), "eta": None,
                   "when": datetime.datetime(2024, 1, 2, 3, 4, 5), "raw": b"\xff\x00", "list": [1, "a", None],
                   "table": {"inner": {"deep": [Decimal("-0.5")]}}, "expires": "2030-01-01T00:00:00"}
        sent = {"content_type": "application/x-python", "application_headers": headers, "priority": 200,
                "correlation_id": "c", "expiration": "60000", "timestamp": 1714953600}
        channel.basic_publish(py_amqp.Message(b"body", **sent), "", queue)
        got = _py_amqp_get(channel, queue)
        assert got.properties == sent
        flags, raw = every_property()
        raw_channel.publish(queue, flags, raw)
        got = _py_amqp_get(channel, queue)
        assert got.properties == py_amqp.serialization.decode_properties_basic(flags.to_bytes(2, "big") + raw, 0)[0]
    finally:
        connection.close()


def _py_amqp_get(channel, queue: str):
    """The next message basic.get answers from ``queue`` (the publish may still be on its way)."""
    got: list = []
    wait_until(lambda: got.append(channel.basic_get(queue, no_ack=True)) or got[-1] is not None,
               "a message to get", timeout=10)
    return got[-1]


def test_a_stomp_message_read_over_amqp_and_published_back_keeps_the_mapping(node, amqp, connect):
    channel = amqp(node).channel()
    there, back = unique("from-stomp"), unique("back-to-stomp")
    channel.queue_declare(there)
    channel.queue_declare(back)
    stomp = connect(node)
    stomp.subscribe("/queue/" + back)
    sent = {"content-type": "text/plain", "content-encoding": "utf-8", "correlation-id": "c", "reply-to": "r",
            "amqp-message-id": "m", "type": "t", "app-id": "a", "user-id": "u", "cluster-id": "k",
            "timestamp": "1700000000", "persistent": "true", "priority": "7", "color": "red",
            "looks-typed": "AAH/", "amqp-header-expires": "soon",
            "amqp-types": '{"looks-typed": "x", "color": "int"}'}  # a STOMP sender cannot set amqp-types
    stomp.send("/queue/" + there, "hello", headers=sent, receipt=True)
    _, properties, _ = channel.basic_get(there, auto_ack=True)
    assert as_pika_reads(properties) == {
        "content_type": "text/plain", "content_encoding": "utf-8", "correlation_id": "c", "reply_to": "r",
        "message_id": "m", "type": "t", "app_id": "a", "user_id": "u", "cluster_id": "k", "timestamp": 1700000000,
        "delivery_mode": 2, "priority": 7, "expiration": None,
        "headers": {"color": "red", "looks-typed": "AAH/", "expires": "soon"}}
    channel.basic_publish("", back, b"hello", properties)
    (message,) = stomp.listener.wait_for(1)
    kept = {key: value for key, value in message.headers.items() if key in sent}
    assert kept == {key: value for key, value in sent.items() if key != "amqp-types"}


def test_a_message_consumed_on_a_mesh_peer_has_exactly_its_properties(mesh, amqp):
    a, b = mesh(2, sets=[AMQP_ON])
    queue = unique("peer")
    on_a = amqp(a.proc).channel()
    on_a.queue_declare(queue)
    on_b = amqp(b.proc).channel()
    on_b.queue_declare(queue)  # the same definition: b consumes what waits on a
    publisher = RawChannel(a.proc)
    try:
        flags, raw = every_property()
        publisher.publish(queue, 0x4000, b"\x04gzip", b"alone")  # content_encoding alone
        publisher.publish(queue, flags, raw, b"every")
    finally:
        publisher.close()
    got = {}
    for method, properties, body in on_b.consume(queue, inactivity_timeout=15, auto_ack=True):
        assert method is not None, f"{len(got)} of 2 deliveries on b"
        got[body] = as_pika_reads(properties)
        if len(got) == 2:
            break
    on_b.cancel()
    assert got == {b"alone": {name: None for name in PIKA_FIELDS} | {"content_encoding": "gzip"},
                   b"every": pika_decoded(flags, raw)}



def test_a_stomp_header_name_no_amqp_table_can_hold_is_dropped_for_amqp_consumers(node, amqp, connect):
    """A field table's names are short strings (255 bytes): a longer STOMP header name
    cannot be carried, and must not break the delivery, the consumer or the sender."""
    channel = amqp(node).channel()
    queue = unique("long-names")
    channel.queue_declare(queue)
    got = []
    channel.basic_consume(queue, lambda ch, method, properties, body: got.append(properties.headers))
    stomp = connect(node)
    stomp.send("/queue/" + queue, "hello", headers={"n" * 300: "dropped", "kept": "yes"}, receipt=True)
    wait_until(lambda: channel.connection.process_data_events(0.1) or got, "the AMQP consumer to get it", timeout=10)
    assert got == [{"kept": "yes"}]
    stomp.send("/queue/" + queue, "again", receipt=True)  # the sender's connection is still good
