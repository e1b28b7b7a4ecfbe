#!/usr/bin/env python3
"""Vhosts at scale: 100 vhosts x 100 idle queues against a node without vhosts, interleaved.

Starts fresh `meshgate broker` nodes side by side on loopback:

- X: 100 vhosts `t000`..`t099` in its configuration, then 100 queues declared in each
  over AMQP (`queue.declare`, not durable, not auto-delete: they stay, idle);
- Y: no `[vhosts]` at all, a broker with `/` alone;
- Z (with `--before CHECKOUT`): that build, e.g. the one before vhosts, configured as Y.

It records X's RSS before and after the 10,000 queues (memory per idle queue) and the
RSS of X and Y once started (memory per idle vhost), then measures one queue's
throughput with `stomp_bench.py`'s scenarios (`queue-256`, `queue-256-persistent`) in
rounds that interleave the targets (X in vhost `t042`, X in `/`, Y, Z; the order
rotates each round), since this machine's speed drifts by a third within a day and only
figures taken side by side compare. See bench/README.md.

    .venv/bin/python bench/vhosts_bench.py [--rounds 3] [--count 1.0] [--wait-quiet 30] [--before DIR]
    .venv/bin/python bench/vhosts_bench.py --rounds 1 --count 0.05 --vhosts 5 --queues 10 --wait-quiet 0  # quick
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

# The load generators (the script's directory is on sys.path).
import amqp_bench
import common
import stomp_bench

ROOT = Path(__file__).resolve().parent.parent
MESHGATE = os.environ.get("MESHGATE", str(ROOT / ".venv" / "bin" / "meshgate"))  # another build: set it
SCENARIOS = ("queue-256", "queue-256-persistent")
MEASURED_VHOST = 42  # the vhost of X the single queue is measured in: one among many
GOAL = 0.05  # issue 25: single-queue throughput within 5 % of a node without vhosts


@dataclass
class Node:
    name: str
    process: subprocess.Popen[bytes]
    stomp_port: int
    amqp_port: int
    log: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@dataclass(frozen=True)
class Target:
    """Where one series of runs is measured: a node and the vhost its clients choose."""

    label: str
    node: Node
    vhost: str  # STOMP CONNECT host header; a name that is no vhost is `/`


@dataclass
class Series:
    target: Target
    runs: dict[str, list[common.Result]] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vhost_names(count: int) -> list[str]:
    return [f"t{i:03d}" for i in range(count)]


def write_config(path: Path, vhosts: list[str]) -> None:
    lines = ["[broker]", 'memory_limit = "1GiB"', ""]
    if vhosts:
        lines.append("[vhosts]")
        for name in vhosts:
            lines += ["", "[[vhosts.host]]", f'name = "{name}"']
    path.write_text("\n".join(lines) + "\n")


def start_node(work: Path, name: str, vhosts: list[str], checkout: Path | None = None) -> Node:
    """A `meshgate broker` with STOMP and AMQP listeners; returns once both listen. With
    `checkout`, that build's code runs on this venv (as bench/ab_builds.sh runs one)."""
    config, log = work / f"{name}.toml", work / f"{name}.log"
    write_config(config, vhosts)
    stomp_port, amqp_port = free_port(), free_port()
    command, env = [MESHGATE], None
    if checkout is not None:
        command, env = [sys.executable, "-m", "meshgate"], {**os.environ, "PYTHONPATH": str(checkout)}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "broker", "--name", name, "--config", str(config), "--data", str(work / f"data-{name}")]
            + ["--stomp", f"127.0.0.1:{stomp_port}", "--amqp", f"127.0.0.1:{amqp_port}"],
            cwd=checkout,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    node = Node(name, process, stomp_port, amqp_port, log)
    deadline = time.monotonic() + 60
    pattern = re.compile(rf"listening on .*:{amqp_port}$", re.M)
    while not pattern.search(log.read_text(errors="replace")):
        if process.poll() is not None or time.monotonic() > deadline:
            node.stop()
            raise SystemExit(f"node {name} did not start; its log {log}:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    return node


def settled_rss(pid: int) -> int:
    """RSS once the node has had a moment to finish what it was doing."""
    time.sleep(2)
    return common.broker_rss(pid) or 0


def declare_idle_queues(node: Node, vhosts: list[str], per_vhost: int) -> list[float]:
    """`per_vhost` transient queues in each vhost over AMQP; the seconds each vhost's took
    (a declare's cost may grow with the queues already there)."""
    took = []
    for vhost in vhosts:
        t0 = time.monotonic()
        conn = amqp_bench.connect(amqp_bench.ConnParams("127.0.0.1", node.amqp_port, vhost=vhost))
        try:
            for i in range(per_vhost):
                conn.declare_queue(f"idle-{i:03d}", durable=False)
        finally:
            conn.close()
        took.append(time.monotonic() - t0)
    return took


def check_queues_stayed(node: Node, vhosts: list[str], per_vhost: int) -> None:
    """A passive declare of the last queue of each vhost: they outlive their connection."""
    for vhost in vhosts:
        conn = amqp_bench.connect(amqp_bench.ConnParams("127.0.0.1", node.amqp_port, vhost=vhost))
        try:
            conn.declare_queue(f"idle-{per_vhost - 1:03d}", durable=False, passive=True)
        finally:
            conn.close()


def run_context(target: Target, args: argparse.Namespace) -> stomp_bench.RunContext:
    return stomp_bench.RunContext(
        params=stomp_bench.ConnParams("127.0.0.1", target.node.stomp_port, target.vhost),
        broker_pid=target.node.process.pid,
        scale=args.count,
        timeout_s=300.0,
        idle_s=30.0,
        fanout_procs=1,
        run_id=uuid.uuid4().hex[:8],
    )


def warm_up(target: Target, args: argparse.Namespace) -> None:
    """queue-256's messages once, unreported, so both nodes start the rounds equally warm."""
    rc = run_context(target, args)
    warm = stomp_bench.Scenario("warmup", "queue", stomp_bench.SCENARIOS["queue-256"].count)
    res = common.guarded("warmup", lambda: stomp_bench.run_scenario(warm, rc))
    print(f"  (warm-up {target.label}: {common.report_line(res)})", flush=True)


def measure(target: Target, scenario: str, args: argparse.Namespace) -> common.Result:
    rc = run_context(target, args)
    common.wait_quiet(target.node.process.pid, args.wait_quiet)
    res = common.guarded(scenario, lambda: stomp_bench.run_scenario(stomp_bench.SCENARIOS[scenario], rc))
    print(f"  {target.label:<18} {common.report_line(res)}", flush=True)
    return res


def us_per_msg(res: common.Result) -> float | None:
    return None if res.broker_cpu_s is None or not res.messages else 1e6 * res.broker_cpu_s / res.messages


def ratios(runs: list[common.Result], base: list[common.Result]) -> list[float]:
    """msgs/s over the baseline's of the same round, for the rounds where both have a figure."""
    return [
        r.msgs_per_s / b.msgs_per_s
        for r, b in zip(runs, base, strict=True)
        if r.ok and b.ok and r.msgs_per_s and b.msgs_per_s
    ]


def summary(series: list[Series], baselines: list[Series]) -> list[str]:
    """Per scenario and target: each round's msgs/s and µs broker CPU/msg, and the ratio to
    each baseline taken in the same round, their median against the 5 % goal."""
    lines = []
    names = [b.target.label for b in baselines]
    for scenario in SCENARIOS:
        lines += ["", f"{scenario}:", "| target | msgs/s per round | µs broker CPU/msg per round | "]
        lines[-1] += " | ".join(f"ratio to {name}: per round, median" for name in names) + " | goal (≥ 0.95) |"
        lines.append("|---|---|---|" + "---|" * len(names) + "---|")
        for one in series:
            runs = one.runs[scenario]
            rates = " · ".join(common.fmt(r.msgs_per_s, ",.0f") + (" NOISY" if r.noisy else "") for r in runs)
            cpu = " · ".join(common.fmt(us_per_msg(r), ".2f") for r in runs)
            cells, medians = [], []
            for base in baselines:
                each = ratios(runs, base.runs[scenario])
                median = statistics.median(each) if each else None
                if base is not one and median is not None:
                    medians.append(median)
                cells.append(f"{' · '.join(f'{x:.3f}' for x in each)}, **{common.fmt(median, '.3f')}**")
            goal = "-" if not medians else ("met" if min(medians) >= 1 - GOAL else "NOT met")
            lines.append(f"| {one.target.label} | {rates} | {cpu} | {' | '.join(cells)} | {goal} |")
    return lines


def memory_lines(vhosts: int, queues_total: int, rss: dict[str, int], took: list[float]) -> list[str]:
    """Memory per idle vhost (X against Y once started) and per idle queue (X before and after)."""
    tenth = max(1, len(took) // 10)
    return [
        f"RSS once started: X with {vhosts} vhosts {rss['x0'] / 2**20:.1f} MiB, Y without vhosts "
        f"{rss['y0'] / 2**20:.1f} MiB -> {(rss['x0'] - rss['y0']) / vhosts / 1024:.1f} KiB per idle vhost",
        f"{queues_total} idle queues declared in {sum(took):.1f} s (first {tenth} vhosts {sum(took[:tenth]):.1f} s, "
        f"last {tenth} {sum(took[-tenth:]):.1f} s): X's RSS {rss['x0'] / 2**20:.1f} -> {rss['x1'] / 2**20:.1f} MiB "
        f"-> {(rss['x1'] - rss['x0']) / queues_total / 1024:.2f} KiB per idle queue",
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every target (default 3)")
    ap.add_argument("--count", type=float, default=1.0, help="scale the scenarios' 100k messages (default 1.0)")
    ap.add_argument("--vhosts", type=int, default=100, help="vhosts on node X (default 100)")
    ap.add_argument("--queues", type=int, default=100, help="idle queues per vhost on node X (default 100)")
    ap.add_argument("--wait-quiet", type=float, default=30.0, metavar="SECONDS", help="before each run (default 30)")
    ap.add_argument(
        "--before",
        type=Path,
        metavar="CHECKOUT",
        help="also measure node Z, this build from before vhosts (git archive 353a0c2 | tar -x -C CHECKOUT)",
    )
    ap.add_argument("--work", type=Path, help="directory for configs, data and logs (default: a new temporary one)")
    args = ap.parse_args(argv)
    if args.vhosts < 1 or args.queues < 1 or args.rounds < 1:
        ap.error("--vhosts, --queues and --rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stomp_bench.raise_nofile()
    work = args.work or Path(tempfile.mkdtemp(prefix="vhosts-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    vhosts = vhost_names(args.vhosts)
    print(f"work dir {work}; {MESHGATE}; {os.uname().nodename}, {os.cpu_count()} CPUs")
    nodes: list[Node] = []
    try:
        x = start_node(work, "vhosts-x", vhosts)
        nodes.append(x)
        y = start_node(work, "plain-y", [])
        nodes.append(y)
        if args.before is not None:
            nodes.append(start_node(work, "before-z", [], args.before.resolve()))
        rss = {"x0": settled_rss(x.process.pid), "y0": settled_rss(y.process.pid)}
        took = declare_idle_queues(x, vhosts, args.queues)
        check_queues_stayed(x, vhosts, args.queues)
        rss["x1"] = settled_rss(x.process.pid)
        memory = memory_lines(len(vhosts), len(vhosts) * args.queues, rss, took)
        print("\n".join(memory), flush=True)
        measured = vhosts[min(MEASURED_VHOST, len(vhosts) - 1)]
        targets = [
            Target(f"X vhost {measured}", x, measured),
            Target("X vhost /", x, "localhost"),
            Target("Y no vhosts", y, "localhost"),
        ]
        if args.before is not None:
            targets.append(Target("Z before vhosts", nodes[-1], "localhost"))
        series = [Series(t, {s: [] for s in SCENARIOS}) for t in targets]
        for target in targets[:1] + targets[2:]:  # each node once, unreported
            warm_up(target, args)
        for rnd in range(args.rounds):
            shift = rnd % len(series)
            order = series[shift:] + series[:shift]  # each target goes first in some round
            print(f"round {rnd + 1}/{args.rounds}: {', '.join(s.target.label for s in order)}", flush=True)
            for scenario in SCENARIOS:
                for one in order:
                    one.runs[scenario].append(measure(one.target, scenario, args))
        print("\n".join(["", *memory, *summary(series, series[2:])]))
        return 0 if all(r.ok for s in series for runs in s.runs.values() for r in runs) else 1
    finally:
        for node in nodes:
            node.stop()


if __name__ == "__main__":
    sys.exit(main())
