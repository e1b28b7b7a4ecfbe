"""CPU cost of the forwarding path alone, in one process: no sockets, no STOMP.

    .venv/bin/python bench/mesh_path.py [--count 100000] [--repeat 15] [--persistent] [--tls] [--profile]

Node A takes each message from the broker core (``Broker.send``) and forwards it
over a mesh link to node B, which routes it to a local consumer; B's STORED
confirmations go back to A. Bytes move between the two through
``twisted.test.iosim``, as in the protocol tests. The same messages are also sent
through one broker to a local consumer. The difference per message is what
forwarding costs beyond a single node; the socket and STOMP work are the same on
both sides and left out, so the figure is stable on a noisy machine where the
end-to-end ``mesh_pair.sh`` ratio is not. Times are process CPU time, best of
``--repeat`` (as timeit does): what other processes take is not counted.
``--tls`` compares the link in plaintext with the link wrapped in ``[mesh.tls]``'s mutual
TLS (``TlsMaterial``'s factories, certificates of a throw-away CA) instead: the difference
is what TLS adds per message. ``--profile`` prints the top of a cProfile of one
forwarded run (over TLS with ``--tls``)."""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tls_pair import make_certificates
from twisted.internet.protocol import Factory
from twisted.internet.testing import MemoryReactorClock
from twisted.test import iosim

from gateway.broker.broker import Broker
from gateway.broker.message import QUEUE
from gateway.broker.vhosts import VirtualHosts
from gateway.hostile_log import PeerLog
from gateway.selector import compile_selector
from gateway.store.memory import MemoryStore
from gateway.tls import TlsMaterial
from mesh.link import LinkProtocol
from mesh.node import MeshNode
from meshgate.config import MeshConfig

BODY = b"m" * 256
CHUNK = 1000  # messages sent between pumps: the link window (10,000) is never the limit


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def deliver(self, subscription, message) -> None:
        self.count += 1


class _Built(Factory):
    """Hands the TLS factory the link protocol already made."""

    def __init__(self, link: LinkProtocol) -> None:
        self.link = link

    def buildProtocol(self, addr: Any) -> LinkProtocol:  # noqa: N802 (Twisted's name)
        return self.link


def _node(clock: MemoryReactorClock, name: str) -> tuple[Broker, MeshNode]:
    vhosts = VirtualHosts(MemoryStore(), clock=clock, compile_selector=compile_selector)
    broker = vhosts.default
    mesh = MeshNode(MeshConfig(insecure_cluster=True), node_id=str(uuid.uuid4()), name=name, vhosts=vhosts,
                    started_at=clock.seconds(), stomp_address=("127.0.0.1", 0), reactor=clock)
    return broker, mesh


def _settle(clock: MemoryReactorClock, pump: iosim.IOPump) -> None:
    for _ in range(50):
        clock.advance(0)
        if not pump.pump() and not any(c.getTime() <= clock.seconds() for c in clock.getDelayedCalls()):
            return


def forwarded(count: int, persistent: bool, tls: tuple[TlsMaterial, TlsMaterial] | None = None) -> float:
    """CPU seconds to take ``count`` messages from A's core to B's consumer, confirmed;
    ``tls``: (A's, B's) material, or plaintext."""
    clock = MemoryReactorClock()
    broker_a, mesh_a = _node(clock, "a")
    broker_b, mesh_b = _node(clock, "b")
    server: Any = LinkProtocol(mesh_b.links, dialled=False)
    client: Any = LinkProtocol(mesh_a.links, dialled=True)
    if tls is not None:
        log = PeerLog(logging.getLogger("bench.tls"))
        address = iosim.FakeAddress()
        server = tls[1].server_factory(_Built(server), log, clock).buildProtocol(address)
        client = tls[0].client_factory(_Built(client), "127.0.0.1", 1, log, clock).buildProtocol(address)
    pump = iosim.connect(server, iosim.FakeTransport(server, True), client, iosim.FakeTransport(client, False),
                         clock=clock)
    consumer = Counter()
    broker_b.open_session(consumer, "consumer").subscribe("s", QUEUE, "bench", "auto", None, None)
    _settle(clock, pump)
    assert broker_a.queue("bench").remotes, "B's demand did not reach A"
    if tls is not None:
        peer = server.getPeerCertificate()
        assert peer is not None and peer.to_cryptography().subject.rfc4514_string() == "CN=a", "no mutual TLS"
    started = time.process_time()
    for sent in range(0, count, CHUNK):
        for _ in range(min(CHUNK, count - sent)):
            broker_a.send(QUEUE, "bench", {}, BODY, persistent)
        _settle(clock, pump)
    elapsed = time.process_time() - started
    queue = broker_a.queues["bench"]
    assert consumer.count == count and not len(queue) and not queue.inflight, "not every message went through"
    return elapsed


def single(count: int, persistent: bool) -> float:
    clock = MemoryReactorClock()
    broker, _ = _node(clock, "single")
    consumer = Counter()
    broker.open_session(consumer, "consumer").subscribe("s", QUEUE, "bench", "auto", None, None)
    started = time.process_time()
    for sent in range(0, count, CHUNK):
        for _ in range(min(CHUNK, count - sent)):
            broker.send(QUEUE, "bench", {}, BODY, persistent)
        clock.advance(0)
    elapsed = time.process_time() - started
    assert consumer.count == count
    return elapsed


def materials(directory: Path) -> tuple[TlsMaterial, TlsMaterial]:
    make_certificates(directory, ["a", "b"])
    ca = str(directory / "ca.crt")
    return (TlsMaterial(str(directory / "a.crt"), str(directory / "a.key"), ca, ca_name="the mesh CA"),
            TlsMaterial(str(directory / "b.crt"), str(directory / "b.key"), ca, ca_name="the mesh CA"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--tls", action="store_true", help="plaintext link vs mutual TLS link")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    kind = "persistent" if args.persistent else "non-persistent"
    with tempfile.TemporaryDirectory() as directory:
        tls = materials(Path(directory)) if args.tls else None
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.runcall(forwarded, args.count, args.persistent, tls)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
            return
        first, second = [], []
        for _ in range(args.repeat):  # interleaved, so drift on the machine hits both alike
            if tls is not None:
                first.append(forwarded(args.count, args.persistent) / args.count * 1e6)
                second.append(forwarded(args.count, args.persistent, tls) / args.count * 1e6)
            else:
                first.append(forwarded(args.count, args.persistent) / args.count * 1e6)
                second.append(single(args.count, args.persistent) / args.count * 1e6)
    a, b = min(first), min(second)
    if tls is not None:
        print(f"{args.count} x 256 B {kind}, best of {args.repeat}: forwarded A->B in plaintext {a:.2f} us/msg, "
              f"over mutual TLS {b:.2f} us/msg, TLS adds {b - a:.2f} us/msg ({100 * (b - a) / a:.0f} %)")
    else:
        print(f"{args.count} x 256 B {kind}, best of {args.repeat}: "
              f"forwarded A->B {a:.2f} us/msg, one node {b:.2f} us/msg, forwarding adds {a - b:.2f} us/msg")


if __name__ == "__main__":
    main()
