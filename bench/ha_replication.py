#!/usr/bin/env python3
"""Replicated pairs (docs/ha.md): persistent throughput with synchronous replication
against a single node, and failover time of a pair.

1. Throughput: bench/stomp_bench.py's ``queue-256-persistent`` scenario (persistent
   sends, each with a receipt) against a single node, then against the primary of a
   replicated pair with ``ha.sync = true`` (each receipt waits for the backup's
   fdatasync too), and optionally with ``ha.sync = false``. Both members and the
   witness run on this machine, so the pair costs CPU the single node does not have.
2. Failover: ``--messages`` persistent messages receipted on the primary, ``kill -9``
   of the primary, then the time to the first message consumed from the backup
   (dialled every 10 ms), and that every receipted message came back.

    .venv/bin/python bench/ha_replication.py [--runs 3] [--count 0.3] [--async] [--failover-runs 3]

Everything runs on 127.0.0.1 in a temporary directory; only the processes this
script started are stopped, by pid."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ha_failover import HOST, BenchError, Stomp, consume_after_kill, drain, free_port, stop, wait_for  # noqa: E402

MESHGATE = Path(sys.executable).with_name("meshgate")
STOMP_BENCH = Path(__file__).resolve().parent / "stomp_bench.py"
PASSWORD = "bench-" + uuid.uuid4().hex[:8]


class Procs:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: list[subprocess.Popen] = []

    def start(self, label: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
        proc = subprocess.Popen([str(MESHGATE), *args], stdout=open(self.work / f"{label}.out", "wb"),
                                stderr=open(self.work / f"{label}.err", "wb"), stdin=subprocess.DEVNULL,
                                cwd=self.work, env={**os.environ, **(env or {})})
        self.procs.append(proc)
        return proc

    def read(self, label: str, stream: str = "out") -> bytes:
        try:
            return (self.work / f"{label}.{stream}").read_bytes()
        except OSError:
            return b""

    def stop(self) -> None:
        stop(self.procs)


def start_single(procs: Procs) -> tuple[int, int]:
    port = free_port()
    proc = procs.start("single", ["broker", "--name", "single", "--stomp", f"{HOST}:{port}",
                                  "--data", str(procs.work / "data-single")])
    wait_for(lambda: b"listening on stomp" in procs.read("single"), "the node to listen", 30)
    return port, proc.pid


def start_pair(procs: Procs, sync: bool) -> tuple[int, int, int, subprocess.Popen]:
    """(primary STOMP port, backup STOMP port, primary pid, backup process) with the backup caught up."""
    witness = free_port()
    procs.start("witness", ["witness", "--bind", f"{HOST}:{witness}"], {"MESHGATE_HA_PASSWORD": PASSWORD})
    wait_for(lambda: b"witness listening" in procs.read("witness"), "the witness", 30)
    ports = [free_port(), free_port()]
    repl = [free_port(), free_port()]
    started = []
    for index, role in enumerate(("primary", "backup")):
        sets = ["ha.mode=replicated", f"ha.role={role}", f"ha.replication_bind={HOST}:{repl[index]}",
                f"ha.peer={HOST}:{repl[1 - index]}", f"ha.witness={HOST}:{witness}", f"ha.password={PASSWORD}",
                f"ha.sync={'true' if sync else 'false'}", "ha.heartbeat_ms=200", "ha.takeover_after_ms=1000"]
        args = ["broker", "--name", "pair", "--stomp", f"{HOST}:{ports[index]}", "--data",
                str(procs.work / f"data-{role}")]
        for item in sets:
            args += ["--set", item]
        started.append(procs.start(role, args))
        if role == "primary":
            wait_for(lambda: b"listening on stomp" in procs.read("primary"), "the primary to listen", 30)
    wait_for(lambda: b"caught up with the primary" in procs.read("backup", "err"), "the backup to catch up", 30)
    wait_for(lambda: b"follows the journal" in procs.read("primary", "err"), "the primary to see it in sync", 30)
    return ports[0], ports[1], started[0].pid, started[1]


def throughput(port: int, pids: list[int], count: float, label: str) -> tuple[float, str]:
    """msg/s of queue-256-persistent (stomp_bench's markdown row), and the row."""
    args = [sys.executable, str(STOMP_BENCH), "--port", str(port), "--scenario", "queue-256-persistent",
            "--count", str(count), "--warmup", "0", "--label", label]
    args += ["--broker-pid", *map(str, pids)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise BenchError(f"stomp_bench failed: {result.stdout[-1500:]} {result.stderr[-1500:]}")
    row = next((line for line in result.stdout.splitlines() if line.startswith(f"| {label}")), "")
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    try:
        rate = float(re.sub(r"[^\d.]", "", cells[3]))  # the msgs/s column
    except (IndexError, ValueError):
        raise BenchError(f"no msgs/s in stomp_bench's row {row!r}") from None
    return rate, row


def failover_run(work: Path, messages: int) -> tuple[float, float, int]:
    procs = Procs(work)
    try:
        primary, backup, primary_pid, _ = start_pair(procs, sync=True)
        queue = "/queue/ha-" + uuid.uuid4().hex[:8]
        producer = Stomp(primary)
        producer.produce(queue, messages)
        killed = time.perf_counter()
        os.kill(primary_pid, signal.SIGKILL)
        producer.close()
        answered, consumed, consumer = consume_after_kill(backup, queue, killed, 30.0)
        delivered = drain(consumer, messages)
        consumer.close()
        return answered, consumed, delivered
    finally:
        procs.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="throughput runs of each setup (the median is shown)")
    parser.add_argument("--count", type=float, default=0.3, help="stomp_bench --count (1.0 = 100k messages)")
    parser.add_argument("--async", dest="asynchronous", action="store_true", help="also measure ha.sync = false")
    parser.add_argument("--failover-runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1000, help="receipted before the kill (failover)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="ha-replication-"))
    setups = [("single node", None), ("replicated, sync", True)] + \
        ([("replicated, async", False)] if args.asynchronous else [])
    rates: dict[str, list[float]] = {label: [] for label, _ in setups}
    rows: dict[str, str] = {}
    failovers: list[tuple[float, float, int]] = []
    try:
        for run in range(args.runs):
            for label, sync in setups:
                work = root / f"{label.replace(' ', '-').replace(',', '')}-{run}"
                work.mkdir()
                procs = Procs(work)
                try:
                    if sync is None:
                        port, pid = start_single(procs)
                        pids = [pid]
                    else:
                        port, _, pid, backup = start_pair(procs, sync)
                        pids = [pid, backup.pid]
                    rate, row = throughput(port, pids, args.count, label)
                finally:
                    procs.stop()
                rates[label].append(rate)
                rows[label] = row
                print(f"run {run + 1} {label}: {rate:,.0f} msg/s", flush=True)
        for run in range(args.failover_runs):
            work = root / f"failover-{run}"
            work.mkdir()
            answered, consumed, delivered = failover_run(work, args.messages)
            failovers.append((answered, consumed, delivered))
            print(f"failover run {run + 1}: port answered {answered:.3f} s, first message {consumed:.3f} s after "
                  f"kill -9; {delivered}/{args.messages} delivered", flush=True)
    except BenchError as error:
        print(f"ha_replication: {error} (work dir kept: {root})", file=sys.stderr)
        return 1
    print()
    print(f"queue-256-persistent (stomp_bench --count {args.count}, receipts on every SEND), median of "
          f"{args.runs} runs; everything on one machine")
    print()
    print("| setup | msg/s (median) | runs | vs single node |")
    print("|---|---|---|---|")
    base = statistics.median(rates["single node"]) if rates["single node"] else 0.0
    for label, _ in setups:
        if not rates[label]:
            continue
        median = statistics.median(rates[label])
        share = f"{100 * median / base:.0f} %" if base else "-"
        print(f"| {label} | {median:,.0f} | {', '.join(f'{r:,.0f}' for r in rates[label])} | {share} |")
    if failovers:
        consumed = [f[1] for f in failovers]
        print()
        print(f"kill -9 of the primary to the first message consumed from the backup ({args.messages} receipted "
              "before the kill; witness quorum, takeover_after_ms = 1000)")
        print()
        print("| runs | median | range | port answers (median) | messages lost |")
        print("|---|---|---|---|---|")
        print(f"| {len(failovers)} | {statistics.median(consumed):.2f} s | {min(consumed):.2f}–{max(consumed):.2f} s "
              f"| {statistics.median(f[0] for f in failovers):.2f} s | "
              f"{sum(args.messages - f[2] for f in failovers)} |")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
