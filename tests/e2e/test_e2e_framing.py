"""Byte-level framing over a raw socket: NULs in bodies, CR LF, EOLs between frames,
pipelining, frames split anywhere, escapes, and the frame/header limits."""

from __future__ import annotations

import time

import pytest
from e2e_support import queue, unique
from raw_stomp import encode

pytestmark = pytest.mark.shared_broker


def raw_consumer(raw, broker, destination: str, version: str = "1.2"):
    consumer = raw(broker)
    consumer.connect(version)
    consumer.send_frame("SUBSCRIBE", {"destination": destination, "id": "s", "receipt": "sub"})
    assert consumer.expect("RECEIPT").headers["receipt-id"] == "sub"
    return consumer


def error_then_closed(client) -> object:
    frames = client.wait_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    error = frames[0]
    assert error.headers.get("message"), error.headers
    return error


# -- bodies, line ends, EOLs ----------------------------------------------------------------


def test_content_length_body_with_nuls(broker, raw, version):
    destination = queue()
    consumer = raw_consumer(raw, broker, destination, version)
    body = b"\0a\0\0b\0" + bytes(range(256)) + b"\0"
    producer = raw(broker)
    producer.connect(version)
    producer.send_frame("SEND", {"destination": destination, "content-length": str(len(body)), "receipt": "r"},
                        body)
    assert producer.expect("RECEIPT").headers["receipt-id"] == "r"
    message = consumer.expect("MESSAGE")
    assert message.body == body
    assert message.headers["content-length"] == str(len(body))


def test_content_length_zero_and_empty_body(broker, raw):
    destination = queue()
    consumer = raw_consumer(raw, broker, destination)
    producer = raw(broker)
    producer.connect("1.2")
    producer.sendall(encode("SEND", {"destination": destination, "content-length": "0"}, b"")
                     + encode("SEND", {"destination": destination}, b""))
    assert [m.body for m in consumer.read_frames(2)] == [b"", b""]


def test_crlf_line_endings(broker, raw, version):
    destination = queue()
    consumer = raw_consumer(raw, broker, destination, version)
    producer = raw(broker)
    connect = {"accept-version": version, "host": "localhost"}
    producer.sendall(encode("CONNECT", connect, eol=b"\r\n"))
    assert producer.expect("CONNECTED").headers["version"] == version
    producer.sendall(
        encode("SEND", {"destination": destination, "x-h": "v", "receipt": "crlf"}, "crlf body", eol=b"\r\n")
        + encode("SEND", {"destination": destination, "content-length": "4"}, "a\r\nb", eol=b"\r\n")
    )
    assert producer.expect("RECEIPT").headers["receipt-id"] == "crlf"
    first, second = consumer.read_frames(2)
    assert first.body == b"crlf body"
    assert first.headers["x-h"] == "v"
    assert first.headers["destination"] == destination
    assert second.body == b"a\r\nb"


def test_eols_between_frames(broker, raw):
    destination = queue()
    consumer = raw_consumer(raw, broker, destination)
    producer = raw(broker)
    producer.sendall(b"\n\r\n\n" + encode("CONNECT", {"accept-version": "1.2", "host": "h"}) + b"\n\n")
    producer.expect("CONNECTED")
    producer.sendall(
        encode("SEND", {"destination": destination}, "one") + b"\n"
        + b"\r\n\n\n" + encode("SEND", {"destination": destination}, "two") + b"\r\n"
        + encode("SEND", {"destination": destination, "receipt": "r"}, "three") + b"\n\n\n"
    )
    assert producer.expect("RECEIPT").headers["receipt-id"] == "r"
    assert [m.body for m in consumer.read_frames(3)] == [b"one", b"two", b"three"]


def test_pipelining_1000_sends_in_one_write(broker, raw, connect):
    destination = queue()
    consumer = connect(broker)
    consumer.subscribe(destination)
    producer = raw(broker)
    producer.connect("1.2")
    data = b"".join(encode("SEND", {"destination": destination, "n": str(i)}, f"m{i}") for i in range(999))
    data += encode("SEND", {"destination": destination, "receipt": "last"}, "m999")
    producer.sendall(data)
    assert producer.expect("RECEIPT").headers["receipt-id"] == "last"
    messages = consumer.listener.wait_for(1000)
    assert [m.body for m in messages] == [f"m{i}" for i in range(1000)]


def _split_frame(destination: str, position: int) -> bytes:
    body = b"x\0y-%05d" % position
    return encode(
        "SEND",
        {"destination": destination, "content-length": str(len(body)), "x-h": "a\\cb", "receipt": f"p{position:05d}"},
        body,
        eol=b"\r\n",
    )


def test_frame_split_at_every_byte_position(broker, raw):
    destination = queue()
    consumer = raw_consumer(raw, broker, destination)
    producer = raw(broker)
    producer.connect("1.2")
    length = len(_split_frame(destination, 0))
    positions = range(1, length)
    for position in positions:
        frame = _split_frame(destination, position)
        producer.sendall(frame[:position])
        time.sleep(0.002)  # pacing only: lets the first part arrive in its own read
        producer.sendall(frame[position:])
    receipts = [f.headers["receipt-id"] for f in producer.read_frames(len(positions))]
    assert receipts == [f"p{p:05d}" for p in positions]
    messages = consumer.read_frames(len(positions))
    assert [m.body for m in messages] == [b"x\0y-%05d" % p for p in positions]
    assert all(m.headers["x-h"] == "a:b" for m in messages)


def test_frame_sent_one_byte_at_a_time(broker, raw):
    destination = queue()
    consumer = raw_consumer(raw, broker, destination)
    producer = raw(broker)
    for byte in encode("CONNECT", {"accept-version": "1.2", "host": "h"}, eol=b"\r\n"):
        producer.sendall(bytes([byte]))
    producer.expect("CONNECTED")
    data = _split_frame(destination, 1) + b"\n" + encode("SEND", {"destination": destination, "receipt": "b"}, "z")
    for byte in data:
        producer.sendall(bytes([byte]))
    assert [f.headers["receipt-id"] for f in producer.read_frames(2)] == ["p00001", "b"]
    assert [m.body for m in consumer.read_frames(2)] == [b"x\0y-00001", b"z"]


# -- malformed frames -----------------------------------------------------------------------


@pytest.mark.parametrize("version, escape", [("1.2", "\\t"), ("1.1", "\\r"), ("1.2", "\\x"), ("1.1", "\\t")])
def test_undefined_escape_is_an_error_naming_it(broker, raw, version, escape):
    client = raw(broker)
    client.connect(version)
    client.send_frame("SEND", {"destination": queue(), "x-bad": f"a{escape}b"}, "x")
    error = error_then_closed(client)
    assert escape in error.headers["message"] + error.body.decode(), error


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(b"SEND\ndestination:/queue/x\nno-colon-here\n\nbody\0", id="header-without-colon"),
        pytest.param(b"SEND\ndestination:/queue/x\ncontent-length:abc\n\nbody\0", id="bad-content-length"),
        pytest.param(b"SEND\ndestination:/queue/x\ncontent-length:2\n\nbody\0", id="body-longer-than-length"),
        pytest.param(b"SEND\ndestination:/queue/x\nx:\xff\xfe\n\nbody\0", id="header-not-utf8"),
        pytest.param(b"SE ND\ndestination:/queue/x\n\nbody\0", id="bad-command"),
        pytest.param(b"FROB\ndestination:/queue/x\n\nbody\0", id="unknown-command"),
    ],
)
def test_malformed_frames_are_errors(broker, raw, frame):
    client = raw(broker)
    client.connect("1.2")
    client.sendall(frame)
    error_then_closed(client)


def test_frames_before_a_bad_frame_in_the_same_write_are_processed(broker, raw, connect):
    destination = queue()
    consumer = connect(broker)
    consumer.subscribe(destination)
    client = raw(broker)
    client.connect("1.2")
    client.sendall(
        encode("SEND", {"destination": destination, "receipt": "good"}, "good")
        + encode("SEND", {"destination": destination, "x-bad": "\\t", "receipt": "bad"}, "bad")
    )
    frames = client.wait_closed()
    assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [("RECEIPT", "good"), ("ERROR", "bad")]
    assert [m.body for m in consumer.listener.wait_for(1)] == ["good"]


# -- limits ---------------------------------------------------------------------------------


@pytest.fixture
def small_broker(broker_factory):
    return broker_factory(sets=["stomp.max_frame_size=1KiB", "stomp.max_headers=8", "stomp.max_header_length=64"])


def test_frame_within_limits_is_accepted(small_broker, raw):
    destination = queue()
    consumer = raw_consumer(raw, small_broker, destination)
    client = raw(small_broker)
    client.connect("1.2")
    headers = {"destination": destination, "receipt": "ok"}
    headers.update({f"h{i}": "v" * 40 for i in range(5)})  # 7 headers, each line < 64 bytes
    client.send_frame("SEND", headers, b"b" * 600)
    assert client.expect("RECEIPT").headers["receipt-id"] == "ok"
    assert consumer.expect("MESSAGE").body == b"b" * 600


@pytest.mark.parametrize("how", ["content-length", "one-write", "streamed"])
def test_frame_over_max_frame_size_is_an_error_with_receipt_id(small_broker, raw, how):
    client = raw(small_broker)
    client.connect("1.2")
    body = b"z" * 4096
    headers = {"destination": queue(), "receipt": "too-big"}
    if how == "content-length":
        headers["content-length"] = str(len(body))
    frame = encode("SEND", headers, body)
    if how == "streamed":
        client.sendall(frame[:2000])
        time.sleep(0.05)  # pacing only
        try:
            client.sendall(frame[2000:])
        except OSError:
            pass  # the broker may already have closed
    else:
        client.sendall(frame)
    error = error_then_closed(client)
    assert error.headers.get("receipt-id") == "too-big", error.headers


def test_headers_count_towards_max_frame_size(small_broker, raw):
    # Six 60-byte headers plus the rest: > 1 KiB of frame in total, each header within its limit.
    client = raw(small_broker)
    client.connect("1.2")
    headers = {"destination": queue(), "receipt": "big-head"}
    headers.update({f"h{i}": "v" * 57 for i in range(6)})
    frame = encode("SEND", headers, b"b" * 700)
    assert len(frame) > 1024
    client.sendall(frame)
    error = error_then_closed(client)
    assert error.headers.get("receipt-id") == "big-head", error.headers


def test_too_many_headers_is_an_error(small_broker, raw):
    client = raw(small_broker)
    client.connect("1.2")
    headers = {"destination": queue(), "receipt": "many"}
    headers.update({f"h{i}": "v" for i in range(20)})
    client.send_frame("SEND", headers, "x")
    error_then_closed(client)


def test_header_too_long_is_an_error(small_broker, raw):
    client = raw(small_broker)
    client.connect("1.2")
    client.send_frame("SEND", {"destination": queue(), "receipt": "long", "x-long": "v" * 200}, "x")
    error_then_closed(client)


def test_endless_header_line_is_an_error(small_broker, raw):
    """A header line that never ends must not be buffered forever."""
    client = raw(small_broker)
    client.connect("1.2")
    try:
        client.sendall(b"SEND\ndestination:/queue/x\nx-endless:" + b"v" * 200_000)
    except OSError:
        pass  # closed by the broker while we were still writing
    error_then_closed(client)


@pytest.mark.parametrize("offence", ["frame-size", "too-many-headers", "header-length", "bad-escape"])
def test_after_a_bad_frame_others_keep_working_and_stored_messages_survive(small_broker, raw, connect, offence):
    kept = queue()
    watched = "/topic/" + unique("w")
    producer = connect(small_broker)
    for i in range(5):
        producer.send(kept, f"kept-{i}", receipt=True, persistent="true")
    bystander = connect(small_broker)
    bystander.subscribe(watched)

    bad = raw(small_broker)
    bad.connect("1.2")
    headers = {"destination": kept, "receipt": "bad"}
    body = b"x"
    if offence == "frame-size":
        headers["content-length"] = "5000"
        body = b"x" * 5000
    elif offence == "too-many-headers":
        headers.update({f"h{i}": "v" for i in range(20)})
    elif offence == "header-length":
        headers["x-long"] = "v" * 500
    else:
        headers["x-esc"] = "\\t"
    try:
        bad.send_frame("SEND", headers, body)
    except OSError:
        pass
    error_then_closed(bad)

    producer.send(watched, "still alive", receipt=True)
    assert bystander.listener.wait_for(1)[0].body == "still alive"
    consumer = connect(small_broker)
    consumer.subscribe(kept)
    assert sorted(m.body for m in consumer.listener.wait_for(5)) == [f"kept-{i}" for i in range(5)]
    assert small_broker.running
