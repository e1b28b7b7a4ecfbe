"""Numbers in STOMP headers are ASCII digits within what they mean: '²' (a digit to
str.isdigit, not to int), 5,000 digits (over int's limit) and an expires past what the
journal holds are each an ERROR naming the header, never an exception of ours."""

from __future__ import annotations

import pytest

from gateway.stomp.codec import FrameError, FrameParser
from tests.protocol.stomp_harness import Harness

HUGE = "9" * 5000


@pytest.mark.parametrize(("headers", "words"), [
    ({"priority": "²"}, "priority must be"),
    ({"priority": HUGE}, "priority must be"),
    ({"expires": "²"}, "expires must be"),
    ({"expires": HUGE}, "expires must be"),
    ({"expires": str(2 ** 64), "persistent": "true"}, "expires must be"),
])
def test_a_send_with_a_number_out_of_reach_is_an_error(headers, words):
    client = Harness().client("1.2")
    client.send("SEND", {"destination": "/queue/q", "receipt": "r", **headers}, b"x")
    (frame,) = client.frames()
    assert frame.command == "ERROR" and frame.headers["message"].startswith(words), frame
    assert len(frame.headers["message"]) < 200 and frame.headers["receipt-id"] == "r"


def test_an_expires_the_journal_holds_is_taken():
    harness = Harness()
    client = harness.client("1.2")
    client.send("SEND", {"destination": "/queue/q", "receipt": "r", "expires": str(2 ** 63 - 1)}, b"x")
    assert [f.command for f in client.frames()] == ["RECEIPT"]
    assert len(harness.broker.queues["q"]) == 1


@pytest.mark.parametrize("name", ["activemq.prefetchSize", "prefetch-count"])
@pytest.mark.parametrize("raw", ["²", HUGE, "0", str(2 ** 31)])
def test_a_prefetch_out_of_reach_is_an_error(name, raw):
    client = Harness().client("1.1")
    client.send("SUBSCRIBE", {"destination": "/queue/q", "id": "s", name: raw})
    (frame,) = client.frames()
    assert frame.command == "ERROR" and frame.headers["message"].startswith(name + " must be"), frame


@pytest.mark.parametrize("ack_id", ["m#²", "m#" + HUGE])
def test_a_1_2_ack_id_with_a_strange_number_is_an_error(ack_id):
    client = Harness().client("1.2")
    client.send("ACK", {"id": ack_id})
    (frame,) = client.frames()
    assert frame.command == "ERROR" and "does not name a delivery" in frame.headers["message"]


@pytest.mark.parametrize("raw", ["²", "٣", HUGE])
def test_the_codec_refuses_a_content_length_int_cannot_read_with_a_frame_error(raw):
    with pytest.raises(FrameError) as raised:
        FrameParser("1.2").feed(f"SEND\ncontent-length:{raw}\n\nx\0".encode())
    assert "content-length" in raised.value.message and len(raised.value.message) < 200
