"""CPU cost of the STOMP gateway's SEND and MESSAGE path, in one process: no sockets.

    .venv/bin/python bench/stomp_path.py [--version 1.2] [--headers N] [--count 100000] [--repeat 7]
                                         [--checkout DIR]

The traffic of ``stomp_bench.py --scenario queue-256``: a STOMP 1.2 connection SENDs
256 B non-persistent messages to a queue, 100 per read, each with a ``bench-ts``
header (and ``--headers`` more, as an AMQP publisher's properties would add); a
connection of STOMP ``--version`` subscribed with ``ack:auto`` takes them. Both are
StompProtocols of one StompFactory over a real broker core, on Twisted's
StringTransport, emptied after each read. Times are the process CPU time of the
reads alone (parsing, routing, MESSAGE encoding, writing), per message: best and
median of ``--repeat`` runs after one warm-up, so other processes on the machine
hardly move it. ``--checkout`` imports Meshgate from another checkout, to compare
commits."""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="1.2", choices=["1.0", "1.1", "1.2"], help="the consumer's")
    parser.add_argument("--headers", type=int, default=0, help="headers per SEND besides bench-ts")
    parser.add_argument("--count", type=int, default=100000, help="messages per run (a multiple of 100)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--checkout", help="import gateway/ from this checkout")
    return parser.parse_args()


ARGS = _arguments()
if ARGS.checkout:
    sys.path.insert(0, ARGS.checkout)

from inprocess_stomp import open_connection  # noqa: E402
from twisted.internet.task import Clock  # noqa: E402

from gateway.auth import Authenticator, Authorizer  # noqa: E402
from gateway.broker.broker import Broker  # noqa: E402
from gateway.stomp.protocol import StompFactory, StompSettings  # noqa: E402
from gateway.store.memory import MemoryStore  # noqa: E402

BATCH = 100  # SENDs per read


def _sends(count: int, extra: int) -> bytes:
    headers = "".join(f"property-{i}:value-{i}\n" for i in range(extra))
    body = b"x" * 256
    return b"".join(
        f"SEND\ndestination:/queue/q\nbench-ts:{time.time_ns()}\n{headers}content-length:256\n\n".encode() + body
        + b"\0" for _ in range(count))


def run(count: int, version: str, extra: int) -> float:
    """CPU seconds per message to SEND ``count`` messages and deliver them."""
    clock = Clock()
    broker = Broker(MemoryStore())
    factory = StompFactory(broker, StompSettings(), Authenticator({}), Authorizer((), enabled=False), clock)
    _, consumer_out = open_connection(factory, version, b"SUBSCRIBE\nid:s\ndestination:/queue/q\nack:auto\n\n\0")
    producer, producer_out = open_connection(factory, "1.2")
    read = _sends(BATCH, extra)
    delivered = 0
    spent = 0.0
    for _ in range(count // BATCH):
        started = time.process_time()
        producer.dataReceived(read)
        clock.advance(0)
        spent += time.process_time() - started
        delivered += len(consumer_out.value())
        consumer_out.clear()
        producer_out.clear()
    assert delivered > count * 256 and not len(broker.queues["q"]), delivered
    return spent / count


def main() -> None:
    if ARGS.count % BATCH:
        sys.exit(f"--count must be a multiple of {BATCH}")
    import gateway
    print(f"Meshgate from {gateway.__file__.rsplit('/gateway/', 1)[0]}: {ARGS.count} messages a run, "
          f"consumer STOMP {ARGS.version}, {1 + ARGS.headers} header(s) per SEND")
    run(ARGS.count, ARGS.version, ARGS.headers)  # warm-up
    runs = [run(ARGS.count, ARGS.version, ARGS.headers) * 1e6 for _ in range(ARGS.repeat)]
    print("µs/msg per run: " + " ".join(f"{value:.2f}" for value in runs))
    print(f"best {min(runs):.2f} µs/msg, median {statistics.median(runs):.2f} µs/msg")


if __name__ == "__main__":
    main()
