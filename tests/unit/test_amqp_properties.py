"""Issue 26, exact properties: AMQP content properties through the core's str->str
headers (from_properties) and back (to_properties) come out as the bytes that went in,
for every basic property and every field-table value type, nested; the core headers
are text a STOMP consumer reads (docs/amqp.md, "AMQP and STOMP together"); STOMP
headers map to properties and back; old messages read as before; hostile amqp-types
never costs a consumer its message."""

from __future__ import annotations

import json
import struct
from decimal import Decimal

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.amqp import fields
from gateway.amqp import properties as props
from gateway.amqp.codec import decode_properties, encode_properties
from tests.amqp_every_type import ALONE, SCALARS, every_property, typed_values
from tests.amqp_inputs import table


def through_the_core(flags: int, raw: bytes) -> tuple[dict[str, str], tuple[int, bytes]]:
    """The core headers a publish with these property bytes makes, and the property bytes
    a consumer of that message is sent."""
    published = props.from_properties(decode_properties(flags, raw, 0), now_ms=lambda: 1000, raw=(flags, raw))
    assert all(type(k) is str and type(v) is str for k, v in published.headers.items()), published.headers
    return published.headers, encode_properties(props.to_properties(
        published.headers, published.persistent, published.priority))


def test_every_property_and_every_field_type_nested_come_back_byte_for_byte():
    sent = every_property()
    headers, back = through_the_core(*sent)
    assert back == sent
    assert headers["persistent"] == "false" and headers["priority"] == "200"  # as published: delivery_mode 1
    assert headers["amqp-expiration"] == "60000" and headers["expires"] == "61000"


@pytest.mark.parametrize("name", sorted(ALONE))
def test_each_property_alone_comes_back_alone(name):
    assert through_the_core(*ALONE[name])[1] == ALONE[name]


@pytest.mark.parametrize(("properties", "headers"), [
    ({}, {}), ({"delivery_mode": 2}, {"persistent": "true"}), ({"delivery_mode": 1}, {"persistent": "false"}),
    ({"delivery_mode": 0}, {"persistent": "0"})])
def test_the_common_publishes_keep_the_fast_path_and_come_back_as_they_were(properties, headers):
    published = props.from_properties(properties, now_ms=lambda: 0)
    assert published.headers == headers and published.persistent == (properties.get("delivery_mode") == 2)
    assert props.to_properties(published.headers, published.persistent, published.priority) == properties


# code, the entry's bytes after the code, the header text a STOMP consumer reads, its amqp-types tag
TEXTS = {"t": ("true", "bool"), "b": ("-5", "b"), "B": ("250", "B"), "s": ("-300", "s"), "u": ("60000", "u"),
         "I": ("-70000", "int"), "i": ("4000000000", "i"), "l": ("7", "l"), "f": ("0.10000000149011612", "f"),
         "d": ("-2.5", "float"), "D": ("-1.50", "D"), "T": ("1700000000", "T"), "V": ("", "V"), "x": ("AAH/", "x")}


@pytest.mark.parametrize(("code", "value"), SCALARS, ids=[f"{c}{i}" for i, (c, _) in enumerate(SCALARS)])
def test_each_field_type_at_the_top_in_a_table_and_in_an_array_keeps_its_code(code, value):
    item = code.encode() + value
    entries = (b"\x03top" + item + b"\x05tableF" + table(b"\x01k" + item)
               + b"\x05arrayA" + struct.pack(">I", len(item) * 2) + item * 2)
    sent = (1 << 13, table(entries))
    headers, back = through_the_core(*sent)
    assert back == sent
    types = json.loads(headers["amqp-types"])
    if code == "S":  # text if UTF-8, else base64 tagged S
        assert (headers["top"], types.get("top")) in {("héllo", None), ("//4=", "S")}
    else:
        assert (headers["top"], types["top"]) == TEXTS[code]
    assert json.loads(headers["table"]) == {"k": json.loads(headers["array"])[0]}  # readable JSON inside


@settings(max_examples=300, deadline=None)
@given(typed_values())
def test_any_table_the_decoder_gives_comes_back_with_the_same_bytes(value):
    sent = (1 << 13, fields.encode_table(value))
    assert through_the_core(*sent)[1] == sent


def test_a_nan_comes_back_a_nan_of_its_code_without_its_payload_bits():
    payload = b"\x7f\xf8" + b"\x00" * 5 + b"\x01"  # a double NaN with payload bits
    sent = (1 << 13, table(b"\x01df" + struct.pack(">f", float("nan")) + b"\x01ed" + payload))
    back = fields.decode_typed_table(through_the_core(*sent)[1][1], 0)[0]
    assert [(type(v), v != v) for v in back.values()] == [(fields.TypedFloat, True), (float, True)]


# STOMP header(s) -> the AMQP properties a consumer gets (docs/amqp.md's table, row by row)
STOMP_ROWS = [
    ({"content-type": "text/plain"}, {"content_type": "text/plain"}),
    ({"content-encoding": "gzip", "correlation-id": "c", "reply-to": "r", "type": "t", "app-id": "a",
      "user-id": "u", "cluster-id": "k"},
     {"content_encoding": "gzip", "correlation_id": "c", "reply_to": "r", "type": "t", "app_id": "a",
      "user_id": "u", "cluster_id": "k"}),
    ({"amqp-message-id": "m"}, {"message_id": "m"}),
    ({"timestamp": "1700000000"}, {"timestamp": 1700000000}),
    ({"persistent": "true"}, {"delivery_mode": 2}), ({"persistent": "false"}, {"delivery_mode": 1}),
    ({"priority": "7"}, {"priority": 7}),
    ({"expires": "99999999999999"}, {}),  # STOMP's expiry is not an AMQP property
    ({"amqp-expiration": "5000", "expires": "1700000005000"}, {"expiration": "5000"}),
    ({"amqp-expiration": "5000"}, {}),  # dead-lettered: no longer expires, and says so
    ({"color": "red", "amqp-header-expires": "soon"}, {"headers": {"color": "red", "expires": "soon"}}),
    ({"timestamp": "yesterday", "persistent": "yes"}, {"headers": {"timestamp": "yesterday", "persistent": "yes"}}),
    ({"content-type": "x" * 256}, {"headers": {"content-type": "x" * 256}}),  # no short string holds it
    ({"destination": "/queue/q", "message-id": "id", "amqp-exchange": "e", "amqp-routing-key": "k",
      "content-length": "3", "subscription": "s", "ack": "a", "redelivered": "true"}, {}),
]


@pytest.mark.parametrize(("headers", "expected"), STOMP_ROWS)
def test_stomp_headers_map_to_amqp_properties(headers, expected):
    properties = props.to_properties(headers, False, 4)
    assert properties == expected
    encode_properties(properties)  # and a consumer can be sent them


@pytest.mark.parametrize(("headers", "_"), [*STOMP_ROWS[:7], STOMP_ROWS[10]])
def test_a_stomp_message_read_over_amqp_and_published_back_has_its_headers(headers, _):
    """Each mapped header comes back as it was (STOMP's ``expires`` is no property: it does not)."""
    back = props.from_properties(props.to_properties(headers, False, 4), now_ms=lambda: 1700000000000).headers
    assert back == headers


def test_messages_of_the_previous_release_read_as_before():
    old = {"retries": "3", "eta": "null", "limits": "[null, 30]", "ok": "true", "ratio": "0.5", "who": "x",
           "amqp-types": '{"retries": "int", "eta": "json", "limits": "json", "ok": "bool", "ratio": "float"}',
           "persistent": "true", "priority": "5", "correlation-id": "c", "expires": "1700000000000"}
    assert props.to_properties(old, True, 5) == {
        "headers": {"retries": 3, "eta": None, "limits": [None, 30], "ok": True, "ratio": 0.5, "who": "x"},
        "delivery_mode": 2, "priority": 5, "correlation_id": "c"}
    assert props.to_properties({}, True, 4) == {"delivery_mode": 2}  # a persistent message without headers


@pytest.mark.parametrize("tag", [
    "b", "B", "s", "u", "i", "l", "L", "f", "D", "T", "x", "S", "int", "float", "json", "F", "A", {"F": {}},
    {"A": {"0": "x"}}, {"F": {"k": {"A": {}}}}, {"F": 1}, {"X": {}}, ["int"], 7, None, "?", {"F": {}, "A": {}}])
@pytest.mark.parametrize("text", [
    "5", "-1", "300", "4294967296", "9" * 30, "1e999", "nan", "NaN", "1E+999999", "AAH/", "!!", "", "[1, 2]",
    '{"k": [1, {"x": 2}]}', "[" * 40 + "]" * 40, '{"k": 99999999999999999999999}', "true", "soon"])
def test_an_amqp_types_tag_that_does_not_fit_its_text_leaves_the_text(tag, text):
    headers = {"n": text, "amqp-types": json.dumps({"n": tag})}
    properties = props.to_properties(headers, False, 4)
    encode_properties(properties)  # whatever it became, a consumer can be sent it
    assert set(properties) == {"headers"} and set(properties["headers"]) == {"n"}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=12) | st.sampled_from(["persistent", "priority", "timestamp", "type"]),
                       st.text(max_size=30), max_size=6),
       st.text(max_size=60) | st.recursive(st.sampled_from(["int", "D", "x", "F", "A", "S"]) | st.none(),
                                           lambda inner: st.dictionaries(st.sampled_from(["F", "A", "n", "0"]),
                                                                         inner, max_size=2), max_leaves=6)
       .map(lambda tag: json.dumps({"n": tag})))
def test_any_headers_and_any_amqp_types_make_properties_a_consumer_can_be_sent(headers, types):
    encode_properties(props.to_properties({**headers, "n": headers.get("n", "[1]"), "amqp-types": types}, False, 4))


def test_an_integer_that_does_not_fit_its_code_is_refused_by_the_encoder_not_struct():
    with pytest.raises(ValueError, match="does not fit"):
        fields.encode_table({"k": fields.typed_int("l", 5).__class__(2 ** 70)})
    with pytest.raises(ValueError, match="does not fit"):
        fields.typed_int("b", 128)


@pytest.mark.parametrize(("tag", "text"), [
    ("?", "AAAA"), ("I", "AAAA"), ("F", "5"), ("A", '{"a": 1}'), ("F", "[1]"), ({"F": {"a": "x"}}, '{"a": "!"}'),
    ("x", "not base64"), ("T", "-1"), ("b", "128"), ("int", "9" * 25), ("D", "NaN")])
def test_text_a_tag_does_not_fit_is_delivered_as_the_text(tag, text):
    headers = {"n": text, "amqp-types": json.dumps({"n": tag})}
    assert props.to_properties(headers, False, 4) == {"headers": {"n": text}}


def test_a_headers_table_that_does_not_decode_is_the_content_header_error():
    with pytest.raises(fields.DecodeError, match="unknown field value type 'Z'"):
        decode_properties(1 << 13, table(b"\x01kZ"), 0)


def test_method_arguments_decode_to_plain_values_that_definitions_can_store():
    """Only a content's headers table is decoded typed: a queue's x-arguments (a Java client
    sends x-message-ttl as l) are stored in the catalog with msgspec, which takes plain types."""
    entries = b"".join(bytes([1]) + code.encode() + code.encode() + value for code, value in SCALARS[:12])
    plain, _ = fields.decode_table(table(entries), 0)
    assert {type(v) for v in plain.values()} <= {bool, int, float, Decimal, str, bytes}
    msgspec.to_builtins(plain)
    typed, _ = fields.decode_typed_table(table(entries), 0)
    assert typed == plain and fields.encode_table(typed) == table(entries)
