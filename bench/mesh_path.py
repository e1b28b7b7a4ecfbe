"""CPU cost of the forwarding path alone, in one process: no sockets, no STOMP.

    .venv/bin/python bench/mesh_path.py [--count 100000] [--repeat 15] [--persistent] [--profile]

Node A takes each message from the broker core (``Broker.send``) and forwards it
over a mesh link to node B, which routes it to a local consumer; B's STORED
confirmations go back to A. Bytes move between the two through
``twisted.test.iosim``, as in the protocol tests. The same messages are also sent
through one broker to a local consumer. The difference per message is what
forwarding costs beyond a single node; the socket and STOMP work are the same on
both sides and left out, so the figure is stable on a noisy machine where the
end-to-end ``mesh_pair.sh`` ratio is not. Times are process CPU time, best of
``--repeat`` (as timeit does): what other processes take is not counted.
``--profile`` prints the top of a cProfile of one forwarded run."""

from __future__ import annotations

import argparse
import time
import uuid

from twisted.internet.testing import MemoryReactorClock
from twisted.test import iosim

from gateway.broker.broker import Broker
from gateway.broker.message import QUEUE
from gateway.selector import compile_selector
from gateway.store.memory import MemoryStore
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


def _node(clock: MemoryReactorClock, name: str) -> tuple[Broker, MeshNode]:
    broker = Broker(MemoryStore(), clock=clock, compile_selector=compile_selector)
    mesh = MeshNode(MeshConfig(insecure_cluster=True), node_id=str(uuid.uuid4()), name=name, broker=broker,
                    started_at=clock.seconds(), stomp_address=("127.0.0.1", 0), reactor=clock)
    return broker, mesh


def _settle(clock: MemoryReactorClock, pump: iosim.IOPump) -> None:
    for _ in range(50):
        clock.advance(0)
        if not pump.pump() and not any(c.getTime() <= clock.seconds() for c in clock.getDelayedCalls()):
            return


def forwarded(count: int, persistent: bool) -> float:
    """CPU seconds to take ``count`` messages from A's core to B's consumer, confirmed."""
    clock = MemoryReactorClock()
    broker_a, mesh_a = _node(clock, "a")
    broker_b, mesh_b = _node(clock, "b")
    server, client = LinkProtocol(mesh_b.links, dialled=False), LinkProtocol(mesh_a.links, dialled=True)
    pump = iosim.connect(server, iosim.FakeTransport(server, True), client, iosim.FakeTransport(client, False),
                         clock=clock)
    consumer = Counter()
    broker_b.open_session(consumer, "consumer").subscribe("s", QUEUE, "bench", "auto", None, None)
    _settle(clock, pump)
    assert broker_a.queue("bench").remotes, "B's demand did not reach A"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(forwarded, args.count, args.persistent)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    pair, alone = [], []
    for _ in range(args.repeat):  # interleaved, so drift on the machine hits both alike
        pair.append(forwarded(args.count, args.persistent) / args.count * 1e6)
        alone.append(single(args.count, args.persistent) / args.count * 1e6)
    kind = "persistent" if args.persistent else "non-persistent"
    p, s = min(pair), min(alone)
    print(f"{args.count} x 256 B {kind}, best of {args.repeat}: "
          f"forwarded A->B {p:.2f} us/msg, one node {s:.2f} us/msg, forwarding adds {p - s:.2f} us/msg")


if __name__ == "__main__":
    main()
