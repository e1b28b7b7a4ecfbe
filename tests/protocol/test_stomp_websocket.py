"""STOMP over WebSocket (gateway/stomp/websocket.py) over StringTransport: a
wsproto client on the other end, the handshake, subprotocols, origins, frames
split and batched across messages, binary bodies, pings and closing."""

from __future__ import annotations

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from gateway.stomp.codec import FrameParser, encode_frame
from gateway.stomp.websocket import WebSocketSettings, WebSocketStompFactory
from tests.protocol.stomp_harness import Harness


class Browser:
    """A WebSocket client (wsproto) talking to the server protocol over StringTransport."""

    def __init__(self, harness: Harness, settings: WebSocketSettings | None = None) -> None:
        self.factory = WebSocketStompFactory(harness.factory, settings or WebSocketSettings())
        self.protocol = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 5555))
        self.protocol.makeConnection(self.transport)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.parser = FrameParser("1.2")

    def handshake(self, subprotocols: list[str] | None = None, origin: str | None = None) -> list:
        headers = [(b"origin", origin.encode())] if origin else []
        self.protocol.dataReceived(self.ws.send(Request(host="127.0.0.1", target="/ws", subprotocols=subprotocols or [],
                                                        extra_headers=headers)))
        return self.events()

    def events(self) -> list:
        self.ws.receive_data(self.transport.value())
        self.transport.clear()
        return list(self.ws.events())

    def send(self, *messages: Message) -> None:
        self.protocol.dataReceived(b"".join(self.ws.send(message) for message in messages))

    def frames(self) -> list:
        """Each message received, parsed: (message kind, the STOMP frames in it)."""
        return [(type(e).__name__, self.parser.feed(e.data.encode() if isinstance(e, TextMessage) else e.data))
                for e in self.events() if isinstance(e, TextMessage | BytesMessage)]


def connect_frame(**headers) -> str:
    return encode_frame("CONNECT", {"accept-version": "1.2", "host": "test", "heart-beat": "0,0", **headers},
                        version="1.2").decode()


def test_the_handshake_picks_the_newest_stomp_subprotocol_and_stomp_runs_in_messages():
    browser = Browser(Harness())
    (accepted,) = browser.handshake(["v10.stomp", "v11.stomp", "v12.stomp"])
    assert isinstance(accepted, AcceptConnection) and accepted.subprotocol == "v12.stomp"
    browser.send(TextMessage(data=connect_frame()))
    ((kind, (connected,)),) = browser.frames()
    assert kind == "TextMessage" and connected.command == "CONNECTED" and connected.headers["version"] == "1.2"


def test_frames_split_across_messages_and_batched_in_one_are_read_alike():
    browser = Browser(Harness())
    browser.handshake(["v12.stomp"])
    frame = connect_frame()
    browser.send(TextMessage(data=frame[:7]), TextMessage(data=frame[7:20]), TextMessage(data=frame[20:]))
    assert [f.command for _, frames in browser.frames() for f in frames] == ["CONNECTED"]
    subscribe = encode_frame("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "auto"}, version="1.2")
    sends = b"".join(encode_frame("SEND", {"destination": "/queue/q", "receipt": f"r{i}"}, b"body %d" % i,
                                  version="1.2") for i in range(3))
    browser.send(TextMessage(data=(subscribe + sends).decode()))  # four frames in one message
    received = browser.frames()
    assert all(len(frames) == 1 for _, frames in received)  # one frame a message, out
    commands = sorted((f.command, f.body) for _, frames in received for f in frames)
    assert commands == sorted([("MESSAGE", b"body 0"), ("MESSAGE", b"body 1"), ("MESSAGE", b"body 2"),
                               ("RECEIPT", b""), ("RECEIPT", b""), ("RECEIPT", b"")])


def test_a_binary_body_goes_out_as_a_binary_message_and_binary_messages_are_read():
    browser = Browser(Harness())
    browser.handshake()
    browser.send(BytesMessage(data=connect_frame().encode()))
    browser.frames()
    body = bytes(range(256))
    browser.send(BytesMessage(data=encode_frame("SUBSCRIBE", {"id": "s", "destination": "/queue/b"}, version="1.2")
                              + encode_frame("SEND", {"destination": "/queue/b", "content-length": "256"}, body,
                                             version="1.2")))
    ((kind, (message,)),) = browser.frames()
    assert kind == "BytesMessage" and message.body == body


def test_a_client_offering_no_subprotocol_is_accepted_and_one_offering_only_others_refused():
    (accepted,) = Browser(Harness()).handshake()
    assert isinstance(accepted, AcceptConnection) and accepted.subprotocol is None
    browser = Browser(Harness())
    rejected, *data = browser.handshake(["mqtt"])
    assert isinstance(rejected, RejectConnection) and rejected.status_code == 400
    assert all(isinstance(part, RejectData) for part in data) and b"v12.stomp" in b"".join(d.data for d in data)
    assert browser.transport.disconnecting


@pytest.mark.parametrize(("origins", "origin", "allowed"), [
    (("*",), "https://anywhere.example", True),
    (("https://app.example",), "https://app.example", True),
    (("https://app.example",), "https://evil.example", False),
    (("https://app.example",), None, True),  # not a browser: no Origin to check
])
def test_allowed_origins_decide_which_pages_may_connect(origins, origin, allowed):
    browser = Browser(Harness(), WebSocketSettings(allowed_origins=origins))
    answer = browser.handshake(["v12.stomp"], origin=origin)[0]
    if allowed:
        assert isinstance(answer, AcceptConnection)
    else:
        assert isinstance(answer, RejectConnection) and answer.status_code == 403


def test_a_plain_http_request_gets_a_400_and_no_stomp_connection():
    harness = Harness()
    browser = Browser(harness)
    browser.protocol.dataReceived(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert browser.transport.value().startswith(b"HTTP/1.1 400")
    assert browser.transport.disconnecting and not harness.factory.connections


def test_pings_are_answered_and_a_close_closes_the_stomp_session():
    harness = Harness()
    browser = Browser(harness)
    browser.handshake(["v12.stomp"])
    browser.send(TextMessage(data=connect_frame()))
    browser.frames()
    assert len(harness.factory.connections) == 1
    browser.send(Ping(payload=b"hi"))
    assert [type(e) for e in browser.events()] == [Pong]
    browser.send(CloseConnection(code=1000))
    assert [type(e) for e in browser.events()] == [CloseConnection]
    assert browser.transport.disconnecting
    browser.protocol.connectionLost(None)
    assert not harness.factory.connections


def test_a_stomp_error_closes_the_websocket_after_the_error_frame():
    browser = Browser(Harness())
    browser.handshake(["v12.stomp"])
    browser.send(TextMessage(data="NONSENSE\n\n\0"))
    events = browser.events()
    assert isinstance(events[0], TextMessage) and events[0].data.startswith("ERROR")
    assert isinstance(events[1], CloseConnection) and events[1].code == 1000
    assert browser.transport.disconnecting
