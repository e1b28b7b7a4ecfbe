"""The one rule for names, with real clients on one node: a name with a control
character is refused alike by STOMP (an ERROR) and AMQP (channel.close 406), creates
nothing, and leaves the connection's neighbours untouched; a printable name one
protocol makes, the other addresses."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from amqp_support import amqp_broker, drain
from e2e_support import manage_result, unique
from raw_stomp import RawClient
from stomp_client import open_client

from model.requests import Queues


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with amqp_broker(tmp_path_factory, "names") as broker:
        yield broker


def _queue_names(node) -> set[str]:
    reply = manage_result(node.port, Queues())
    return {queue.name for queue in reply}


@pytest.mark.parametrize("name", ["bad\x01name", "bad\tname", "bad\u2028name"])
def test_amqp_declare_of_a_bad_name_closes_the_channel_406_and_creates_nothing(node, amqp, name):
    connection = amqp(node)
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(name)
    assert closed.value.reply_code == 406 and closed.value.reply_text.startswith("invalid queue name")
    assert name not in _queue_names(node)
    assert connection.channel().queue_declare("", exclusive=True).method.queue  # the connection goes on


def test_amqp_publish_to_amq_topic_with_a_bad_routing_key_is_refused(node, amqp):
    channel = amqp(node).channel()
    channel.basic_publish("amq.topic", "news\nflash", b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare("", exclusive=True)  # a round trip: the close comes first
    assert closed.value.reply_code == 406 and "U+000A" in closed.value.reply_text
    confirming = amqp(node).channel()
    confirming.confirm_delivery()
    with pytest.raises(pika.exceptions.NackError):  # with confirms, a nack and the channel goes on
        confirming.basic_publish("amq.topic", "news\nflash", b"x")
    confirming.basic_publish("amq.topic", "news.flash", b"x")


def test_stomp_send_to_a_bad_name_is_an_error_and_a_printable_name_crosses_protocols(node, amqp):
    raw = RawClient.to(node)
    try:
        raw.connect("1.2")
        raw.send_frame("SEND", {"destination": "/queue/bad\x7fname", "receipt": "r1"}, "x")
        (error,) = raw.wait_closed()
    finally:
        raw.close()
    assert error.command == "ERROR" and error.headers["message"].startswith("invalid queue name")
    assert "bad\x7fname" not in _queue_names(node)

    name = unique("ünï cødé")
    stomp = open_client(node, "1.0")
    stomp.send("/queue/" + name, "from stomp", headers={"persistent": "true"}, receipt=True)
    channel = amqp(node).channel()
    ((_, _, body),) = drain(channel, name, 1)
    assert body == b"from stomp"
