"""What the STOMP and AMQP load generators share, so their tables are measured the same way.

Worker processes and their reports, the socket's frame buffer, the broker's and the
machine's CPU and the broker's RSS (from /proc, with each broker's whole process tree),
latency percentiles, repeated runs and their median, the report line, the markdown
table and the command-line options both take.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import queue
import select
import socket
import sys
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, TypeVar

RECV_SIZE = 1 << 20
# ~256 KiB per sendall: big enough to amortise syscalls, small enough that the
# per-batch timestamp is accurate to well under a millisecond.
BATCH_BYTES = 256 * 1024
# Other processes using more than this much CPU during a scenario flag it NOISY.
NOISY_PCT = 30.0

BrokerPids = int | tuple[int, ...] | None  # several brokers (a pair) are summed


class ScenarioFailed(Exception):
    """A scenario could not produce a valid figure."""


def cpu_seconds() -> float:
    """CPU this process has used, for the busiest-client column."""
    t = os.times()
    return t.user + t.system


# --------------------------------------------------------------------------
# The client side of a connection

FrameT = TypeVar("FrameT")


class FramedSocket(Generic[FrameT]):
    """A blocking socket with an incremental frame buffer; `split` is the protocol's parser."""

    def __init__(self, sock: socket.socket, split: Callable[[bytes], tuple[list[FrameT], int]]) -> None:
        self.sock = sock
        self.split = split
        self.buf = b""
        self.pending: list[FrameT] = []

    def pull(self) -> list[FrameT]:
        """Frames already buffered, else block for one recv and split it."""
        if self.pending:
            frames, self.pending = self.pending, []
            return frames
        data = self.sock.recv(RECV_SIZE)
        if not data:
            raise ConnectionError("broker closed the TCP connection")
        self.buf = self.buf + data if self.buf else data
        frames, pos = self.split(self.buf)
        self.buf = self.buf[pos:]
        return frames

    def poll(self) -> list[FrameT]:
        """Like pull() but returns [] instead of waiting."""
        if self.pending:
            return self.pull()
        # A socket with a timeout polls before recv, so MSG_DONTWAIT alone
        # would still wait; ask select first.
        readable, _, _ = select.select([self.sock], [], [], 0)
        return self.pull() if readable else []


def open_socket(host: str, port: int, io_timeout: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=io_timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def filler(size: int) -> bytes:
    # No NUL inside, so even a STOMP broker that ignores content-length parses it.
    return (b"meshgate-bench-" * (size // 15 + 1))[:size]


# --------------------------------------------------------------------------
# Worker processes


class Children:
    """Worker processes of one scenario and the queue they report on."""

    def __init__(self) -> None:
        self.ctx = mp.get_context("fork")
        self.events = self.ctx.Queue()
        self.procs: dict[str, Any] = {}

    def start(self, role: str, target: Any, *args: Any) -> None:
        proc = self.ctx.Process(target=target, args=(*args,), name=f"bench-{role}", daemon=True)
        proc.start()
        self.procs[role] = proc

    def await_all(self, kind: str, roles: list[str], deadline: float) -> dict[str, Any]:
        """Collect one `kind` report from each role; raise on error, death or timeout."""
        got: dict[str, Any] = {}
        while len(got) < len(roles):
            left = deadline - time.monotonic()
            missing = sorted(set(roles) - got.keys())
            if left <= 0:
                raise ScenarioFailed(f"timed out waiting for {kind} from {', '.join(missing)}")
            try:
                what, role, data = self.events.get(timeout=min(left, 1.0))
            except queue.Empty:
                dead = [r for r in missing if self.procs[r].exitcode is not None]
                if dead:
                    raise ScenarioFailed(f"{', '.join(dead)} exited without reporting {kind}") from None
                continue
            if what == "error":
                raise ScenarioFailed(f"{role}: {data}")
            if what == kind:
                got[role] = data
        return got

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.events.close()


def producer_main(
    connect: Callable[[], Any],
    publish: Callable[[Any], dict[str, Any]],
    close: Callable[[Any], None],
    out: Any,
    go: Any,
    wait_s: float,
) -> None:
    """A producer process: connect, say ready, publish once `go` is set, report with its CPU."""
    try:
        conn = connect()
        out.put(("ready", "producer", None))
        if not go.wait(wait_s):
            raise TimeoutError("never told to start")
        result = publish(conn)
        close(conn)
        result["cpu"] = cpu_seconds()
        out.put(("result", "producer", result))
    except Exception as exc:  # noqa: BLE001 - every failure must reach the parent
        out.put(("error", "producer", f"{type(exc).__name__}: {exc}"))


# --------------------------------------------------------------------------
# Broker and machine, from /proc


def _pids(pid: BrokerPids) -> tuple[int, ...]:
    return () if pid is None else (pid,) if isinstance(pid, int) else pid


def _process_table() -> tuple[dict[int, list[int]], dict[int, int]]:
    """Children of each process, and CPU ticks of each (with its reaped children)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        # comm may contain spaces and parentheses: fields start after the last ')'.
        fields = raw[raw.rindex(b")") + 2 :].split()
        # fields[1] ppid; [11] utime, [12] stime, [13] cutime, [14] cstime
        children.setdefault(int(fields[1]), []).append(int(entry))
        ticks[int(entry)] = sum(int(x) for x in fields[11:15])
    return children, ticks


def _tree(root: int, children: dict[int, list[int]]) -> list[int]:
    tree = [root]
    for pid in tree:
        tree.extend(children.get(pid, ()))
    return tree


def broker_cpu(pid: BrokerPids) -> tuple[float, ...] | None:
    """CPU seconds of each broker with all its descendants, in the order given; None if one is gone.

    RabbitMQ's recorded PID is the rabbitmq-server shell, whose child beam.smp
    does the work, so the whole tree is summed; reaped children (e.g. the disk
    monitor's df) are in their parent's cutime/cstime.
    """
    pids = _pids(pid)
    if not pids:
        return None
    children, ticks = _process_table()
    if any(one not in ticks for one in pids):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    return tuple(sum(ticks.get(p, 0) for p in _tree(one, children)) / hz for one in pids)


def broker_cpu_wait(pid: BrokerPids) -> float | None:
    """Seconds the brokers' threads (with their descendants') were runnable but waited for a
    CPU (/proc/PID/task/TID/schedstat, second field); None without the brokers or schedstat.
    Much of it during a run means other processes held the CPUs: the broker was slowed, not idle."""
    pids = _pids(pid)
    if not pids:
        return None
    children, _ = _process_table()
    waited = 0
    for one in pids:
        for member in _tree(one, children):
            try:
                tasks = os.listdir(f"/proc/{member}/task")
            except OSError:
                continue
            for task in tasks:
                try:
                    with open(f"/proc/{member}/task/{task}/schedstat", "rb") as f:
                        waited += int(f.read().split()[1])
                except (OSError, IndexError, ValueError):
                    continue
    return waited / 1e9


def missing_brokers(pid: BrokerPids) -> list[int]:
    _, ticks = _process_table()
    return [one for one in _pids(pid) if one not in ticks]


def broker_rss(pid: BrokerPids) -> int | None:
    """Resident bytes of the brokers and all their descendants."""
    pids = _pids(pid)
    if not pids:
        return None
    children, _ = _process_table()
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for one in pids:
        for proc in _tree(one, children):
            try:
                with open(f"/proc/{proc}/statm", "rb") as f:
                    total += int(f.read().split()[1]) * page
            except (OSError, IndexError, ValueError):
                pass
    return total


def system_busy() -> float | None:
    """CPU seconds the whole machine spent busy (all cores), to spot other load."""
    try:
        with open("/proc/stat", "rb") as f:
            cpu = f.readline().split()
    except OSError:
        return None
    # guest time is already inside user; idle, iowait and steal are not busy.
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in cpu[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuSample:
    each_broker: tuple[float, ...] | None
    system: float | None
    broker_wait: float | None = None  # seconds the brokers waited for a CPU (broker_cpu_wait)

    @property
    def broker(self) -> float | None:
        return None if self.each_broker is None else sum(self.each_broker)

    @classmethod
    def take(cls, pid: BrokerPids) -> CpuSample:
        return cls(broker_cpu(pid), system_busy(), broker_cpu_wait(pid))


def wait_quiet(pid: BrokerPids, max_wait: float) -> None:
    """Wait until other processes leave the machine idle for 3 s in a row, or max_wait passes."""
    if max_wait <= 0:
        return
    deadline = time.monotonic() + max_wait
    quiet_for = 0
    while quiet_for < 3 and time.monotonic() < deadline:
        before = CpuSample.take(pid)
        time.sleep(1)
        after = CpuSample.take(pid)
        busy = (after.system or 0.0) - (before.system or 0.0)
        broker = (after.broker or 0.0) - (before.broker or 0.0)
        quiet_for = quiet_for + 1 if 100 * (busy - broker) < NOISY_PCT / 2 else 0
    if quiet_for < 3:
        print(f"(machine still busy after {max_wait:.0f} s; running anyway)", flush=True)


# --------------------------------------------------------------------------
# Results


@dataclass
class Result:
    scenario: str
    ok: bool
    reason: str = ""
    messages: int = 0
    msgs_per_s: float | None = None
    mb_per_s: float | None = None
    latency_ms: tuple[float, float, float] | None = None
    broker_cpu_s: float | None = None
    broker_cpu_pct: float | None = None
    client_cpu_pct: float | None = None
    other_cpu_pct: float | None = None
    kib_per_conn: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def noisy(self) -> bool:
        return self.other_cpu_pct is not None and self.other_cpu_pct > NOISY_PCT

    def key(self) -> float:
        """What --repeat takes the median of."""
        return self.msgs_per_s if self.msgs_per_s is not None else (self.kib_per_conn or 0.0)

    def fail(self, why: str) -> None:
        self.ok = False
        self.reason = f"{self.reason}; {why}" if self.reason else why


def throughput(name: str, messages: int, size: int, elapsed: float) -> Result:
    return Result(
        name, ok=True, messages=messages, msgs_per_s=messages / elapsed, mb_per_s=messages * size / elapsed / 1e6
    )


def measure_cpu(res: Result, elapsed: float, client_cpu: list[float], cpu0: CpuSample, cpu1: CpuSample) -> None:
    """The CPU columns and notes of a run that took `elapsed` seconds between the samples."""
    res.client_cpu_pct = 100 * max(client_cpu) / elapsed
    if cpu0.each_broker is not None and cpu1.each_broker is not None:
        res.broker_cpu_s = sum(cpu1.each_broker) - sum(cpu0.each_broker)
        res.broker_cpu_pct = 100 * res.broker_cpu_s / elapsed
        if len(cpu0.each_broker) > 1:  # which node of a pair is the busy one
            each = (100 * (b - a) / elapsed for a, b in zip(cpu0.each_broker, cpu1.each_broker, strict=True))
            res.notes.append("per broker " + " + ".join(f"{pct:.0f}%" for pct in each))
        if cpu0.system is not None and cpu1.system is not None:
            # Client CPU includes connection setup outside the window, so clamp.
            other = (cpu1.system - cpu0.system) - res.broker_cpu_s - sum(client_cpu)
            res.other_cpu_pct = max(0.0, 100 * other / elapsed)
        if res.messages:
            res.notes.append(f"{1e6 * res.broker_cpu_s / res.messages:.1f} µs broker CPU/msg")
        if cpu0.broker_wait is not None and cpu1.broker_wait is not None:
            res.notes.append(f"brokers waited for a CPU {100 * (cpu1.broker_wait - cpu0.broker_wait) / elapsed:.0f}%")
    if res.noisy:
        res.notes.append(f"NOISY: other processes used {res.other_cpu_pct:.0f}% CPU")


def percentiles_ms(raw: list[bytes]) -> tuple[float, float, float] | None:
    """p50, p99 and max of nanosecond latencies (arrays of int64 as bytes), in ms."""
    values = array("q")
    for chunk in raw:
        values.frombytes(chunk)
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)

    def pick(q: float) -> float:
        return ordered[min(n - 1, math.ceil(q * n) - 1)] / 1e6

    return pick(0.50), pick(0.99), ordered[-1] / 1e6


def latency_note(what: str, raw: bytes) -> str | None:
    rec = percentiles_ms([raw])
    return None if rec is None else "{} p50/p99/max {:.1f}/{:.1f}/{:.1f} ms".format(what, *rec)


def guarded(name: str, run: Callable[[], Result]) -> Result:
    """The result of one run; one that raised is a failed result, so the other scenarios still run."""
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - one failed scenario must not stop the run
        notes = getattr(exc, "__notes__", [])
        reason = str(exc) if isinstance(exc, ScenarioFailed) else f"{type(exc).__name__}: {exc}"
        return Result(name, ok=False, reason="; ".join([reason, *notes]))


def pick_median(runs: list[Result]) -> Result:
    """Median run by throughput (or KiB/conn), preferring runs not flagged NOISY.

    Other load on a shared machine only ever slows a broker down, so noisy runs
    are dropped when there are quiet ones. A failed run fails the scenario: a
    median of the runs that passed would hide it.
    """
    failures = [r for r in runs if not r.ok]
    if failures:
        return failures[-1]
    pool = sorted([r for r in runs if not r.noisy] or runs, key=Result.key)
    chosen = pool[(len(pool) - 1) // 2]
    if len(runs) > 1:
        spec, unit = (".0f", "msgs/s") if chosen.msgs_per_s is not None else (".1f", "KiB/conn")
        note = f"median of {len(pool)}/{len(runs)} runs, {pool[0].key():{spec}}..{pool[-1].key():{spec}} {unit}"
        if len(pool) < len(runs):
            note += " (noisy runs dropped)"
        chosen.notes.append(note)
    return chosen


def run_repeated(name: str, run: Callable[[], Result], pid: BrokerPids, wait_quiet_s: float, repeat: int) -> Result:
    runs = []
    for i in range(repeat):
        wait_quiet(pid, wait_quiet_s)
        res = guarded(name, run)
        suffix = f" [run {i + 1}/{repeat}]" if repeat > 1 else ""
        print(report_line(res) + suffix, flush=True)
        runs.append(res)
    return pick_median(runs)


# --------------------------------------------------------------------------
# Reporting


def fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def report_line(res: Result) -> str:
    if not res.ok and res.msgs_per_s is None:
        return f"{res.scenario}: FAILED ({res.reason})"
    parts = [f"{res.scenario}:"]
    if res.msgs_per_s is not None:
        parts.append(f"{res.messages} msgs, {res.msgs_per_s:,.0f} msgs/s, {res.mb_per_s:.1f} MB/s")
    if res.latency_ms:
        parts.append("latency p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms".format(*res.latency_ms))
    if res.broker_cpu_s is not None:
        # "broker CPU N%" first: bench/metrics_overhead.sh reads it.
        parts.append(f"broker CPU {res.broker_cpu_pct:.0f}% ({res.broker_cpu_s:.1f} s)")
    if res.client_cpu_pct is not None:
        parts.append(f"busiest client proc {res.client_cpu_pct:.0f}%")
    if res.other_cpu_pct is not None:
        parts.append(f"other load {res.other_cpu_pct:.0f}%")
    parts.extend(res.notes)
    line = parts[0] + " " + ", ".join(parts[1:])
    return line if res.ok else f"{line} -- FAILED ({res.reason})"


def markdown_table(label: str, results: list[Result]) -> str:
    rows = [
        "| broker | scenario | messages | msgs/s | MB/s | p50 ms | p99 ms | max ms "
        "| broker CPU s | broker CPU | notes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for res in results:
        p50, p99, pmax = res.latency_ms or (None, None, None)
        notes = "; ".join(res.notes)
        if not res.ok:
            notes = f"FAILED: {res.reason}" + (f"; {notes}" if notes else "")
        cpu = "-" if res.broker_cpu_pct is None else f"{res.broker_cpu_pct:.0f}%"
        rows.append(
            f"| {label} | {res.scenario} | {res.messages or '-'} | {fmt(res.msgs_per_s)} | "
            f"{fmt(res.mb_per_s, '.1f')} | {fmt(p50, '.1f')} | {fmt(p99, '.1f')} | "
            f"{fmt(pmax, '.1f')} | {fmt(res.broker_cpu_s, '.1f')} | {cpu} | {notes.replace('|', '/')} |"
        )
    return "\n".join(rows)


def run_all(
    args: argparse.Namespace, pid: BrokerPids, run: Callable[[str], Result], warm_up: Callable[[], Result]
) -> int:
    """The warm-up, each scenario chosen --repeat times, then the table; the exit status."""
    if args.warmup > 0:
        print(f"(warm-up: {report_line(guarded('warmup', warm_up))})", flush=True)
    names = args.scenario or args.all_scenarios
    repeat = max(1, args.repeat)
    results = [run_repeated(name, partial(run, name), pid, args.wait_quiet, repeat) for name in names]
    print()
    print(markdown_table(args.label, results))
    return 0 if all(r.ok for r in results) else 1


# --------------------------------------------------------------------------
# Command line


def argument_parser(
    doc: str | None, port: int, scenarios: list[str], warmup: int, warmup_help: str
) -> argparse.ArgumentParser:
    """The options both benches take; each adds its own (connection, counts)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.set_defaults(all_scenarios=scenarios)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=port)
    ap.add_argument(
        "--broker-pid",
        type=int,
        nargs="+",
        metavar="PID",
        help="broker PID for CPU and RSS, with all its descendants (from /proc); several are summed (a broker pair)",
    )
    ap.add_argument("--scenario", nargs="+", choices=scenarios, help="default: all")
    ap.add_argument("--label", default="broker", help="first column of the markdown table")
    ap.add_argument("--repeat", type=int, default=1, help="runs per scenario; the table shows the median")
    ap.add_argument("--timeout", type=float, default=300.0, help="per-scenario timeout, seconds")
    ap.add_argument("--idle-timeout", type=float, default=30.0, help="consumer gives up after this much silence")
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each run, wait up to this long for other processes to leave the CPUs idle",
    )
    ap.add_argument("--warmup", type=int, default=warmup, help=warmup_help + "; 0 = none")
    return ap


def broker_pids(args: argparse.Namespace) -> BrokerPids:
    """--broker-pid as one PID or a pair; warns about any that is not running."""
    pids = args.broker_pid
    pid: BrokerPids = None if not pids else pids[0] if len(pids) == 1 else tuple(pids)
    gone = missing_brokers(pid)
    if gone:
        print(f"warning: no process {', '.join(map(str, gone))}; broker CPU not measured", file=sys.stderr)
    return pid
