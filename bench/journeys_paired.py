"""What tracing a 1 % sample costs a real node over sockets, in rounds short enough that
the host's drift weighs on both modes alike (docs/performance.md, "The 1 % sample in CPU
time"). Run by ``journeys_sockets.sh --paired``, which starts the node.

    .venv/bin/python bench/journeys_paired.py --port PORT --broker-pid PID \\
        [--slice 5000] [--rounds 100] [--every 100] [--queue Q]

One STOMP producer writes 256-byte non-persistent SENDs to one queue (100 a write) and
one ``ack:auto`` consumer takes them, both in this process. Each round arms the queue
(``trace_next --every K``) and disarms it (``--count 0``), in an order that swaps each
round, and feeds each mode ``--slice`` messages; the node's CPU time of a slice is read
from ``/proc/PID/schedstat`` (nanoseconds) around it, after the management request that
switched the mode was answered. Prints the node's CPU µs a message per mode and the
median of the rounds' ratios of the sample against nothing armed."""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from management.client import ManagementClient  # noqa: E402
from model.requests import TraceNext  # noqa: E402

BATCH = 100
CONNECT = b"CONNECT\naccept-version:1.2\nhost:bench\nheart-beat:0,0\n\n\0"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--broker-pid", type=int, required=True)
    parser.add_argument("--slice", type=int, default=5000, help="messages a mode a round (a multiple of 100)")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--every", type=int, default=100, help="the sample: one message in EVERY")
    parser.add_argument("--queue", default="bench-journeys-paired")
    return parser.parse_args()


def _connect(port: int, *frames: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(CONNECT)
    answer = b""
    while b"\0" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            sys.exit("the node closed the connection")
        answer += chunk
    if not answer.startswith(b"CONNECTED"):
        sys.exit(f"the node refused the connection: {answer[:200]!r}")
    for frame in frames:
        sock.sendall(frame)
    return sock


def _cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


class Traffic:
    """The producer and the consumer: ``slice`` messages through the queue, all taken."""

    def __init__(self, port: int, queue: str) -> None:
        self.consumer = _connect(port, f"SUBSCRIBE\nid:0\ndestination:/queue/{queue}\nack:auto\n\n\0".encode())
        self.producer = _connect(port)
        body = b"x" * 256
        self.write = b"".join(f"SEND\ndestination:/queue/{queue}\ncontent-length:256\n\n".encode() + body + b"\0"
                              for _ in range(BATCH))
        self.taken = 0

    def _take(self, wait: bool) -> None:
        self.consumer.setblocking(wait)
        try:
            while True:
                chunk = self.consumer.recv(1 << 20)
                if not chunk:
                    sys.exit("the node closed the consumer's connection")
                self.taken += chunk.count(b"\0")  # one a frame: a body of x's holds none
                if wait:
                    return
        except BlockingIOError:
            return

    def run(self, count: int) -> None:
        target = self.taken + count
        for _ in range(count // BATCH):
            self.producer.sendall(self.write)
            self._take(wait=False)
        while self.taken < target:
            self._take(wait=True)


def main() -> None:
    args = _arguments()
    if args.slice % BATCH:
        sys.exit(f"--slice must be a multiple of {BATCH}")
    destination = f"/queue/{args.queue}"
    modes = {"nothing-armed": TraceNext(destination=destination, count=0),
             f"one-in-{args.every}": TraceNext(destination=destination, every=args.every, for_s=86400)}
    traffic = Traffic(args.port, args.queue)
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with ManagementClient("127.0.0.1", args.port) as management:
        for request in modes.values():  # warm-up, each mode
            management.call(request)
            traffic.run(args.slice)
        order = list(modes)
        for round_number in range(args.rounds):
            for mode in order if round_number % 2 == 0 else reversed(order):
                management.call(modes[mode])
                started = _cpu_ns(args.broker_pid)
                traffic.run(args.slice)
                times[mode].append((_cpu_ns(args.broker_pid) - started) / args.slice / 1000)
        management.call(modes["nothing-armed"])
    off, sampled = times.values()
    ratios = sorted(on / base - 1 for on, base in zip(sampled, off, strict=True))
    q1, median, q3 = statistics.quantiles(ratios, n=4)
    print(f"{args.rounds} rounds of {args.slice} messages a mode; node CPU µs a message:")
    for mode, values in times.items():
        print(f"  {mode}: best {min(values):.2f}, median {statistics.median(values):.2f}")
    print(f"one-in-{args.every} against nothing armed: {median * 100:+.1f} % "
          f"(median of the rounds' ratios; quartiles {q1 * 100:+.1f} … {q3 * 100:+.1f} %)")


if __name__ == "__main__":
    main()
