"""The AMQP 0-9-1 codec (gateway/amqp/codec.py and reader.py) against pika's own encoder, byte by
byte and split anywhere; arbitrary bytes never raise anything but AmqpError (the
field-table decoder nothing but DecodeError), hostile tables (deep, with timestamps
no datetime holds) get the reply code the spec gives with a text for humans; and
the property mapping keeps header types from AMQP to AMQP."""

from __future__ import annotations

import datetime
import time
from decimal import Decimal

import pika.frame
import pika.spec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.amqp import properties as props
from gateway.amqp.codec import (
    encode_consumer,
    encode_content,
    encode_delivery,
    encode_method,
    encode_properties,
    encode_route,
)
from gateway.amqp.fields import MAX_TABLE_DEPTH, DecodeError, decode_table, encode_table
from gateway.amqp.reader import Command, ContentRefused, FrameReader, ProtocolHeader
from gateway.amqp.spec import (
    CHANNEL_ERROR,
    COMMAND_INVALID,
    FRAME_ERROR,
    PROTOCOL_HEADER,
    SYNTAX_ERROR,
    UNEXPECTED_FRAME,
    AmqpError,
)
from tests.amqp_inputs import (
    TIMESTAMP_2_64,
    TRUNCATED_AMQPLAIN,
    frame,
    nested_table,
    start_ok,
    table,
    timestamp_in_client_properties,
)

# What a reply text must never show a client: Python's names for what went wrong.
PYTHON_WORDS = ("Error", "error(", "struct", "unpack", "Traceback", "buffer", "offset")


def pika_method(channel: int, method) -> bytes:
    return pika.frame.Method(channel, method).marshal()


def pika_content(channel: int, properties: pika.spec.BasicProperties, body: bytes, frame_max: int = 131072) -> bytes:
    header = pika.frame.Header(channel, len(body), properties).marshal()
    room = frame_max - 8
    bodies = b"".join(pika.frame.Body(channel, body[i:i + room]).marshal() for i in range(0, len(body), room))
    return header + bodies


def reader() -> FrameReader:
    r = FrameReader()
    assert [e.ok for e in r.feed(PROTOCOL_HEADER)] == [True]
    return r


def test_methods_from_pika_decode_with_their_arguments():
    data = pika_method(1, pika.spec.Queue.Declare(queue="orders", durable=True, arguments={"x-message-ttl": 5000}))
    data += pika_method(1, pika.spec.Basic.Qos(prefetch_count=10))
    data += pika_method(2, pika.spec.Basic.Ack(delivery_tag=7, multiple=True))
    declare, qos, ack = reader().feed(data)
    assert declare.spec.name == "queue.declare" and declare.channel == 1
    assert (declare.args.queue, declare.args.durable, declare.args.exclusive) == ("orders", True, False)
    assert declare.args.arguments == {"x-message-ttl": 5000}
    assert qos.args.prefetch_count == 10 and not qos.args.global_
    assert (ack.channel, ack.args.delivery_tag, ack.args.multiple) == (2, 7, True)


def test_a_publish_with_its_content_split_anywhere_is_one_command():
    properties = pika.spec.BasicProperties(content_type="application/json", delivery_mode=2, priority=7,
                                           headers={"n": 1, "big": 2 ** 40, "s": "x", "ok": True,
                                                    "list": [1, "a", None], "nested": {"k": "v"},
                                                    "when": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC),
                                                    "d": Decimal("1.25")},
                                           correlation_id="c-1", reply_to="replies", expiration="60000",
                                           message_id="m-1", timestamp=1_700_000_000, type="t", user_id="guest",
                                           app_id="app")
    body = bytes(range(256)) * 1000  # several body frames
    data = pika_method(1, pika.spec.Basic.Publish(exchange="ex", routing_key="rk", mandatory=True))
    data += pika_content(1, properties, body, frame_max=4096)
    for cut in (1, 7, 8, 100, 4096, len(data) - 1):
        r = reader()
        r.frame_max = 4096
        events = r.feed(data[:cut]) + r.feed(data[cut:])
        (command,) = events
        assert isinstance(command, Command) and command.spec.name == "basic.publish"
        assert (command.args.exchange, command.args.routing_key, command.args.mandatory) == ("ex", "rk", True)
        assert command.body == body
        p = command.properties
        assert p["headers"]["big"] == 2 ** 40 and p["headers"]["list"] == [1, "a", None]
        assert p["headers"]["d"] == Decimal("1.25") and p["headers"]["when"].year == 2026
        assert (p["content_type"], p["delivery_mode"], p["priority"], p["expiration"]) == (
            "application/json", 2, 7, "60000")


def test_what_the_broker_encodes_pika_decodes():
    frames = encode_method(3, "basic.deliver", consumer_tag="ctag", delivery_tag=9, redelivered=True,
                           exchange="amq.topic", routing_key="a.b")
    frames += b"".join(encode_content(3, {"content_type": "text/plain", "delivery_mode": 2,
                                          "headers": {"n": 5, "s": "x"}}, b"x" * 10000, frame_max=4096))
    offset = 0
    decoded = []
    while offset < len(frames):
        consumed, frame = pika.frame.decode_frame(frames[offset:])
        decoded.append(frame)
        offset += consumed
    method, header, *bodies = decoded
    assert isinstance(method.method, pika.spec.Basic.Deliver)
    assert (method.method.delivery_tag, method.method.redelivered, method.method.routing_key) == (9, True, "a.b")
    assert header.properties.headers == {"n": 5, "s": "x"} and header.body_size == 10000
    assert b"".join(b.fragment for b in bodies) == b"x" * 10000 and all(len(b.fragment) <= 4088 for b in bodies)


def test_a_wrong_protocol_header_is_reported_and_nothing_else_is_read():
    r = FrameReader()
    (header,) = r.feed(b"GET / HTTP/1.1\r\n\r\n")
    assert isinstance(header, ProtocolHeader) and not header.ok
    r = FrameReader()
    assert r.feed(b"AMQP") == []  # the rest may follow
    (header,) = r.feed(b"\x00\x00\x09\x00")
    assert not header.ok  # 0-9-0


@pytest.mark.parametrize("data, code, words", [
    (b"\x01\x00\x01\x00\x00\x00\x04\x00\x3c\x00\x28\x00", FRAME_ERROR, "0xCE"),
    (b"\x09\x00\x00\x00\x00\x00\x00\xce", FRAME_ERROR, "unknown frame type"),
    (b"\x08\x00\x05\x00\x00\x00\x00\xce", FRAME_ERROR, "heartbeat frame on channel 5"),
    (b"\x02\x00\x01\x00\x00\x00\x0e\x00\x3c\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xce", UNEXPECTED_FRAME,
     "no method before it"),
    (b"\x01\x00\x01\x00\x00\x00\x06\x00\x3c\x00\x28\x00\x00\xce", SYNTAX_ERROR, "basic.publish"),
    (b"\x01\x00\x01\x00\x00\x00\x04\x00\x3c\x03\xe7\xce", 540, "unknown method 60.999"),
])
def test_malformed_frames_name_the_problem(data, code, words):
    with pytest.raises(AmqpError) as raised:
        reader().feed(data)
    assert raised.value.code == code and words in raised.value.text


def test_a_frame_over_frame_max_is_refused_before_it_is_read():
    r = reader()
    with pytest.raises(AmqpError, match="over frame_max"):
        r.feed(b"\x03\x00\x01\x7f\x00\x00\x00")


def test_a_content_over_the_limit_is_refused_for_its_channel_and_skipped():
    r = FrameReader(max_body=10)
    r.feed(PROTOCOL_HEADER)
    data = pika_method(1, pika.spec.Basic.Publish(routing_key="q")) + pika_content(1, pika.spec.BasicProperties(),
                                                                                  b"x" * 50)
    data += pika_method(1, pika.spec.Basic.Publish(routing_key="q")) + pika_content(1, pika.spec.BasicProperties(),
                                                                                  b"small")
    refused, command = r.feed(data)
    assert isinstance(refused, ContentRefused) and refused.error.channel == 1 and "over the node's limit" in \
        refused.error.text
    assert command.body == b"small"


def test_tables_round_trip():
    table = {"i": -5, "l": 2 ** 40, "s": "text", "t": True, "f": 0.5, "n": None, "a": [1, [2]], "F": {"x": "y"},
             "b": b"\x00\xff"}
    data = encode_table(table)
    assert decode_table(data, 0) == (table, len(data))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=50))
def test_arbitrary_bytes_never_raise_anything_but_amqp_errors(data, cut):
    r = reader()
    try:
        r.feed(data[:cut])
        r.feed(data[cut:])
    except AmqpError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_method_payloads_never_raise_anything_but_amqp_errors(payload):
    frame = b"\x01\x00\x01" + len(payload).to_bytes(4, "big") + payload + b"\xce"
    try:
        reader().feed(frame)
    except AmqpError:
        pass


def test_typed_headers_survive_the_trip_through_the_core():
    properties = {"headers": {"retries": 0, "ok": False, "eta": None, "timelimit": [None, 30], "name": "x",
                              "ratio": 0.25},
                  "content_type": "application/json", "correlation_id": "c", "reply_to": "r", "message_id": "m",
                  "delivery_mode": 2, "priority": 5, "timestamp": 1700000000}
    published = props.from_properties(properties, now_ms=lambda: 1000)
    assert published.persistent and published.priority == 5
    assert published.headers["retries"] == "0" and published.headers["correlation-id"] == "c"  # STOMP reads these
    back = props.to_properties(published.headers, published.persistent, published.priority)
    assert back["headers"] == properties["headers"]
    assert {k: back[k] for k in ("content_type", "correlation_id", "reply_to", "message_id", "timestamp")} == {
        k: properties[k] for k in ("content_type", "correlation_id", "reply_to", "message_id", "timestamp")}


def test_an_expiration_becomes_the_message_expiry_and_a_bad_one_is_refused():
    assert props.from_properties({"expiration": "1500"}, now_ms=lambda: 1000).expires == 2500
    with pytest.raises(ValueError, match="expiration"):
        props.from_properties({"expiration": "soon"}, now_ms=lambda: 1000)


@pytest.mark.parametrize("body", [b"", b"small body"])
def test_a_publish_read_in_one_go_is_the_same_as_one_read_frame_by_frame(body):
    properties = pika.spec.BasicProperties(content_type="text/plain", headers={"n": 1}, delivery_mode=2)
    data = (pika_method(1, pika.spec.Basic.Publish(exchange="ex", routing_key="rk")) + pika_content(1, properties, body)
            + pika_method(1, pika.spec.Basic.Ack(delivery_tag=3)))
    (whole, ack) = reader().feed(data)
    r = reader()
    split = [event for i in range(len(data)) for event in r.feed(data[i:i + 1])]
    assert [e.spec.name for e in split] == ["basic.publish", "basic.ack"] and ack.args.delivery_tag == 3
    for command in (whole, split[0]):
        assert (command.args.exchange, command.args.routing_key, command.body) == ("ex", "rk", body)
        assert command.properties == {"content_type": "text/plain", "headers": {"n": 1}, "delivery_mode": 2}
    assert whole.raw_properties == split[0].raw_properties


def test_a_publish_with_a_bad_header_in_one_read_is_still_refused():
    data = pika_method(1, pika.spec.Basic.Publish(routing_key="q")) + pika_content(1, pika.spec.BasicProperties(),
                                                                                  b"x")
    broken = bytearray(data)
    broken[len(pika_method(1, pika.spec.Basic.Publish(routing_key="q"))) + 8] = 0x3d  # content class 61
    with pytest.raises(AmqpError, match="content class 61"):
        reader().feed(bytes(broken))


@pytest.mark.parametrize("body, frame_max", [(b"", 4096), (b"x" * 256, 4096), (b"y" * 4088, 4096),
                                             (bytes(range(256)) * 40, 4096)])
def test_a_delivery_in_one_piece_is_the_frames_it_stands_for(body, frame_max):
    """encode_delivery (one bytes per delivery) against basic.deliver and its content
    encoded frame by frame; pika reads it: an empty body has no body frame, a long one several."""
    properties = encode_properties({"content_type": "text/plain", "delivery_mode": 1, "headers": {"n": 5}})
    one = encode_delivery(7, encode_consumer("ctag-1"), 2 ** 40, True, encode_route("amq.topic", "a.b"), properties,
                          body, frame_max)
    frames = encode_method(7, "basic.deliver", consumer_tag="ctag-1", delivery_tag=2 ** 40, redelivered=True,
                           exchange="amq.topic", routing_key="a.b")
    assert one == frames + b"".join(encode_content(7, properties, body, frame_max))
    decoded, offset = [], 0
    while offset < len(one):
        consumed, frame = pika.frame.decode_frame(one[offset:])
        decoded.append(frame)
        offset += consumed
    method, header, *bodies = decoded
    assert (method.method.consumer_tag, method.method.exchange, method.method.routing_key) == ("ctag-1", "amq.topic",
                                                                                               "a.b")
    assert header.properties.headers == {"n": 5} and header.body_size == len(body)
    assert b"".join(b.fragment for b in bodies) == body and len(bodies) == -(-len(body) // (frame_max - 8))


def test_publishes_that_repeat_their_arguments_each_read_right():
    """The reader keeps decoded basic.publish arguments for the next like them: publishes
    to different places, mixed, read in one go or a byte at a time, keep theirs; ``route``
    is their exchange and routing key as basic.deliver encodes them."""
    places = [("", "q1"), ("ex", "rk"), ("", "q1"), ("ex", "other"), ("ex", "rk")]
    data = b"".join(pika_method(1, pika.spec.Basic.Publish(exchange=e, routing_key=k, mandatory=k == "other"))
                    + pika_content(1, pika.spec.BasicProperties(), b"body") for e, k in places)
    r = reader()
    for events in (reader().feed(data), [e for i in range(len(data)) for e in r.feed(data[i:i + 1])],
                   r.feed(data)):
        assert [(c.args.exchange, c.args.routing_key, c.args.mandatory) for c in events] == [
            (e, k, k == "other") for e, k in places]
        assert [c.args.route for c in events] == [encode_route(e, k) for e, k in places]
        assert all(c.body == b"body" for c in events)


# -- hostile input (issue 22) -------------------------------------------------------------


def refused(data: bytes, r: FrameReader | None = None) -> AmqpError:
    with pytest.raises(AmqpError) as raised:
        (r or reader()).feed(data)
    assert not any(word in raised.value.text for word in PYTHON_WORDS), raised.value.text
    return raised.value


def test_the_issue_reproducer_is_what_the_builder_makes():
    assert TIMESTAMP_2_64 == timestamp_in_client_properties(2 ** 64 - 1)


@pytest.mark.parametrize("data", [TIMESTAMP_2_64, timestamp_in_client_properties(2 ** 63 - 1),
                                  timestamp_in_client_properties(253402300800)])
def test_a_timestamp_no_datetime_holds_is_a_syntax_error(data):
    """2**64-1 raised OverflowError, 2**63-1 OSError (EOVERFLOW): both escaped the reader."""
    error = refused(data)
    assert error.code == SYNTAX_ERROR and (error.class_id, error.method_id) == (10, 11)
    assert "connection.start_ok" in error.text and "past the year 9999" in error.text


@pytest.fixture
def local_zone_not_utc(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_timestamps_up_to_the_last_second_of_9999_decode_to_utc_datetimes_and_back(local_zone_not_utc):
    last = datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.UTC)
    data = table(b"\x04lastT" + (253402300799).to_bytes(8, "big") + b"\x05epochT" + bytes(8))
    assert decode_table(data, 0) == ({"last": last, "epoch": datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)},
                                     len(data))
    assert encode_table({"last": last, "epoch": datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)}) == data
    naive = datetime.datetime(2026, 1, 2, 3, 4, 5)  # taken as UTC, as pika takes it, whatever the local zone
    assert decode_table(encode_table({"t": naive}), 0)[0]["t"] == naive.replace(tzinfo=datetime.UTC)


@pytest.mark.parametrize("kind", ["F", "A"])
def test_tables_nested_2000_deep_are_refused_without_recursing(kind):
    """2,000 levels (14 KB) in client_properties raised RecursionError, with ~117 KB of traceback."""
    with pytest.raises(DecodeError, match=f"nested more than {MAX_TABLE_DEPTH} deep"):
        decode_table(nested_table(2000, kind), 0)
    error = refused(start_ok(nested_table(2000, kind)))
    assert error.code == SYNTAX_ERROR and f"nested more than {MAX_TABLE_DEPTH} deep" in error.text


@pytest.mark.parametrize("kind", ["F", "A"])
def test_tables_nest_up_to_the_limit(kind):
    value, _ = decode_table(nested_table(MAX_TABLE_DEPTH, kind), 0)
    depth = 1
    while value:
        value = value["k"] if isinstance(value, dict) else value[0]
        depth += 1
    assert depth == MAX_TABLE_DEPTH
    with pytest.raises(DecodeError, match="nested"):
        decode_table(nested_table(MAX_TABLE_DEPTH + 1, kind), 0)


def test_a_truncated_amqplain_response_is_a_decode_error_not_a_struct_error():
    """The AMQPLAIN reproducer's response: LOGIN, a long string's type, 3 of its 4 size bytes."""
    (command,) = reader().feed(TRUNCATED_AMQPLAIN)
    response = command.args.response
    with pytest.raises(DecodeError) as raised:
        decode_table(len(response).to_bytes(4, "big") + response, 0)
    assert str(raised.value) == "a value runs past the end"


@pytest.mark.parametrize("data, code, words", [
    (frame(1, 1, b"\x00\x0a\x00\x33"), COMMAND_INVALID, "connection.close_ok on channel 1"),
    (frame(1, 0, b"\x00\x3c\x00\x28\x00\x00\x00\x00\x00"), COMMAND_INVALID, "basic.publish on channel 0"),
    (frame(1, 1, b"\x00\x32\x00\x0a\x00\x00\x05\xff\xfe\xfd\xfc\xfb\x00" + bytes(4)), SYNTAX_ERROR,
     "not UTF-8"),
    (frame(1, 1, b"\x00\x32\x00\x0a\x00\x00\x00\x00" + table(b"\x01k?")), SYNTAX_ERROR,
     "unknown field value type '?'"),
    (frame(1, 1, b"\x00\x3c\x00\x50\x00\x00"), SYNTAX_ERROR, "basic.ack: malformed arguments (a value runs past"),
    (frame(1, 1, b"\x00\x3c\x00\x28\x00\x00\x00\x00\x00") + frame(2, 1, b"\x00\x3c\x00"), FRAME_ERROR,
     "malformed content header on channel 1 (a value runs past the end)"),
])
def test_each_malformed_method_gets_its_code_and_a_text_for_humans(data, code, words):
    error = refused(data)
    assert error.code == code and words in error.text, error.text


def test_a_reader_closed_until_open_refuses_frames_off_channel_0_at_their_head():
    """Before connection.open nothing on a channel is in turn; the reader would hold a
    content of up to max_body for each channel a client names."""
    r = FrameReader(channel_max=2047, closed_until_open=True)
    r.feed(PROTOCOL_HEADER)
    publish = pika_method(1, pika.spec.Basic.Publish(routing_key="q"))
    error = refused(publish[:7], r)  # the head is enough
    assert error.code == UNEXPECTED_FRAME and "before connection.open" in error.text
    r = FrameReader(channel_max=2047, closed_until_open=True)
    r.feed(PROTOCOL_HEADER)
    (opened,) = r.feed(pika_method(0, pika.spec.Connection.Open()))
    assert opened.spec.name == "connection.open"
    assert [c.spec.name for c in r.feed(pika_method(2047, pika.spec.Channel.Open()))] == ["channel.open"]
    error = refused(pika_method(2048, pika.spec.Channel.Open())[:7], r)
    assert error.code == CHANNEL_ERROR and "over channel_max (2047)" in error.text


def test_after_a_refused_frame_the_reader_reads_on_and_once_frames_are_lost_nothing_more():
    """So the client's close-ok is read after a refused frame; and what a client sends
    after the frame boundaries are lost is not held while the connection closes."""
    r = FrameReader(channel_max=2047, closed_until_open=True)
    r.feed(PROTOCOL_HEADER)
    publish = pika_method(1, pika.spec.Basic.Publish(routing_key="q"))
    close_ok = pika_method(0, pika.spec.Connection.CloseOk())
    refused(publish[:10], r)
    assert [c.spec.name for c in r.feed(publish[10:] + close_ok)] == ["connection.close_ok"]
    r = reader()
    refused(b"\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x33\x00", r)  # no frame end
    assert r.feed(close_ok * 1000) == [] and not r._buffer


def test_an_error_text_is_cut_to_a_short_string_at_a_character():
    error = AmqpError(SYNTAX_ERROR, "é" * 300)
    assert len(error.text.encode()) <= 255 and error.text.endswith("...")
    assert encode_method(0, "connection.close", reply_code=error.code, reply_text=error.text)


def _timestamps():
    return st.integers(0, 253402300799).map(lambda s: datetime.datetime.fromtimestamp(s, datetime.UTC))


_SCALARS = (st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1) | st.text(max_size=20) | st.binary(max_size=20)
            | st.floats(allow_nan=False) | st.none() | _timestamps()
            | st.builds(lambda v, s: Decimal(v).scaleb(-s), st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(0, 20)))
_KEYS = st.text(max_size=60)  # at most 240 bytes of UTF-8: a short string
_TABLES = st.dictionaries(_KEYS, st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=20),
    max_size=6)


@settings(max_examples=300, deadline=None)
@given(_TABLES)
def test_any_table_the_encoder_takes_decodes_to_itself(value):
    data = encode_table(value)
    assert decode_table(data, 0) == (value, len(data))


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=300),
                 st.tuples(_TABLES, st.integers(0, 400), st.binary(max_size=8)).map(
                     lambda t: (lambda b: b[:t[1]] + t[2] + b[t[1] + len(t[2]):])(encode_table(t[0])))))
def test_any_bytes_decode_to_a_table_or_raise_decode_error_only(data):
    """Random bytes, and encodings of real tables with some bytes overwritten."""
    try:
        decode_table(data, 0)
    except DecodeError as error:
        assert not any(word in str(error) for word in PYTHON_WORDS), str(error)


@pytest.mark.parametrize("expiration", ["²", "-1", "1e3", "9" * 5000, str(2 ** 32), str(2 ** 64)])
def test_an_expiration_out_of_reach_is_refused_with_a_reason(expiration):
    from gateway.amqp.properties import MAX_EXPIRATION, from_properties

    with pytest.raises(ValueError) as raised:
        from_properties({"expiration": expiration}, lambda: 1_700_000_000_000)
    assert str(MAX_EXPIRATION) in str(raised.value) and len(str(raised.value)) < 200


def test_the_longest_expiration_is_taken():
    from gateway.amqp.properties import MAX_EXPIRATION, from_properties

    publish = from_properties({"expiration": str(MAX_EXPIRATION)}, lambda: 1_700_000_000_000)
    assert publish.expires == 1_700_000_000_000 + MAX_EXPIRATION
