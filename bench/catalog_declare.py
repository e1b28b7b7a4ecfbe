"""Queue declarations against a growing catalog: a Broker on a JournalStore in a temp
dir, N x (define_queue + queue), the last 100 timed (docs/performance.md, "Declaring
queues is linear in the catalog"). Each definition rewrites catalog.json.

    .venv/bin/python bench/catalog_declare.py 3000
"""

from __future__ import annotations

import argparse
import tempfile
import time

from twisted.internet import reactor

from gateway.broker.broker import Broker
from gateway.store.journal import JournalStore
from model.definitions import QueueSettings

TIMED = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", type=int, help="queues to declare (at least 100)")
    count = max(TIMED, parser.parse_args().count)
    broker = Broker(JournalStore(tempfile.mkdtemp(), reactor))
    started = time.perf_counter()
    for i in range(count):
        if i == count - TIMED:
            timed = time.perf_counter()
        name = f"queue-{i:05}"
        broker.define_queue(name, QueueSettings(max_length=5))
        broker.queue(name)
    ended = time.perf_counter()
    print(f"{count} queues in {ended - started:.1f} s; the last {TIMED}: "
          f"{(ended - timed) / TIMED * 1000:.1f} ms/declare", flush=True)


if __name__ == "__main__":
    main()
