"""CPU cost of the AMQP gateway's publish and delivery path, in one process: no sockets.

    .venv/bin/python bench/amqp_path.py [--count 100000] [--repeat 7] [--checkout DIR] [--profile]

The traffic of ``amqp_bench.py --scenario publish-256``: one connection publishes
256 B non-persistent messages to a queue, 100 per read; another consumes them with
``basic.qos`` 1000 and acks ``multiple`` every 100. Both are AmqpProtocols of one
AmqpFactory over a real broker core; their transports are Twisted's own
(FileDescriptor's write path, with the socket left out), emptied after each read.
Times are the process CPU time of the reads alone (the gateway and the core), per
message: best and median of ``--repeat`` runs after one warm-up, so other
processes on the machine hardly move it. ``--checkout`` imports Meshgate from
another checkout, to compare commits; ``--profile`` prints the top of a cProfile
of one run."""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import time


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100000, help="messages per run (a multiple of 100)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--checkout", help="import gateway/ from this checkout")
    parser.add_argument("--profile", action="store_true")
    return parser.parse_args()


ARGS = _arguments()
if ARGS.checkout:
    sys.path.insert(0, ARGS.checkout)

from twisted.internet import reactor  # noqa: E402
from twisted.internet._newtls import ConnectionMixin  # noqa: E402
from twisted.internet.abstract import FileDescriptor  # noqa: E402
from twisted.internet.address import IPv4Address  # noqa: E402
from twisted.internet.task import Clock  # noqa: E402

from gateway.amqp.codec import encode_method  # noqa: E402
from gateway.amqp.protocol import AmqpFactory, AmqpSettings  # noqa: E402
from gateway.broker.broker import Broker  # noqa: E402
from gateway.store.memory import MemoryStore  # noqa: E402

BATCH = 100  # publishes per read, deliveries acked per basic.ack
_CONTENT = struct.Struct(">BHIHHQHB")  # header frame head, class, weight, body size, flags, delivery_mode


class Transport(ConnectionMixin, FileDescriptor):
    """A TCP transport's write path (ConnectionMixin, FileDescriptor) with no socket."""

    TLS = False
    connected = 1

    def __init__(self) -> None:
        FileDescriptor.__init__(self, reactor)

    def startWriting(self) -> None:
        pass

    def stopWriting(self) -> None:
        pass

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def loseConnection(self) -> None:
        pass

    def getPeer(self) -> IPv4Address:
        return IPv4Address("TCP", "127.0.0.1", 1)

    def setTcpNoDelay(self, enabled: bool) -> None:
        pass

    def drain(self) -> int:
        """Empty the buffer as a socket taking everything would; the bytes it held."""
        size = self._tempDataLen + len(self.dataBuffer)
        self._tempDataBuffer, self._tempDataLen, self.dataBuffer = [], 0, b""
        if self.producerPaused:
            self.producerPaused = False
            self.producer.resumeProducing()
        return size


class Anonymous:
    anonymous = True


def _open(factory: AmqpFactory):
    protocol = factory.buildProtocol(None)
    transport = Transport()
    protocol.makeConnection(transport)
    protocol.dataReceived(b"AMQP\x00\x00\x09\x01")
    protocol.dataReceived(encode_method(0, "connection.start_ok", client_properties={}, mechanism="PLAIN",
                                        response=b"\x00guest\x00guest", locale="en_US"))
    protocol.dataReceived(encode_method(0, "connection.tune_ok", channel_max=2047, frame_max=131072, heartbeat=0))
    protocol.dataReceived(encode_method(0, "connection.open", virtual_host="/"))
    protocol.dataReceived(encode_method(1, "channel.open"))
    transport.drain()
    return protocol, transport


def _publish(queue: str, body: bytes) -> bytes:
    method = encode_method(1, "basic.publish", exchange="", routing_key=queue)
    header = _CONTENT.pack(2, 1, 15, 60, 0, len(body), 1 << 12, 1) + b"\xce"
    return method + header + struct.pack(">BHI", 3, 1, len(body)) + body + b"\xce"


def run(count: int, profile: bool = False) -> float:
    """CPU seconds per message to publish, deliver and ack ``count`` messages."""
    clock = Clock()
    broker = Broker(MemoryStore())
    factory = AmqpFactory(broker, AmqpSettings(), Anonymous(), None, clock, "bench")
    publisher, publisher_out = _open(factory)
    consumer, consumer_out = _open(factory)
    publisher.dataReceived(encode_method(1, "queue.declare", queue="q", arguments={}))
    consumer.dataReceived(encode_method(1, "basic.qos", prefetch_count=1000))
    consumer.dataReceived(encode_method(1, "basic.consume", queue="q", consumer_tag="c", arguments={}))
    publisher_out.drain()
    consumer_out.drain()
    reads = _publish("q", b"x" * 256) * BATCH
    acks = [encode_method(1, "basic.ack", delivery_tag=tag, multiple=True)
            for tag in range(BATCH, count + 1, BATCH)]
    delivered = 0
    spent = 0.0
    if profile:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    for ack in acks:
        started = time.process_time()
        publisher.dataReceived(reads)
        clock.advance(0)
        spent += time.process_time() - started
        delivered += consumer_out.drain()
        started = time.process_time()
        consumer.dataReceived(ack)
        clock.advance(0)
        spent += time.process_time() - started
        publisher_out.drain()
        consumer_out.drain()
    if profile:
        import pstats
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    queue = broker.queues["q"]
    assert not len(queue) and queue.acked == count, (len(queue), queue.acked)
    assert delivered > count * 256, delivered
    return spent / count


def main() -> None:
    if ARGS.count % BATCH:
        sys.exit(f"--count must be a multiple of {BATCH}")
    import gateway
    print(f"Meshgate from {gateway.__file__.rsplit('/gateway/', 1)[0]}: {ARGS.count} messages a run")
    if ARGS.profile:
        run(ARGS.count, profile=True)
        return
    run(ARGS.count)  # warm-up
    runs = [run(ARGS.count) * 1e6 for _ in range(ARGS.repeat)]
    print("µs/msg per run: " + " ".join(f"{value:.2f}" for value in runs))
    print(f"best {min(runs):.2f} µs/msg, median {statistics.median(runs):.2f} µs/msg")


if __name__ == "__main__":
    main()
