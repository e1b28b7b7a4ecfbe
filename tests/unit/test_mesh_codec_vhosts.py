"""A MESSAGE of a vhost other than "/" names it (link protocol 5); one of "/" is the
very bytes protocol 4 wrote, so a node of the previous release reads it. A traced message
(docs/journeys.md) carries one more flag bit, which such a node ignores."""

from __future__ import annotations

import pytest

from gateway.broker.message import Message
from mesh.codec import LinkParser, decode_message, encode_message
from mesh.wire import LinkError

# Written by the code of link protocol 4 (main at f0c2003) for the messages below.
V4_PLAIN = bytes.fromhex("00000037080000001800000004000400000000000000000141d954fc402000006e312d312d37006e31006f7264"
                         "657273006e3100006b0076626f6479")
V4_JSON = bytes.fromhex("00000060080000004500000000000400000000000000000c41d954fc402000005b226e312d312d38222c20226e"
                        "31222c20226f7264657273222c205b226e31222c20226e32225d2c202266656564222c207b226f6464223a2022"
                        "615c753030303062227d5d")


def plain() -> Message:
    message = Message("n1-1-7", "queue", "orders", {"k": "v"}, b"body", True, 4, 0)
    message.created = 1700000000.5
    return message


def with_nul() -> Message:
    message = Message("n1-1-8", "queue", "orders", {"odd": "a\0b"}, b"", False, 4, 0)
    message.created = 1700000000.5
    return message


def decoded(frame: bytes):
    ((_, payload),) = LinkParser().feed(frame)
    return decode_message(payload)


def test_a_default_vhost_message_is_byte_identical_to_protocol_4():
    assert encode_message(plain(), "n1", ("n1",)) == V4_PLAIN
    assert encode_message(with_nul(), "n1", ("n1", "n2"), "feed", redistributed=True) == V4_JSON
    assert decoded(V4_PLAIN)[4] == "" and decoded(V4_JSON)[4] == ""


@pytest.mark.parametrize("make", [plain, with_nul])
def test_a_vhost_message_round_trips_with_its_vhost(make):
    message = make()
    message, origin, target, redistributed, vhost = decoded(
        encode_message(message, "n1", ("n1", "n2"), "feed", redistributed=True, vhost="team-a"))
    assert (origin, target, redistributed, vhost, message.path) == ("n1", "feed", True, "team-a", ("n1", "n2"))
    assert message.headers == make().headers and message.body == make().body and message.address == "orders"


def test_a_vhost_message_without_headers_round_trips():
    message = Message("n1-1-9", "topic", "news.eu", {}, b"x", False, 0, 0)
    assert decoded(encode_message(message, "n1", ("n1",), vhost="a\u00e9b"))[4] == "a\u00e9b"


def test_the_vhost_flag_with_an_empty_or_missing_name_is_refused():
    # The flag set on a protocol-4 text block: its fields no longer add up, or the name is empty.
    frame = bytearray(V4_PLAIN)
    frame[5 + 4 + 4 + 1 + 1 + 8] |= 16  # the flags byte, after frame head, lengths, kind, priority, expires
    with pytest.raises(LinkError):
        decoded(bytes(frame))
    empty = encode_message(plain(), "n1", ("n1",), vhost="x").replace(b"\0x\0", b"\0\0", 1)
    fixed = bytearray(empty)
    fixed[0:4] = (len(empty) - 5).to_bytes(4, "big")
    fixed[5:9] = (int.from_bytes(fixed[5:9], "big") - 1).to_bytes(4, "big")
    with pytest.raises(LinkError, match="empty vhost"):
        decoded(bytes(fixed))


def traced(make):
    message = make()
    message.traced = True
    return message


@pytest.mark.parametrize("make", [plain, with_nul])
@pytest.mark.parametrize("vhost", ["", "team-a"])
def test_a_traced_message_arrives_traced_and_an_untraced_one_untraced(make, vhost):
    for message, expected in ((traced(make), True), (make(), False)):
        back = decoded(encode_message(message, "n1", ("n1",), "", False, vhost))[0]
        assert back.traced is expected
        assert (back.headers, back.body, back.id) == (make().headers, make().body, make().id)


def test_the_bit_is_the_only_difference_and_untraced_frames_are_unchanged():
    assert encode_message(plain(), "n1", ("n1",)) == V4_PLAIN
    marked = encode_message(traced(plain), "n1", ("n1",))
    differing = [i for i, (x, y) in enumerate(zip(marked, V4_PLAIN, strict=True)) if x != y]
    assert len(differing) == 1 and marked[differing[0]] ^ V4_PLAIN[differing[0]] == 32
