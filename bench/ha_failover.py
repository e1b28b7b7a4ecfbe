#!/usr/bin/env python3
"""Failover time of a shared-store pair: from ``kill -9`` of the active broker to the
first message consumed from the standby (docs/ha.md).

Each run starts two brokers on one data directory (the second waits as the
standby), sends ``--messages`` persistent messages with receipts to the first,
kills it with SIGKILL, then dials the standby's STOMP port every 10 ms until it
answers, subscribes, and stops the clock at the first MESSAGE. It then drains
the queue and checks every receipted message came back.

    .venv/bin/python bench/ha_failover.py [--runs 7] [--messages 1000]
        [--activemq] [--activemq-runs 5] [--activemq-lock-sleep-ms 100]

With ``--activemq`` the same is measured for Debian's ActiveMQ 5.17 as a
shared-file-system master/slave pair: two brokers on one KahaDB directory
(bench/activemq.sh with ACTIVEMQ_KAHADB_DIR), the slave polling KahaDB's lock
every ``--activemq-lock-sleep-ms`` (ActiveMQ's default is 10000 ms; 0 keeps it).
Everything runs on 127.0.0.1 in a temporary directory; only the processes this
script started are stopped, by pid."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent
MESHGATE = Path(sys.executable).with_name("meshgate")
ACTIVEMQ_SH = ROOT / "bench" / "activemq.sh"


class BenchError(Exception):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM what is still running of ``procs`` (started here), SIGKILL after 20 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def wait_for(predicate, what: str, timeout: float, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# -- a minimal STOMP 1.2 client ---------------------------------------------------------------


class Stomp:
    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.send(b"CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:0,0\n\n\0")
        command, headers, _ = self.frame()
        if command != "CONNECTED":
            raise BenchError(f"CONNECT answered with {command} {headers}")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> tuple[str, dict[str, str], bytes]:
        while True:
            while self.buf[:1] in (b"\n", b"\r"):  # heart-beats
                self.buf = self.buf[1:]
            end = self.buf.find(b"\n\n")
            if end >= 0:
                head = self.buf[:end].decode().split("\n")
                headers = dict(line.split(":", 1) for line in head[1:] if ":" in line)
                start = end + 2
                if "content-length" in headers:
                    stop = start + int(headers["content-length"])
                    if len(self.buf) > stop:
                        body, self.buf = self.buf[start:stop], self.buf[stop + 1:]
                        return head[0], headers, body
                else:
                    stop = self.buf.find(b"\0", start)
                    if stop >= 0:
                        body, self.buf = self.buf[start:stop], self.buf[stop + 1:]
                        return head[0], headers, body
            data = self.sock.recv(1 << 16)
            if not data:
                raise BenchError("the broker closed the connection")
            self.buf += data

    def produce(self, queue: str, count: int) -> None:
        """Persistent messages, each with a receipt; returns once the last is receipted
        (receipts come in order)."""
        frames = b"".join(
            f"SEND\ndestination:{queue}\npersistent:true\nreceipt:r{i}\ncontent-type:text/plain\n\n"
            f"m{i:06d}\0".encode() for i in range(count))
        self.send(frames)
        while True:
            command, headers, body = self.frame()
            if command == "ERROR":
                raise BenchError(f"ERROR: {headers} {body[:200]!r}")
            if command == "RECEIPT" and headers.get("receipt-id") == f"r{count - 1}":
                return

    def subscribe(self, queue: str) -> None:
        self.send(f"SUBSCRIBE\nid:0\ndestination:{queue}\nack:auto\n\n\0".encode())

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def consume_after_kill(port: int, queue: str, killed: float, deadline_s: float) -> tuple[float, float, Stomp]:
    """Dial every 10 ms until the port answers a CONNECT; subscribe; the time of
    the port answering and of the first MESSAGE, from ``killed``."""
    deadline = killed + deadline_s
    while True:
        try:
            client = Stomp(port, timeout=deadline_s)
            break
        except (ConnectionRefusedError, ConnectionResetError, BenchError, TimeoutError, OSError):
            if time.perf_counter() > deadline:
                raise BenchError(f"port {port} did not answer within {deadline_s} s of the kill") from None
            time.sleep(0.01)
    answered = time.perf_counter() - killed
    client.subscribe(queue)
    command, headers, body = client.frame()
    if command != "MESSAGE":
        raise BenchError(f"expected a MESSAGE, got {command} {headers}")
    return answered, time.perf_counter() - killed, client


def drain(client: Stomp, expected: int) -> int:
    """Count the MESSAGEs after the first, until ``expected`` in all or 5 s of silence."""
    got = 1
    client.sock.settimeout(5.0)
    try:
        while got < expected:
            command, _, _ = client.frame()
            got += command == "MESSAGE"
    except TimeoutError:
        pass
    return got


@dataclass
class Run:
    answered: float  # port answering a CONNECT, seconds after the kill
    consumed: float  # first MESSAGE
    delivered: int  # of the receipted messages


def summary(label: str, runs: list[Run], messages: int) -> str:
    consumed = [r.consumed for r in runs]
    answered = [r.answered for r in runs]
    lost = sum(messages - r.delivered for r in runs)
    return (f"| {label} | {len(runs)} | {statistics.median(consumed):.2f} s | {min(consumed):.2f}–{max(consumed):.2f} s"
            f" | {statistics.median(answered):.2f} s | {lost} |")


# -- Meshgate --------------------------------------------------------------------------------


def meshgate_run(work: Path, messages: int, poll_ms: int) -> Run:
    data = work / "data"
    ports = [free_port(), free_port()]
    procs: list[subprocess.Popen] = []
    try:
        for index, port in enumerate(ports):
            log = open(work / f"broker{index}.err", "wb")
            out = open(work / f"broker{index}.out", "wb")
            procs.append(subprocess.Popen(
                [str(MESHGATE), "broker", "--name", "ha", "--stomp", f"{HOST}:{port}", "--data", str(data),
                 "--set", "ha.mode=shared-store", "--set", f"ha.poll_interval_ms={poll_ms}"],
                stdout=out, stderr=log, stdin=subprocess.DEVNULL, cwd=work))
            if index == 0:
                wait_for(lambda: b"listening on stomp" in (work / "broker0.out").read_bytes(),
                         "the active broker to listen", 30)
            else:
                wait_for(lambda: b"waiting for its lock" in (work / "broker1.err").read_bytes(),
                         "the standby to wait", 30)
        queue = "/queue/ha-" + uuid.uuid4().hex[:8]
        producer = Stomp(ports[0])
        producer.produce(queue, messages)
        killed = time.perf_counter()
        os.kill(procs[0].pid, signal.SIGKILL)
        producer.close()
        answered, consumed, consumer = consume_after_kill(ports[1], queue, killed, 30.0)
        delivered = drain(consumer, messages)
        consumer.close()
        return Run(answered, consumed, delivered)
    finally:
        stop(procs)


# -- ActiveMQ --------------------------------------------------------------------------------


def activemq(action: str, data: Path, port: int, env: dict[str, str]) -> None:
    result = subprocess.run(["bash", str(ACTIVEMQ_SH), action, str(data), str(port)], env={**os.environ, **env},
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise BenchError(f"activemq.sh {action} {data}: {result.stderr.strip()[-800:]}")


def activemq_run(work: Path, messages: int, lock_sleep_ms: int) -> Run:
    kahadb = work / "kahadb"
    brokers = [(work / "master", free_port()), (work / "slave", free_port())]
    env = {"ACTIVEMQ_KAHADB_DIR": str(kahadb), "ACTIVEMQ_HEAP": "512m"}
    if lock_sleep_ms:
        env["ACTIVEMQ_LOCK_SLEEP_MS"] = str(lock_sleep_ms)
    started: list[tuple[Path, int]] = []
    try:
        master, slave = brokers
        activemq("start", master[0], master[1], env)
        started.append(master)
        activemq("start", slave[0], slave[1], {**env, "ACTIVEMQ_NO_WAIT": "1"})
        started.append(slave)
        # SharedFileLocker: "Database …/lock is locked by another server. This broker is now in slave mode …"
        wait_for(lambda: b"is locked by another server" in _read(slave[0] / "activemq.out"),
                 "the ActiveMQ slave to wait on the lock", 60)
        queue = "/queue/ha-" + uuid.uuid4().hex[:8]
        producer = Stomp(master[1])
        producer.produce(queue, messages)
        pid = int((master[0] / "activemq.pid").read_text())
        killed = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        producer.close()
        answered, consumed, consumer = consume_after_kill(slave[1], queue, killed, 120.0)
        delivered = drain(consumer, messages)
        consumer.close()
        return Run(answered, consumed, delivered)
    finally:
        for data, port in started:
            try:
                activemq("stop", data, port, env)
            except BenchError as error:
                print(f"  (stopping {data}: {error})", file=sys.stderr)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="Meshgate runs (0: ActiveMQ alone)")
    parser.add_argument("--messages", type=int, default=1000, help="persistent messages sent before the kill")
    parser.add_argument("--poll-ms", type=int, default=100, help="the standby's ha.poll_interval_ms")
    parser.add_argument("--activemq", action="store_true", help="also measure an ActiveMQ 5.17 master/slave pair")
    parser.add_argument("--activemq-runs", type=int, default=5)
    parser.add_argument("--activemq-lock-sleep-ms", type=int, default=100,
                        help="the slave's lockAcquireSleepInterval (0: ActiveMQ's default, 10000 ms)")
    args = parser.parse_args(argv)

    results: list[str] = []
    work_root = Path(tempfile.mkdtemp(prefix="ha-failover-"))
    try:
        runs = []
        for i in range(args.runs):
            work = work_root / f"meshgate-{i}"
            work.mkdir()
            run = meshgate_run(work, args.messages, args.poll_ms)
            print(f"meshgate run {i + 1}: port answered {run.answered:.3f} s, first message {run.consumed:.3f} s "
                  f"after kill -9; {run.delivered}/{args.messages} delivered", flush=True)
            runs.append(run)
        if runs:
            results.append(summary(f"Meshgate (poll {args.poll_ms} ms)", runs, args.messages))
        if args.activemq:
            runs = []
            sleep = args.activemq_lock_sleep_ms
            for i in range(args.activemq_runs):
                work = work_root / f"activemq-{i}"
                work.mkdir()
                run = activemq_run(work, args.messages, sleep)
                print(f"activemq run {i + 1}: port answered {run.answered:.3f} s, first message "
                      f"{run.consumed:.3f} s after kill -9; {run.delivered}/{args.messages} delivered", flush=True)
                runs.append(run)
            label = f"ActiveMQ 5.17 (lockAcquireSleepInterval {sleep or 10000} ms)"
            results.append(summary(label, runs, args.messages))
    except BenchError as error:
        print(f"ha_failover: {error} (work dir kept: {work_root})", file=sys.stderr)
        return 1
    print()
    print(f"kill -9 of the active broker to the first message consumed from the standby; "
          f"{args.messages} persistent messages receipted before the kill")
    print()
    print("| broker | runs | median | range | port answers (median) | messages lost |")
    print("|---|---|---|---|---|---|")
    for line in results:
        print(line)
    shutil.rmtree(work_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
