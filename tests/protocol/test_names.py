"""One rule for the names clients choose (model/names.py), checked in the broker
core: a queue, topic, exchange or client id one protocol accepts is one every
protocol can address, and one with a control character is refused by all alike."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.broker.errors import BrokerError
from model.definitions import ExchangeSpec, QueueSettings
from model.names import InvalidName, check_name, name_problem
from tests.protocol.stomp_harness import Harness

BAD = ["", "a\x00b", "a\nb", "a\rb", "a\tb", "\x7f", "a\u200bb", "a\u2028b", "x" * 256, "é" * 128]
GOOD = ["orders", "a b", "a.b.*", "a/b", "ünïcødé", "x" * 255, "é" * 127, "amq.gen-xyz", "📦"]


@pytest.mark.parametrize("name", BAD)
def test_the_rule_refuses_empty_long_and_unprintable_names(name):
    assert name_problem(name) is not None
    with pytest.raises(InvalidName) as raised:
        check_name(name, "queue name")
    assert raised.value.args[0].startswith("invalid queue name ")
    assert len(raised.value.args[0]) < 200  # the name is quoted cut short


@pytest.mark.parametrize("name", GOOD)
def test_the_rule_takes_printable_names_up_to_255_bytes(name):
    assert name_problem(name) is None and check_name(name) == name


@given(st.text(max_size=300))
def test_a_valid_name_fits_an_amqp_short_string_and_a_stomp_header_line(name):
    if name_problem(name) is None:
        encoded = name.encode()
        assert 0 < len(encoded) <= 255
        assert not any(byte < 0x20 or byte == 0x7F for byte in encoded)


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.mark.parametrize("destination", ["/queue/a\tb", "/topic/a\x01b", "/queue/" + "q" * 300])
def test_stomp_send_to_a_bad_name_is_an_error_and_creates_nothing(harness, destination):
    client = harness.client("1.2")
    client.send("SEND", {"destination": destination, "receipt": "r1"}, b"x")
    (frame,) = client.frames()
    assert frame.command == "ERROR" and frame.headers["message"].startswith("invalid ")
    assert frame.headers["receipt-id"] == "r1"
    assert set(harness.broker.queues) == set()


def test_stomp_subscribe_to_a_bad_name_is_an_error(harness):
    client = harness.client("1.1")
    client.send("SUBSCRIBE", {"destination": "/queue/a\nb", "id": "s"})  # sent escaped, as 1.1 says
    (frame,) = client.frames()
    assert frame.command == "ERROR" and "U+000A" in frame.headers["message"]
    assert set(harness.broker.queues) == set()


def test_a_stomp_temp_queue_with_a_bad_name_is_refused(harness):
    client = harness.client("1.2")
    client.send("SUBSCRIBE", {"destination": "/temp-queue/r\x02", "id": "s"})
    (frame,) = client.frames()
    assert frame.command == "ERROR" and "temporary queue name" in frame.headers["message"]


def test_a_good_name_still_works_end_to_end(harness):
    consumer = harness.client("1.2")
    consumer.send("SUBSCRIBE", {"destination": "/queue/ünï cødé", "id": "s"})
    producer = harness.client("1.0")
    producer.send("SEND", {"destination": "/queue/ünï cødé"}, b"hi")
    (message,) = consumer.messages()
    assert message.headers["destination"] == "/queue/ünï cødé" and message.body == b"hi"


@pytest.mark.parametrize("call", [
    lambda b: b.define_queue("a\x00b", QueueSettings()),
    lambda b: b.define_queue("ok", QueueSettings(dead_letter_queue="dlq\n")),
    lambda b: b.declare_exchange("ex\x1b[31m", ExchangeSpec(type="direct")),
    lambda b: b.publish("amq.topic", "a\x00b", {}, b"x"),
    lambda b: b.send("queue", "a\x00b", {}, b"x"),
])
def test_the_core_refuses_bad_names_from_every_entry(harness, call):
    broker = harness.broker
    before = set(broker.queues), set(broker.exchanges.exchanges)
    with pytest.raises(BrokerError, match="^invalid "):
        call(broker)
    assert (set(broker.queues), set(broker.exchanges.exchanges)) == before


def test_a_client_id_with_a_control_character_is_refused(harness):
    broker = harness.broker
    with pytest.raises(BrokerError, match="^invalid client-id"):
        broker.open_session(None, "s1", "me\nyou")


def test_a_stomp_connect_with_a_bad_client_id_is_refused_and_leaves_no_session(harness):
    from tests.protocol.stomp_harness import Client

    client = Client(harness)
    client.send("CONNECT", {"accept-version": "1.2", "host": "x", "client-id": "a\tb"})
    (frame,) = client.frames()
    assert frame.command == "ERROR" and frame.headers["message"].startswith("invalid client-id")
    assert client.closed and harness.broker.sessions == {}
