"""Pipeline N x 1 KiB non-persistent messages at a queue nobody consumes and
report how the broker's memory and the producer's progress behave, then drain.

    python bench/memory_flood.py --port 61613 --broker-pid PID [--count 1000000]

With producer flow control the producer stalls near broker.memory_limit and the
broker's RSS stays bounded; once a consumer drains the queue, everything arrives."""

from __future__ import annotations

import argparse
import socket
import threading
import time

import psutil


def frame(command: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    head = "".join(f"{k}:{v}\n" for k, v in headers.items())
    return f"{command}\n{head}\n".encode() + body + b"\0"


def connect(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port))
    sock.sendall(frame("CONNECT", {"accept-version": "1.2", "host": "bench", "heart-beat": "0,0"}))
    assert sock.recv(4096).startswith(b"CONNECTED")
    return sock


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=61613)
    parser.add_argument("--broker-pid", type=int, required=True)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--stall", type=float, default=3.0, help="seconds without progress that count as stalled")
    args = parser.parse_args()
    broker = psutil.Process(args.broker_pid)
    queue = f"/queue/flood-{int(time.time())}"
    body = b"x" * 1024
    one = frame("SEND", {"destination": queue, "content-length": str(len(body))}, body)
    producer = connect(args.host, args.port)
    rss_before = broker.memory_info().rss
    sent = [0]

    def produce() -> None:
        try:
            while sent[0] < args.count:
                n = min(256, args.count - sent[0])
                producer.sendall(one * n)
                sent[0] += n
        except OSError:
            pass

    threading.Thread(target=produce, daemon=True).start()
    last, last_change, peak = -1, time.monotonic(), rss_before
    while sent[0] < args.count and time.monotonic() - last_change < args.stall:
        time.sleep(0.2)
        peak = max(peak, broker.memory_info().rss)
        if sent[0] != last:
            last, last_change = sent[0], time.monotonic()
    stalled = sent[0] < args.count
    print(f"producer {'stalled' if stalled else 'finished'} after ~{sent[0]:,} of {args.count:,} messages; "
          f"broker RSS {rss_before / 2**20:.0f} -> peak {peak / 2**20:.0f} MiB")
    consumer = connect(args.host, args.port)
    consumer.sendall(frame("SUBSCRIBE", {"id": "drain", "destination": queue, "ack": "auto"}))
    received, marker, pending = 0, b"\nsubscription:drain\n", b""
    deadline = time.monotonic() + 600
    while received < args.count and time.monotonic() < deadline:
        chunk = consumer.recv(1 << 20)
        if not chunk:
            break
        data = pending + chunk
        received += data.count(marker)
        pending = data[-(len(marker) - 1):]
        peak = max(peak, broker.memory_info().rss)
    print(f"drained {received:,} messages; broker RSS peak {peak / 2**20:.0f} MiB, "
          f"now {broker.memory_info().rss / 2**20:.0f} MiB")
    producer.close()
    consumer.close()


if __name__ == "__main__":
    main()
