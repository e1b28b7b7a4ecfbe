"""AmqpProtocol against hostile clients, over StringTransport: a bug while handling a
client's bytes closes that connection alone with 541 "internal error" and one
bounded log line; frames nothing may send yet are refused at their head, before
any content is held for them; reply texts fit a short string whatever the client
quoted; lines about one peer address are rate-limited."""

from __future__ import annotations

import logging

import pika.spec
import pytest

from gateway.amqp.channel import Channel
from gateway.amqp.codec import encode_method
from gateway.amqp.spec import CHANNEL_ERROR, COMMAND_INVALID, INTERNAL_ERROR, UNEXPECTED_FRAME
from gateway.hostile_log import PER_MINUTE
from tests.amqp_inputs import frame, start_ok, table
from tests.protocol.amqp_harness import AmqpHarness

PYTHON_WORDS = ("Error", "error(", "struct", "unpack", "Traceback")


@pytest.fixture
def amqp_log(caplog):
    caplog.set_level(logging.INFO, logger="gateway.amqp.protocol")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "gateway.amqp.protocol"]


def test_a_bug_while_handling_a_command_closes_only_its_connection_with_541(monkeypatch, amqp_log):
    def declare_with_a_bug(self, args, command):
        raise RuntimeError(f"a detail for us only: {args.queue}")

    monkeypatch.setattr(Channel, "method_queue_declare", declare_with_a_bug)
    harness = AmqpHarness()
    bystander = harness.opened(port=6000)
    bystander.raw(encode_method(1, "channel.open"))
    victims = [harness.opened(port=port) for port in (6001, 6002)]
    for victim in victims:
        victim.raw(encode_method(1, "channel.open"))
        victim.raw(encode_method(1, "queue.declare", queue="q" * 200, arguments={}))
        close = victim.close()
        assert (close.reply_code, close.reply_text) == (INTERNAL_ERROR, "internal error")
    first, second = [line for line in amqp_log() if "internal error (RuntimeError at" in line]
    assert "test_amqp_hostile.py" in first and "Traceback" in first  # once per place, the traceback
    assert "Traceback" not in second and "detail for us" not in second and len(second) < 400
    bystander.raw(encode_method(1, "basic.qos", prefetch_count=5))
    assert [type(m) for m in bystander.methods()] == [pika.spec.Channel.OpenOk, pika.spec.Basic.QosOk]


def test_a_publish_before_connection_open_is_refused_before_its_content_is_held():
    client = AmqpHarness().client()
    client.raw(start_ok())
    client.methods()  # connection.tune
    client.raw(encode_method(1, "basic.publish", routing_key="q"))  # and 50 MB would follow
    close = client.close()
    assert close.reply_code == UNEXPECTED_FRAME and "before connection.open" in close.reply_text
    assert not client.protocol.reader._content


def test_a_content_method_on_channel_0_is_refused_at_once():
    client = AmqpHarness().opened()
    client.raw(encode_method(0, "basic.publish", routing_key="q"))
    close = client.close()
    assert close.reply_code == COMMAND_INVALID and close.reply_text == "basic.publish on channel 0"


def test_a_frame_over_channel_max_is_refused_at_its_head():
    client = AmqpHarness().opened()
    client.raw(frame(3, 3000, b"x" * 100)[:7])  # a body frame's head; the rest never needs to come
    close = client.close()
    assert close.reply_code == CHANNEL_ERROR and "over channel_max (2047)" in close.reply_text


def test_once_closing_nothing_is_held_for_channels_and_the_close_ok_still_ends_it():
    client = AmqpHarness().opened()
    client.raw(encode_method(1, "channel.open"))
    client.raw(encode_method(1, "basic.publish", routing_key="q")
               + frame(2, 1, b"\x00\x3c\x00\x00" + (10 ** 7).to_bytes(8, "big") + b"\x00\x00"))  # 10 MB to come
    client.raw(frame(1, 0, b"\x00\x0a"))  # a method frame shorter than its ids
    assert client.close().reply_code == 501 and not client.protocol.reader._content
    client.raw(frame(3, 1, b"x" * 1000) + frame(1, 0, b"\x00\x0a\x00\x33"))  # more of the body, then close-ok
    assert not client.protocol.reader._content and not client.protocol.reader._buffer
    assert client.transport.disconnecting


def test_a_reply_text_quoting_a_client_fits_a_short_string():
    """A mechanism of 127 two-byte characters made a 300-byte reply text, which no
    connection.close can carry: the close itself failed."""
    client = AmqpHarness().client()
    client.raw(start_ok(mechanism="é".encode() * 127))
    close = client.close()
    assert close.reply_code == 403 and close.reply_text.startswith("unknown mechanism 'éééé")
    assert len(close.reply_text.encode()) <= 255 and not any(w in close.reply_text for w in PYTHON_WORDS)


def test_capabilities_that_are_not_a_table_do_not_break_connection_blocked():
    client = AmqpHarness(memory_limit=0).opened(client_properties=table(b"\x0ccapabilitiesI\x00\x00\x00\x05"))
    assert client.protocol.state == "open" and client.protocol.blocked


def test_bad_input_from_one_address_is_logged_at_most_per_minute_lines(amqp_log):
    harness = AmqpHarness()

    def bad_connection(host: str, port: int) -> None:
        client = harness.client(host, port)
        client.raw(frame(1, 0, b"\x00\x0a"))  # shorter than its class and method ids
        assert client.close().reply_code == 501
        client.drop()

    for port in range(7000, 7000 + PER_MINUTE * 3):
        bad_connection("10.0.0.1", port)
    about_it = [line for line in amqp_log() if "10.0.0.1" in line]
    assert len(about_it) == PER_MINUTE and about_it[-1].endswith("(more about 10.0.0.1 held back for a minute)")
    assert "501 a method frame shorter than its class and method ids" in about_it[0]
    bad_connection("10.0.0.2", 5555)
    assert "closing 10.0.0.2:5555: 501" in amqp_log()[-1]
    harness.clock.advance(60)
    bad_connection("10.0.0.1", 8000)
    assert amqp_log()[-2:] == [f"10.0.0.1: {PER_MINUTE * 2} more lines about it were held back in the minute before",
                               "amqp: closing 10.0.0.1:8000: 501 a method frame shorter than its class and method ids"]


def test_a_connection_closed_while_its_socket_is_full_still_closes():
    """Twisted resumes a paused producer instead of closing: unregistered first, it closes."""
    client = AmqpHarness().opened()
    assert client.transport.producer is client.protocol
    client.protocol.pauseProducing()  # what the TCP transport does when its buffer is full
    client.raw(encode_method(0, "connection.close", reply_code=200, reply_text="bye", class_id=0, method_id=0))
    assert isinstance(client.methods()[-1], pika.spec.Connection.CloseOk)
    assert client.transport.disconnecting and client.transport.producer is None
