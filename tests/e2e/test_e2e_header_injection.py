"""No frame injection through message headers (issue 22), with real processes: an
AMQP publisher's `content-length` header or a header value holding a line break, a
STOMP 1.2 sender's escaped line breaks and the headers only the broker may set,
reach stomp.py subscribers of every version as exactly the message that was sent,
on the node it was published on and across a mesh link."""

from __future__ import annotations

import pika
import pytest
from amqp_support import AMQP_ON, amqp_broker
from e2e_support import manage_result, unique
from mesh_support import mesh_fixture  # noqa: F401  (the fixture)

from model.requests import Send

VERSIONS = ("1.0", "1.1", "1.2")
# The issue's reproducer: with a content-length header of 2 it used to reach a STOMP
# subscriber as "AB" and then a MESSAGE from /queue/forged.
FORGED = (b"AB\x00MESSAGE\nsubscription:1\ndestination:/queue/forged\nmessage-id:forged-1\ncontent-length:6\n\n"
          b"FORGED\x00")
INJECTED = [  # (body, AMQP headers table): what each subscriber must get exactly as sent
    (FORGED, {"content-length": "2"}),
    (b"ABCDEF", {"x": "a\ncontent-length:2", "y": "kept"}),  # a line break: a header line of its own in 1.0
    (b"fence", None),
]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with amqp_broker(tmp_path_factory, "inject") as broker:
        yield broker


def publish_injected(channel, queue: str) -> None:
    for body, headers in INJECTED:
        channel.basic_publish("", queue, body, pika.BasicProperties(headers=headers))


def assert_received_intact(subscriber, queue: str) -> None:
    """The subscriber got the INJECTED messages and nothing else, with the broker's framing headers."""
    messages = subscriber.listener.wait_for_body("fence")
    assert [m.body for m in messages] == [body.decode() for body, _ in INJECTED], subscriber.listener.summary()
    forged, broken, _ = (m.headers for m in messages)
    assert forged["destination"] == "/queue/" + queue and forged["content-length"] == str(len(FORGED))
    assert broken["content-length"] == "6" and broken["y"] == "kept"
    # STOMP 1.0 cannot carry a line break in a header: the header is left out, never sent raw.
    assert broken.get("x") == (None if subscriber.version == "1.0" else "a\ncontent-length:2"), broken


@pytest.mark.parametrize("version", VERSIONS)
def test_an_amqp_publisher_cannot_frame_what_a_stomp_subscriber_reads(node, amqp, connect, version):
    channel = amqp(node).channel()
    queue = unique("inject")
    channel.queue_declare(queue)
    subscriber = connect(node, version)
    subscriber.subscribe("/queue/" + queue)
    publish_injected(channel, queue)
    assert_received_intact(subscriber, queue)


def test_a_stomp_1_2_sender_reaches_a_1_0_subscriber_without_line_breaks_or_broker_headers(node, connect, raw):
    queue = unique("escaped")
    subscriber = connect(node, "1.0")
    sub_id = subscriber.subscribe("/queue/" + queue)
    sender = raw(node)
    sender.connect("1.2")
    forged = {"redelivered": "true", "message-id": "forged-1", "subscription": "forged", "ack": "forged"}
    sender.send_frame("SEND", {"destination": "/queue/" + queue, "x": r"a\ncontent-length:2", "y": r"b\cc",
                               **forged, "receipt": "r"}, b"ABCDEF")
    sender.send_frame("SEND", {"destination": "/queue/" + queue, "receipt": "fence"}, b"fence")
    assert sender.expect("RECEIPT").headers["receipt-id"] == "r"
    messages = subscriber.listener.wait_for_body("fence")
    assert [m.body for m in messages] == ["ABCDEF", "fence"], subscriber.listener.summary()
    headers = messages[0].headers
    assert headers["content-length"] == "6" and headers["y"] == "b:c" and "x" not in headers
    assert headers["subscription"] == sub_id and headers["message-id"] != "forged-1"
    assert "redelivered" not in headers and "ack" not in headers


def test_a_stomp_sender_cannot_forge_the_route_or_the_types_an_amqp_consumer_reads(node, amqp, connect):
    channel = amqp(node).channel()
    queue = unique("route")
    channel.queue_declare(queue)
    sender = connect(node, "1.2")
    sender.send("/queue/" + queue, "x", receipt=True, headers={
        "n": "5", "amqp-types": '{"n": "int"}', "amqp-exchange": "amq.direct", "amqp-routing-key": "elsewhere"})
    method, properties, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"x" and (method.exchange, method.routing_key) == ("", queue)
    assert properties.headers == {"n": "5"}


def test_a_management_send_cannot_set_the_headers_the_broker_or_the_amqp_gateway_write(node, amqp):
    channel = amqp(node).channel()
    queue = unique("managed")
    channel.queue_declare(queue)
    manage_result(node.port, Send(destination="/queue/" + queue, body="x", headers={
        "n": "5", "content-length": "0", "amqp-types": '{"n": "int"}', "amqp-exchange": "amq.direct",
        "amqp-routing-key": "elsewhere", "redelivered": "true"}))
    method, properties, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"x" and (method.exchange, method.routing_key) == ("", queue) and not method.redelivered
    assert properties.headers == {"n": "5"}


def test_an_injected_message_published_on_one_node_reaches_subscribers_on_another_intact(mesh, amqp):
    a, b = mesh(2, sets=[AMQP_ON])
    channel = amqp(a.proc).channel()
    subscribers = {}
    for version in VERSIONS:
        queue = unique("mesh-inject")
        channel.queue_declare(queue)
        subscribers[queue] = b.client(version)
        subscribers[queue].subscribe("/queue/" + queue)
        publish_injected(channel, queue)  # on a, where the queue has no consumer: it goes to b's
    for queue, subscriber in subscribers.items():
        assert_received_intact(subscriber, queue)
