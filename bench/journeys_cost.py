"""CPU cost of message journeys (docs/journeys.md) on the STOMP path, in one process: no sockets.

    .venv/bin/python bench/journeys_cost.py [--count 50000] [--rounds 5] [--checkout DIR]
    .venv/bin/python bench/journeys_cost.py --paired 2000 --rounds 300 [--checkout DIR]

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

BATCH = 100
MODES = {"off": None, "on": 0, "sample-1%": 100, "all": 1}  # mode -> every (0: nothing armed)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50000, help="messages per run (a multiple of 100)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paired", type=int, metavar="SLICE",
                        help="keep one broker a mode and feed them SLICE messages in turn, --rounds times")
    parser.add_argument("--modes", default=",".join(MODES), help="which modes, by name, comma-separated")
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

try:
    from meshgate.cli import tune_gc  # noqa: E402
except ImportError:  # a --checkout from before it was public
    from meshgate.cli import _tune_gc as tune_gc  # type: ignore[attr-defined,no-redef]  # noqa: E402


class Rig:
    """One broker in one mode, its STOMP producer and ``ack:auto`` consumer connected."""

    def __init__(self, every: int | None) -> None:
        self.clock = Clock()
        self.broker = Broker(MemoryStore())
        self.store = JourneyStore(200_000, 64 * 1024 * 1024, 3600, self.clock.seconds)
        self.every = every
        if every is not None:
            self.broker.tracer = Tracer(self.store, "bench-node", "bench", self.clock.seconds)
            if every:
                if hasattr(self.broker, "trace_next"):
                    self.broker.trace_next("queue", "q", every, None, 3600)
                else:  # a --checkout from before it
                    self.broker.tracer.arm("queue", "q", every, None, 3600)  # type: ignore[call-arg]
        factory = StompFactory(self.broker, StompSettings(), Authenticator({}), Authorizer((), enabled=False),
                               self.clock)
        _, self.consumer_out = open_connection(
            factory, "1.2", b"SUBSCRIBE\nid:s\ndestination:/queue/q\nack:auto\n\n\0")
        self.producer, self.producer_out = open_connection(factory)
        body = b"x" * 256
        self.read = b"".join(f"SEND\ndestination:/queue/q\nbench-ts:{time.time_ns()}\ncontent-length:256\n\n"
                             .encode() + body + b"\0" for _ in range(BATCH))

    def feed(self, count: int) -> float:
        """CPU seconds the reads of ``count`` messages took."""
        spent = 0.0
        for _ in range(count // BATCH):
            started = time.process_time()
            self.producer.dataReceived(self.read)
            self.clock.advance(0)
            spent += time.process_time() - started
            self.consumer_out.clear()
            self.producer_out.clear()
        assert not len(self.broker.queues["q"])
        return spent


def run(count: int, every: int | None) -> tuple[float, int, int]:
    """CPU seconds per message on a new broker, the records made and the messages traced."""
    rig = Rig(every)
    spent = rig.feed(count)
    return spent / count, rig.store.recorded, count // every if every else 0


def paired(order: list[str], slice_count: int, rounds: int) -> None:
    """Every mode's broker kept, fed ``slice_count`` messages in turn, round after round
    (in an order that reverses each round): host contention that lasts longer than a
    round weighs on every mode alike, so each round's ratio against ``off`` is fair. The
    garbage collector is tuned as a node tunes it."""
    rigs = {mode: Rig(MODES[mode]) for mode in order}
    for rig in rigs.values():
        rig.feed(slice_count)  # warm-up
    tune_gc()  # as a node does once it is up
    times: dict[str, list[float]] = {mode: [] for mode in order}
    for round_number in range(rounds):
        for mode in order if round_number % 2 == 0 else reversed(order):
            times[mode].append(rigs[mode].feed(slice_count) / slice_count * 1e6)
    print(f"{rounds} rounds of {slice_count} messages a mode")
    print("| mode | µs/msg: best, median | cost vs off: median of the rounds' ratios (quartiles) | "
          "records kept |")
    print("|---|---|---|---:|")
    for mode in order:
        ratios = sorted(t / off - 1 for t, off in zip(times[mode], times["off"], strict=True))
        q1, median, q3 = statistics.quantiles(ratios, n=4)
        print(f"| {mode} | {min(times[mode]):.2f}, {statistics.median(times[mode]):.2f} | "
              f"{median * 100:+.1f} % ({q1 * 100:+.1f} … {q3 * 100:+.1f}) | {len(rigs[mode].store)} |")


def main() -> None:
    if ARGS.count % BATCH or (ARGS.paired or 0) % BATCH:
        sys.exit(f"--count and --paired must be multiples of {BATCH}")
    import gateway
    print(f"Meshgate from {gateway.__file__.rsplit('/gateway/', 1)[0]}")
    order = ARGS.modes.split(",")
    if "off" not in order or not set(order) <= set(MODES):
        sys.exit(f"--modes: off and any of {', '.join(MODES)}")
    if ARGS.paired:
        paired(order, ARGS.paired, ARGS.rounds)
        return
    print(f"{ARGS.count} messages a run, {ARGS.rounds} rounds")
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
