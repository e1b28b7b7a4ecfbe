"""Drive AmqpProtocol instances over StringTransport with a MemoryReactorClock: a
client's bytes in, the node's frames read back with pika's own decoder."""

from __future__ import annotations

import pika.frame
import pika.spec
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from gateway.amqp.codec import encode_method
from gateway.amqp.protocol import AmqpFactory, AmqpSettings
from gateway.auth import Authenticator, Authorizer
from gateway.broker.broker import Broker
from gateway.selector import compile_selector
from gateway.store.memory import MemoryStore
from tests.amqp_inputs import PROTOCOL_HEADER, start_ok


class AmqpHarness:
    def __init__(self, settings: AmqpSettings | None = None, **broker_options) -> None:
        self.clock = MemoryReactorClock()
        self.broker = Broker(MemoryStore(), clock=self.clock, compile_selector=compile_selector, **broker_options)
        self.factory = AmqpFactory(self.broker, settings or AmqpSettings(), Authenticator({}),
                                   Authorizer((), enabled=False), self.clock, "test")

    def client(self, host: str = "127.0.0.1", port: int = 5555) -> AmqpClient:
        """A client that sent the protocol header and read connection.start."""
        client = AmqpClient(self, host, port)
        client.raw(PROTOCOL_HEADER)
        (start,) = client.methods()
        assert isinstance(start, pika.spec.Connection.Start), start
        return client

    def opened(self, host: str = "127.0.0.1", port: int = 5555, client_properties: bytes | None = None) -> AmqpClient:
        """A client through the handshake (anonymous login), its connection open."""
        client = self.client(host, port)
        client.raw(start_ok() if client_properties is None else start_ok(client_properties))
        client.raw(encode_method(0, "connection.tune_ok", channel_max=2047, frame_max=131072, heartbeat=0))
        client.raw(encode_method(0, "connection.open", virtual_host="/"))
        methods = client.methods()
        assert isinstance(methods[-1], pika.spec.Connection.OpenOk), methods
        return client


class AmqpClient:
    def __init__(self, harness: AmqpHarness, host: str, port: int) -> None:
        address = IPv4Address("TCP", host, port)
        self.protocol = harness.factory.buildProtocol(address)
        self.transport = StringTransport(peerAddress=address)
        self.protocol.makeConnection(self.transport)
        self._unread = b""

    def raw(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    def methods(self) -> list:
        """The methods the node wrote since the last call (pika's classes), in order."""
        data = self._unread + self.transport.value()
        self.transport.clear()
        methods = []
        while data:
            consumed, frame = pika.frame.decode_frame(data)
            if not consumed:
                break
            data = data[consumed:]
            if isinstance(frame, pika.frame.Method):
                methods.append(frame.method)
        self._unread = data
        return methods

    def close(self) -> pika.spec.Connection.Close:
        """The connection.close the node sent (the last thing it sent)."""
        methods = self.methods()
        assert methods and isinstance(methods[-1], pika.spec.Connection.Close), methods
        assert self.protocol.state == "closing"
        return methods[-1]

    def drop(self) -> None:
        """The socket is gone (what loseConnection leads to on a real transport)."""
        self.protocol.connectionLost(None)
