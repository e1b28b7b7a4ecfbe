"""How long reading a full journey store takes (management.journeys.JourneyStore keeps
records as tuples with no index, so a read looks at every record):

    .venv/bin/python bench/journeys_reads.py [--records 200000]

Fills a store with the records of traced messages as a queue-256 consumer in
``client`` mode leaves them (received with 3 headers and a 100-byte preview, queued,
delivered, acked: 4 per message), then times one ``steps_of`` (``meshgate trace``), a
search that finds nothing (every journey looked at) and one that stops at the
200-hit limit, each the best of 5. The reads run on the node's reactor: this is how
long they hold it."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from management.journeys import JourneyStore  # noqa: E402

ORIGIN = ("3f0c2a9e-5b1d-4e7a-9c2f-6d8e1b4a7c30", "bench", "/")


def fill(records: int) -> JourneyStore:
    store = JourneyStore(records, 10**10, 3600, time.time)
    for number in range(records // 4):
        message_id = f"ID:3f0c2a9e-1-{number}"
        store.add(ORIGIN, "received", message_id, None, {
            "destination": "/queue/q", "persistent": False, "priority": 4, "size": 256,
            "headers": {"destination": "/queue/q", "customer": f"c-{number % 1000}", "content-length": "256"},
            "body_preview": "x" * 100, "protocol": "stomp", "connection": "c-1", "remote": "127.0.0.1:50000"})
        store.add(ORIGIN, "queued", message_id, "q", None)
        store.add(ORIGIN, "delivered", message_id, "q", {"consumer": "s", "ack_mode": "client", "deliveries": 1,
                                                         "protocol": "stomp", "connection": "c-2"})
        store.add(ORIGIN, "acked", message_id, "q", {"latency_ms": 1.5})
    return store


def best_ms(read) -> tuple[float, int]:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        found = read()
        times.append(time.perf_counter() - started)
    return min(times) * 1000, len(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    records = parser.parse_args().records
    store = fill(records)
    print(f"| read ({len(store)} records) | ms, best of 5 | found |")
    print("|---|---:|---:|")
    for name, read in [("steps_of one message", lambda: store.steps_of([f"ID:3f0c2a9e-1-{records // 8}"])),
                       ("search, no hit (header)", lambda: store.search(header=("customer", "none"))),
                       ("search, no hit (body)", lambda: store.search(body="not there")),
                       ("search by queue, 200 hits", lambda: store.search(queue="q"))]:
        elapsed, found = best_ms(read)
        print(f"| {name} | {elapsed:.0f} | {found} |")


if __name__ == "__main__":
    main()
