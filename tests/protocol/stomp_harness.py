"""Drive StompProtocol instances over StringTransport with a MemoryReactorClock."""

from __future__ import annotations

from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from gateway.auth import Authenticator, Authorizer
from gateway.broker.broker import Broker
from gateway.selector import compile_selector
from gateway.stomp.codec import Frame, FrameParser, encode_frame
from gateway.stomp.protocol import StompFactory, StompSettings
from gateway.store.memory import MemoryStore


class Harness:
    def __init__(self, settings: StompSettings | None = None, **broker_options) -> None:
        self.clock = MemoryReactorClock()
        self.clock.advance(1_700_000_000)  # a realistic epoch for expires headers
        self.broker = Broker(MemoryStore(), clock=self.clock, compile_selector=compile_selector, **broker_options)
        self.factory = StompFactory(
            self.broker, settings or StompSettings(), Authenticator({}), Authorizer((), enabled=False), self.clock
        )

    def client(self, version: str = "1.2", heart_beat: str = "0,0", transport: StringTransport | None = None,
               **headers: str) -> Client:
        client = Client(self, transport)
        connect = {"accept-version": version, "host": "test", "heart-beat": heart_beat, **headers}
        client.send("CONNECT", connect)
        connected = client.frames()
        assert connected[0].command == "CONNECTED", connected
        client.connected = connected[0]
        client.parser.version = version
        return client


class Client:
    def __init__(self, harness: Harness, transport: StringTransport | None = None) -> None:
        self.harness = harness
        self.protocol = harness.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
        self.transport = transport or StringTransport()
        self.protocol.makeConnection(self.transport)
        self.parser = FrameParser("1.0")
        self.connected: Frame | None = None

    def raw(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    def send(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.raw(encode_frame(command, headers or {}, body, version=self.parser.version))

    def frames(self) -> list[Frame]:
        data = self.transport.value()
        self.transport.clear()
        return self.parser.feed(data)

    def messages(self) -> list[Frame]:
        frames = self.frames()
        assert all(f.command == "MESSAGE" for f in frames), frames
        return frames

    @property
    def closed(self) -> bool:
        return self.transport.disconnecting

    def drop(self) -> None:
        self.protocol.connectionLost(None)
