"""CPU cost of message journeys (docs/journeys.md) on the STOMP path, in one process: no sockets.

    .venv/bin/python bench/journeys_cost.py [--count 50000] [--rounds 5] [--checkout DIR]

The traffic of ``stomp_path.py`` (``stomp_bench.py --scenario queue-256``: 256 B
non-persistent SENDs to a queue, 100 per read, taken by an ``ack:auto`` consumer), run
in four modes, interleaved round by round (A B C D, then D C B A, …):

- ``off``: no ``[journeys]`` (the broker has no tracer): the default;
- ``on``: ``[journeys]`` on, nothing traced (no header, nothing armed);
- ``sample-1%``: ``trace_next`` armed on the queue with ``every = 100``;
- ``all``: armed with ``every = 1``: every message traced.

The records go to a real JourneyStore with the default bounds of ``[journeys]``
(200,000 records, 64 MiB: the oldest are evicted, as on a busy node). Prints µs per
message (median of the rounds, each the process CPU time of the reads alone), the cost
against ``off``, and the records per traced message. ``--checkout`` imports Meshgate
from another checkout."""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50000, help="messages per run (a multiple of 100)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checkout", help="import Meshgate from this checkout")
    return parser.parse_args()


ARGS = _arguments()
if ARGS.checkout:
    sys.path.insert(0, ARGS.checkout)

from inprocess_stomp import open_connection  # noqa: E402
from twisted.internet.task import Clock  # noqa: E402

from gateway.auth import Authenticator, Authorizer  # noqa: E402
from gateway.broker.broker import Broker  # noqa: E402
from gateway.broker.tracing import Tracer  # noqa: E402
from gateway.stomp.protocol import StompFactory, StompSettings  # noqa: E402
from gateway.store.memory import MemoryStore  # noqa: E402
from management.journeys import JourneyStore  # noqa: E402

BATCH = 100
MODES = {"off": None, "on": 0, "sample-1%": 100, "all": 1}  # mode -> every (0: nothing armed)


def run(count: int, every: int | None) -> tuple[float, int, int]:
    """CPU seconds per message, the records made and the messages traced."""
    clock = Clock()
    broker = Broker(MemoryStore())
    store = JourneyStore(200_000, 64 * 1024 * 1024, 3600, clock.seconds)
    if every is not None:
        broker.tracer = Tracer(store, "bench-node", "bench", clock.seconds)
        if every:
            broker.tracer.arm("queue", "q", every, None, 3600)
    factory = StompFactory(broker, StompSettings(), Authenticator({}), Authorizer((), enabled=False), clock)
    _, consumer_out = open_connection(factory, "1.2", b"SUBSCRIBE\nid:s\ndestination:/queue/q\nack:auto\n\n\0")
    producer, producer_out = open_connection(factory)
    body = b"x" * 256
    read = b"".join(f"SEND\ndestination:/queue/q\nbench-ts:{time.time_ns()}\ncontent-length:256\n\n".encode()
                    + body + b"\0" for _ in range(BATCH))
    spent = 0.0
    for _ in range(count // BATCH):
        started = time.process_time()
        producer.dataReceived(read)
        clock.advance(0)
        spent += time.process_time() - started
        consumer_out.clear()
        producer_out.clear()
    assert not len(broker.queues["q"])
    return spent / count, store.recorded, count // every if every else 0


def main() -> None:
    if ARGS.count % BATCH:
        sys.exit(f"--count must be a multiple of {BATCH}")
    import gateway
    print(f"Meshgate from {gateway.__file__.rsplit('/gateway/', 1)[0]}: {ARGS.count} messages a run, "
          f"{ARGS.rounds} rounds")
    order = list(MODES)
    for mode in order:
        run(ARGS.count // 5, MODES[mode])  # warm-up
    times: dict[str, list[float]] = {mode: [] for mode in order}
    records: dict[str, tuple[int, int]] = {}
    for round_number in range(ARGS.rounds):
        for mode in order if round_number % 2 == 0 else reversed(order):
            per_message, made, traced = run(ARGS.count, MODES[mode])
            times[mode].append(per_message * 1e6)
            records[mode] = (made, traced)
    off = statistics.median(times["off"])
    print("| mode | µs/msg per round | median | cost vs off | records per traced message |")
    print("|---|---|---:|---:|---:|")
    for mode in order:
        median = statistics.median(times[mode])
        made, traced = records[mode]
        per_traced = f"{made / traced:.1f}" if traced else "-"
        print(f"| {mode} | {' '.join(f'{t:.2f}' for t in times[mode])} | {median:.2f} | "
              f"{(median / off - 1) * 100:+.1f} % | {per_traced} |")


if __name__ == "__main__":
    main()
