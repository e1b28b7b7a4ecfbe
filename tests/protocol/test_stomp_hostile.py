"""STOMP, over TCP and WebSocket, against what bench/fuzz found: a connection that
fails while its socket is full still closes; an exception of ours on a client's
frame is an ERROR for the client and a bounded log line, not a dropped socket and
a traceback per frame; WebSocket requests and frames that make wsproto raise get a
400 or a close; an upgrade request never finished does not hold a socket for good."""

from __future__ import annotations

import logging
import struct

from wsproto.events import CloseConnection, RejectConnection, TextMessage

from gateway.stomp.websocket import HANDSHAKE_TIMEOUT
from tests.protocol.stomp_harness import Harness
from tests.protocol.test_stomp_large_frames import LARGE, SlowSocket
from tests.protocol.test_stomp_websocket import Browser, connect_frame


def test_a_connection_that_fails_while_its_socket_is_full_still_closes():
    """Twisted resumes a paused producer instead of closing: unregistered, it closes."""
    client = Harness().client()
    assert client.transport.producer is client.protocol
    client.protocol.pauseProducing()  # what the TCP transport does when its buffer is full
    client.raw(b"NONSENSE\n\n\0")
    assert [f.command for f in client.frames()] == ["ERROR"]
    assert client.closed and client.transport.producer is None


def test_an_error_while_a_large_body_goes_out_follows_the_body_then_closes():
    harness = Harness()
    consumer = harness.client(transport=SlowSocket())
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/q"})
    harness.client().send("SEND", {"destination": "/queue/q"}, LARGE)
    consumer.raw(b"NONSENSE\n\n\0")
    assert not consumer.closed  # the rest of the body first: a client cannot read an ERROR inside a body
    consumer.transport.drain_all()
    assert [(f.command, len(f.body)) for f in consumer.frames()][0] == ("MESSAGE", len(LARGE))
    assert consumer.closed and consumer.transport.producer is None


def test_an_exception_of_ours_on_a_frame_is_an_error_frame_and_one_log_line(monkeypatch, caplog):
    harness = Harness()

    def failing_add(key, message):  # as the journal did on an expires past 2**64 (struct.error)
        raise struct.error("argument out of range")

    monkeypatch.setattr(harness.broker.store, "add", failing_add)
    with caplog.at_level(logging.ERROR, logger="gateway.stomp"):
        for _ in range(30):
            client = harness.client()
            client.send("SEND", {"destination": "/queue/q", "persistent": "true", "receipt": "r"}, b"x")
            (error,) = client.frames()
            assert error.command == "ERROR" and error.headers["receipt-id"] == "r" and client.closed
            assert "internal error" in error.headers["message"] and "struct" not in error.headers["message"]
    lines = [r.getMessage() for r in caplog.records]
    assert 1 <= len(lines) <= 11 and sum("Traceback" in line for line in lines) <= 1, lines
    assert "error" in lines[0] and "SEND" in lines[0]


def test_a_websocket_request_with_other_bytes_than_ascii_in_a_header_gets_a_400():
    for header in (b"Sec-WebSocket-Protocol: v12.stomp\xff\r\n", b"Sec-WebSocket-Extensions: \xe3\x81\x82\r\n"):
        browser = Browser(Harness())
        browser.protocol.dataReceived(
            b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" + header + b"\r\n")
        assert browser.transport.value().startswith(b"HTTP/1.1 400"), header
        assert browser.transport.disconnecting


def test_a_ping_after_the_server_sent_its_close_is_not_answered():
    browser = Browser(Harness())
    browser.handshake(["v12.stomp"])
    browser.send(TextMessage(data="NONSENSE\n\n\0"))  # STOMP's ERROR, then the server's close
    assert isinstance(browser.events()[-1], CloseConnection)
    browser.protocol.dataReceived(b"\x89\x82abcd" + bytes(b ^ k for b, k in zip(b"hi", b"ab", strict=True)))
    assert browser.transport.value() == b""


def test_a_websocket_closed_while_its_socket_is_full_still_closes():
    browser = Browser(Harness())
    browser.handshake(["v12.stomp"])
    browser.send(TextMessage(data=connect_frame()))
    assert browser.transport.producer is not None  # STOMP's, on the TCP transport
    # A ping of 200 bytes (masked, all zero under a zero mask): control frames hold 125 at most.
    browser.protocol.dataReceived(b"\x89\xfe" + struct.pack(">H", 200) + b"\0" * 204)
    assert browser.transport.disconnecting and browser.transport.producer is None


def test_an_upgrade_request_never_finished_is_dropped_after_the_handshake_timeout():
    harness = Harness()
    browser = Browser(harness)
    browser.protocol.dataReceived(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    harness.clock.advance(HANDSHAKE_TIMEOUT - 1)
    assert not browser.transport.disconnecting
    harness.clock.advance(1)
    assert browser.transport.disconnecting


def test_a_finished_handshake_is_not_timed_out():
    harness = Harness()
    browser = Browser(harness)
    browser.handshake(["v12.stomp"])
    browser.send(TextMessage(data=connect_frame()))
    harness.clock.advance(HANDSHAKE_TIMEOUT + 1)
    assert not browser.transport.disconnecting


def test_refused_websocket_requests_are_logged_in_bounds(caplog):
    harness = Harness()
    factory = Browser(harness).protocol.factory  # one listener: its log budget is per client address
    with caplog.at_level(logging.INFO, logger="gateway.stomp"):
        for _ in range(40):
            browser = Browser(harness)
            browser.protocol.factory = factory
            (answer, *_) = browser.handshake(["x" * 3000])  # no STOMP subprotocol
            assert isinstance(answer, RejectConnection) and answer.status_code == 400
    lines = [r.getMessage() for r in caplog.records]
    assert 1 <= len(lines) <= 11 and max(len(line) for line in lines) < 600, [len(line) for line in lines]



