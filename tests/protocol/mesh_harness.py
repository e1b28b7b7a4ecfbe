"""Brokers joined by mesh links over twisted.test.iosim, on one MemoryReactorClock:
no sockets, every byte pumped by hand."""

from __future__ import annotations

import uuid

from twisted.internet.testing import MemoryReactorClock
from twisted.test import iosim

from gateway.broker.broker import Broker
from gateway.broker.message import QUEUE
from gateway.config import MeshConfig
from gateway.selector import compile_selector
from gateway.store.memory import MemoryStore
from mesh.link import LinkProtocol
from mesh.node import MeshNode


class Sink:
    """A local client's end of a session: collects what the broker delivers."""

    def __init__(self) -> None:
        self.messages = []

    def deliver(self, subscription, message) -> None:
        self.messages.append(message)

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


class SimNode:
    def __init__(self, harness: MeshHarness, name: str, **config) -> None:
        self.name = name
        self.broker = Broker(MemoryStore(), clock=harness.clock, compile_selector=compile_selector)
        options = {"insecure_cluster": True, **harness.defaults, **config}
        self.mesh = MeshNode(MeshConfig(**options), node_id=str(uuid.uuid4()), name=name, broker=self.broker,
                             started_at=harness.clock.seconds(), stomp_address=("127.0.0.1", 0),
                             reactor=harness.clock)

    def consumer(self, address: str, ack: str = "auto", selector: str | None = None, kind: str = QUEUE):
        sink = Sink()
        session = self.broker.open_session(sink, f"{self.name}-client-{uuid.uuid4().hex[:6]}")
        session.subscribe("s", kind, address, ack, None, selector)
        return session, sink

    def send(self, address: str, body: bytes, kind: str = QUEUE, persistent: bool = True, **headers) -> None:
        self.broker.send(kind, address, dict(headers), body, persistent)

    def depth(self, address: str) -> int:
        queue = self.broker.queues.get(address)
        return 0 if queue is None else len(queue) + queue.inflight


class MeshHarness:
    def __init__(self, **defaults) -> None:
        self.clock = MemoryReactorClock()
        self.defaults = defaults
        self.pumps: list[iosim.IOPump] = []

    def node(self, name: str, **config) -> SimNode:
        return SimNode(self, name, **config)

    def link(self, dialler: SimNode, acceptor: SimNode) -> iosim.IOPump:
        server = LinkProtocol(acceptor.mesh, dialled=False)
        client = LinkProtocol(dialler.mesh, dialled=True)
        pump = iosim.connect(server, iosim.FakeTransport(server, True), client, iosim.FakeTransport(client, False),
                             clock=self.clock)
        self.pumps.append(pump)
        self.settle()
        return pump

    def cut(self, pump: iosim.IOPump) -> None:
        pump.client.transport.loseConnection()
        self.settle()
        self.pumps.remove(pump)

    def settle(self, rounds: int = 50) -> None:
        """Run the reactor's zero-delay calls and move every byte until nothing moves."""
        for _ in range(rounds):
            self.clock.advance(0)
            moved = False
            for pump in list(self.pumps):
                moved = pump.pump() or moved
            if not moved and not any(call.getTime() <= self.clock.seconds() for call in self.clock.getDelayedCalls()):
                return
