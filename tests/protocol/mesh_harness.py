"""Brokers joined by mesh links over twisted.test.iosim, on one MemoryReactorClock:
no sockets, every byte pumped by hand."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from twisted.internet.testing import MemoryReactorClock
from twisted.test import iosim

from gateway.broker.message import QUEUE
from gateway.broker.vhosts import VirtualHosts
from gateway.selector import compile_selector
from gateway.store.memory import MemoryStore
from gateway.store.records import split_key
from mesh.link import LinkProtocol
from mesh.node import MeshNode
from meshgate.config import MeshConfig


class Sink:
    """A local client's end of a session: collects what the broker delivers."""

    def __init__(self) -> None:
        self.messages = []

    def deliver(self, subscription, message) -> None:
        self.messages.append(message)

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


class KeepingStore(MemoryStore):
    """A memory store that hands back what it holds when a node "restarts" on it,
    as a journal does after a crash (every write counts as synced)."""

    def recover(self):
        for (key, _), message in list(self.messages.items()):
            twin = message.copy()
            twin.headers = dict(message.headers)
            yield key, twin


class SimNode:
    def __init__(self, harness: MeshHarness, name: str, node_id: str | None = None, vhosts: Iterable[str] = (),
                 **config) -> None:
        self.name = name
        self.vhost_names = tuple(vhosts)  # the vhosts of the node's configuration, beside "/"
        self.harness = harness
        self.config = {"insecure_cluster": True, **harness.defaults, **config}
        self.boots = 0
        self._boot(KeepingStore(), node_id or str(uuid.uuid4()))

    def _boot(self, store: KeepingStore, node_id: str) -> None:
        clock = self.harness.clock
        self.boots += 1
        # Ids unique across nodes and boots, as meshgate.node makes them.
        self.vhosts = VirtualHosts(store, self.vhost_names, clock=clock,
                                   compile_selector=compile_selector, message_id_prefix=f"{self.name}-{self.boots}-")
        self.broker = self.vhosts.default
        self.mesh = MeshNode(MeshConfig(**self.config), node_id=node_id, name=self.name, vhosts=self.vhosts,
                             started_at=clock.seconds(), stomp_address=("127.0.0.1", 0), reactor=clock)

    def restart(self) -> None:
        """Crash and start again on the same store, as meshgate.node does (links must be cut first)."""
        assert not self.mesh.peers, "cut this node's links before restarting it"
        self._boot(self.broker.store, self.mesh.node_id)
        self.vhosts.recover()
        self.mesh.hold_recovered()

    def consumer(self, address: str, ack: str = "auto", selector: str | None = None, kind: str = QUEUE,
                 vhost: str = "/"):
        sink = Sink()
        session = self.vhosts.brokers[vhost].open_session(sink, f"{self.name}-client-{uuid.uuid4().hex[:6]}")
        session.subscribe("s", kind, address, ack, None, selector)
        return session, sink

    def send(self, address: str, body: bytes, kind: str = QUEUE, persistent: bool = True, vhost: str = "/",
             **headers) -> None:
        self.vhosts.brokers[vhost].send(kind, address, dict(headers), body, persistent)

    @property
    def stored(self) -> list[str]:
        """Ids of the messages in this node's store (not the mesh's bookkeeping records)."""
        kept = []
        for key, message_id in self.broker.store.messages:
            vhost, queue_key = split_key(key)
            if (queue_key if vhost is not None else key)[:2] in ("Q:", "L:", "D:"):
                kept.append(message_id)
        return kept

    def depth(self, address: str) -> int:
        queue = self.broker.queues.get(address)
        return 0 if queue is None else len(queue) + queue.inflight


class MeshHarness:
    def __init__(self, **defaults) -> None:
        self.clock = MemoryReactorClock()
        self.defaults = defaults
        self.pumps: list[iosim.IOPump] = []

    def node(self, name: str, vhosts: Iterable[str] = (), **config) -> SimNode:
        return SimNode(self, name, vhosts=vhosts, **config)

    def link(self, dialler: SimNode, acceptor: SimNode) -> iosim.IOPump:
        server = LinkProtocol(acceptor.mesh.links, dialled=False)
        client = LinkProtocol(dialler.mesh.links, dialled=True)
        pump = iosim.connect(server, iosim.FakeTransport(server, True), client, iosim.FakeTransport(client, False),
                             clock=self.clock)
        self.pumps.append(pump)
        self.settle()
        return pump

    def cut(self, pump: iosim.IOPump) -> None:
        pump.client.transport.loseConnection()
        self.settle()
        self.pumps.remove(pump)

    def scale_down(self, *nodes: SimNode) -> bool:
        """Run the nodes' scale-downs together on the clock; whether all finished within two seconds."""
        done = []
        for node in nodes:
            node.mesh.scale_down().addCallback(done.append)
        for _ in range(40):
            self.settle()
            self.clock.advance(0.05)
        return len(done) == len(nodes)

    def settle(self, rounds: int = 50) -> None:
        """Run the reactor's zero-delay calls and move every byte until nothing moves."""
        for _ in range(rounds):
            self.clock.advance(0)
            moved = False
            for pump in list(self.pumps):
                moved = pump.pump() or moved
            if not moved and not any(call.getTime() <= self.clock.seconds() for call in self.clock.getDelayedCalls()):
                return
