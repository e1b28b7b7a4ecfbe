#!/usr/bin/env python3
"""Pipelining STOMP 1.2 load generator for Meshgate and any other STOMP broker.

Plain STOMP 1.2 frames over TCP, no client library: producers write pre-built
frames in large batches, consumers read big chunks and split frames with a
lean parser, and producer and consumers run in separate processes so the
client is not the bottleneck on a 2-core machine.  See bench/README.md.

    python bench/stomp_bench.py --host 127.0.0.1 --port 61613 \
        [--broker-pid PID ...] [--scenario NAME ...] [--label meshgate] [--count 0.1] \
        [--consume-host H --consume-port P [--settle S]]

With --consume-host/--consume-port, producers connect to --host/--port and
consumers to the other broker (e.g. node B of a mesh or a network of brokers).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import queue
import resource
import select
import selectors
import socket
import sys
import time
import uuid
from array import array
from dataclasses import dataclass, field, replace
from typing import Any

try:
    import psutil
except ImportError:  # throughput and latency still work without it
    psutil = None

RECV_SIZE = 1 << 20
# ~256 KiB per sendall: big enough to amortise syscalls, small enough that the
# per-batch timestamp is accurate to well under a millisecond.
BATCH_BYTES = 256 * 1024
RECEIPT_WINDOW = 1000
# Other processes using more than this much CPU during a scenario flag it NOISY.
NOISY_PCT = 30.0
TS_KEY = b"\nbench-ts:"
CL_KEY = b"\ncontent-length:"
ACK_KEY = b"\nack:"
RECEIPT_ID_KEY = b"\nreceipt-id:"
MESSAGE_KEY = b"\nmessage:"

Frame = tuple[bytes, bytes]  # (command line + headers, body)


class BrokerError(Exception):
    """The broker sent an ERROR frame or an unexpected reply."""


class ScenarioFailed(Exception):
    """A scenario could not produce a valid figure."""


# --------------------------------------------------------------------------
# Wire level


@dataclass(frozen=True)
class ConnParams:
    host: str
    port: int
    vhost: str = "localhost"
    login: str | None = None
    passcode: str | None = None
    io_timeout: float = 30.0

    def connect_frame(self) -> bytes:
        lines = ["CONNECT", "accept-version:1.2", f"host:{self.vhost}", "heart-beat:0,0"]
        if self.login is not None:
            lines.append(f"login:{self.login}")
        if self.passcode is not None:
            lines.append(f"passcode:{self.passcode}")
        return ("\n".join(lines) + "\n\n").encode() + b"\0"


def header(head: bytes, key: bytes) -> bytes | None:
    """Value of the first header matching key (b"\\nname:"), raw/escaped as sent.

    The first occurrence wins, as STOMP 1.2 requires for repeated headers.
    """
    i = head.find(key)
    if i < 0:
        return None
    i += len(key)
    j = head.find(b"\n", i)
    value = head[i:] if j < 0 else head[i:j]
    return value[:-1] if value.endswith(b"\r") else value


def split_frames(buf: bytes, pos: int = 0) -> tuple[list[Frame], int]:
    """Split the complete frames off buf; return them and the first unparsed offset.

    Bodies of MESSAGE frames are not sliced out: the bench never reads payloads
    and copying 64 KiB per message would cost more than the parsing.
    """
    frames: list[Frame] = []
    n = len(buf)
    find = buf.find
    while pos < n:
        if buf[pos] in (10, 13):  # EOLs / heart-beats between frames
            pos += 1
            continue
        eol = find(b"\n", pos)
        if eol < 0:
            break
        if buf[eol - 1] == 13:
            hend, skip = find(b"\r\n\r\n", pos), 4
        else:
            hend, skip = find(b"\n\n", eol), 2
        if hend < 0:
            break
        head = buf[pos:hend]
        start = hend + skip
        length = header(head, CL_KEY)
        if length is not None:
            end = start + int(length)
            if end >= n:
                break
        else:
            end = find(b"\0", start)
            if end < 0:
                break
        frames.append((head, b"" if head.startswith(b"MESSAGE") else buf[start:end]))
        pos = end + 1
    return frames, pos


def describe_error(head: bytes, body: bytes) -> str:
    message = header(head, MESSAGE_KEY) or head.split(b"\n", 1)[0]
    text = message.decode(errors="replace")
    if body:
        text += ": " + body[:200].decode(errors="replace").strip()
    return text


class StompConn:
    """A blocking STOMP connection with an incremental frame buffer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.pending: list[Frame] = []

    def pull(self) -> list[Frame]:
        """Frames already buffered, else block for one recv and split it."""
        if self.pending:
            frames, self.pending = self.pending, []
            return frames
        data = self.sock.recv(RECV_SIZE)
        if not data:
            raise ConnectionError("broker closed the connection")
        self.buf = self.buf + data if self.buf else data
        frames, pos = split_frames(self.buf)
        self.buf = self.buf[pos:]
        return frames

    def poll(self) -> list[Frame]:
        """Like pull() but returns [] instead of waiting."""
        if self.pending:
            return self.pull()
        # A socket with a timeout polls before recv, so MSG_DONTWAIT alone
        # would still wait; ask select first.
        readable, _, _ = select.select([self.sock], [], [], 0)
        return self.pull() if readable else []

    def next_frame(self) -> Frame:
        while not self.pending:
            self.pending = self.pull()
        return self.pending.pop(0)

    def wait_receipt(self, receipt_id: bytes) -> None:
        """Block until RECEIPT receipt_id; frames read meanwhile other than RECEIPTs are kept."""
        kept: list[Frame] = []
        while True:
            head, body = self.next_frame()
            if head.startswith(b"ERROR"):
                raise BrokerError(describe_error(head, body))
            if head.startswith(b"RECEIPT") and header(head, RECEIPT_ID_KEY) == receipt_id:
                self.pending = kept + self.pending
                return
            if not head.startswith(b"RECEIPT"):
                kept.append((head, body))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def open_stomp(params: ConnParams) -> StompConn:
    sock = socket.create_connection((params.host, params.port), timeout=params.io_timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = StompConn(sock)
    sock.sendall(params.connect_frame())
    head, body = conn.next_frame()
    if not head.startswith(b"CONNECTED"):
        conn.close()
        raise BrokerError(describe_error(head, body))
    return conn


def disconnect(conn: StompConn) -> None:
    """DISCONNECT with a receipt so everything sent before has been processed."""
    try:
        conn.sock.sendall(b"DISCONNECT\nreceipt:bench-bye\n\n\0")
        conn.wait_receipt(b"bench-bye")
    finally:
        conn.close()


def subscribe(conn: StompConn, destination: str, ack: str, prefetch: int | None, sub_id: int) -> None:
    """SUBSCRIBE and wait for its receipt, so no message can be missed afterwards."""
    lines = [f"SUBSCRIBE\nid:{sub_id}\ndestination:{destination}\nack:{ack}"]
    if prefetch is not None:
        lines.append(f"activemq.prefetchSize:{prefetch}")
    receipt = f"bench-sub-{sub_id}"
    lines.append(f"receipt:{receipt}")
    conn.sock.sendall(("\n".join(lines) + "\n\n").encode() + b"\0")
    conn.wait_receipt(receipt.encode())


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


# --------------------------------------------------------------------------
# Producer process


@dataclass(frozen=True)
class PubSpec:
    destination: str
    count: int
    size: int
    persistent: bool
    receipts: bool


def send_head(spec: PubSpec) -> bytes:
    head = b"SEND\ndestination:%s\ncontent-length:%d\n" % (spec.destination.encode(), spec.size)
    if spec.persistent:
        head += b"persistent:true\n"
    return head


def payload(size: int) -> bytes:
    # No NUL inside, so even a broker that ignores content-length parses it.
    return (b"meshgate-bench-" * (size // 15 + 1))[:size]


def raise_on_error(frames: list[Frame]) -> None:
    for head, body in frames:
        if head.startswith(b"ERROR"):
            raise BrokerError(describe_error(head, body))


def publish(conn: StompConn, spec: PubSpec) -> dict[str, Any]:
    """Fire-and-forget SENDs in ~BATCH_BYTES writes; one timestamp per batch."""
    head = send_head(spec) + b"bench-ts:"
    tail = b"\n\n" + payload(spec.size) + b"\0"
    per_batch = max(1, BATCH_BYTES // (len(head) + len(tail) + 19))
    sent = 0
    first = time.time_ns()
    while sent < spec.count:
        k = min(per_batch, spec.count - sent)
        frame = head + b"%d" % time.time_ns() + tail
        conn.sock.sendall(frame * k)
        sent += k
        raise_on_error(conn.poll())
    return {"first_send": first, "last_send": time.time_ns(), "sent": sent}


def publish_with_receipts(conn: StompConn, spec: PubSpec) -> dict[str, Any]:
    """Every SEND asks for a receipt, with up to RECEIPT_WINDOW outstanding."""
    head = send_head(spec)
    tail = b"\n\n" + payload(spec.size) + b"\0"
    chunk = max(1, min(RECEIPT_WINDOW // 4, BATCH_BYTES // (len(head) + len(tail) + 40)))
    sent_at = array("q", bytes(8 * spec.count))
    receipt_lat = array("q")
    sent = done = 0
    first = time.time_ns()
    while done < spec.count:
        want = min(RECEIPT_WINDOW - (sent - done), spec.count - sent, chunk)
        if want > 0 and (want == chunk or sent + want == spec.count):
            ts = time.time_ns()
            conn.sock.sendall(
                b"".join(head + b"receipt:%d\nbench-ts:%d" % (seq, ts) + tail for seq in range(sent, sent + want))
            )
            sent_at[sent : sent + want] = array("q", [ts]) * want
            sent += want
        window_full = RECEIPT_WINDOW - (sent - done) < chunk
        frames = conn.pull() if (window_full or sent == spec.count) else conn.poll()
        now = time.time_ns()
        for fhead, body in frames:
            if fhead.startswith(b"RECEIPT"):
                receipt_lat.append(now - sent_at[int(header(fhead, RECEIPT_ID_KEY) or b"0")])
                done += 1
            elif fhead.startswith(b"ERROR"):
                raise BrokerError(describe_error(fhead, body))
    return {
        "first_send": first,
        "last_send": time.time_ns(),
        "sent": sent,
        "receipt_lat": receipt_lat.tobytes(),
    }


def producer_main(params: ConnParams, spec: PubSpec, out: Any, go: Any, wait_s: float) -> None:
    try:
        conn = open_stomp(params)
        out.put(("ready", "producer", None))
        if not go.wait(wait_s):
            raise TimeoutError("never told to start")
        result = publish_with_receipts(conn, spec) if spec.receipts else publish(conn, spec)
        disconnect(conn)
        result["cpu"] = cpu_seconds()
        out.put(("result", "producer", result))
    except Exception as exc:  # noqa: BLE001 - every failure must reach the parent
        out.put(("error", "producer", f"{type(exc).__name__}: {exc}"))


# --------------------------------------------------------------------------
# Consumer process


@dataclass(frozen=True)
class SubSpec:
    destination: str
    ack: str
    prefetch: int | None
    expected: int  # per subscription


@dataclass
class Tally:
    """What a consumer process has seen, across its subscriptions."""

    counts: list[int]
    latencies: array = field(default_factory=lambda: array("q"))
    first_recv: int = 0
    last_recv: int = 0


def absorb(frames: list[Frame], now: int, tally: Tally, acks: list[bytes] | None) -> int:
    """Count MESSAGE frames, record their latency, queue ACKs; the hot loop."""
    n = 0
    lat = tally.latencies
    for head, body in frames:
        if head.startswith(b"MESSAGE"):
            n += 1
            i = head.find(TS_KEY)
            if i >= 0:
                j = head.find(b"\n", i + 10)
                lat.append(now - int(head[i + 10 : j] if j > 0 else head[i + 10 :]))
            if acks is not None:
                acks.append(b"ACK\nid:%s\n\n\0" % header(head, ACK_KEY))
        elif head.startswith(b"ERROR"):
            raise BrokerError(describe_error(head, body))
    return n


def consume(conns: list[StompConn], spec: SubSpec, idle_s: float) -> Tally:
    """Read all subscriptions until each has its expected count or idle_s of silence."""
    tally = Tally(counts=[0] * len(conns))
    client_ack = spec.ack != "auto"
    sel = selectors.DefaultSelector()
    for idx, conn in enumerate(conns):
        sel.register(conn.sock, selectors.EVENT_READ, idx)
    # Frames that arrived together with the SUBSCRIBE receipt.
    ready = [(i, c) for i, c in enumerate(conns) if c.pending]
    remaining = spec.expected * len(conns)
    while remaining > 0:
        if not ready:
            events = sel.select(idle_s)
            if not events:
                break  # the broker went quiet: report what arrived
            ready = [(key.data, conns[key.data]) for key, _ in events]
        for idx, conn in ready:
            frames = conn.pull()
            now = time.time_ns()
            acks: list[bytes] | None = [] if client_ack else None
            got = absorb(frames, now, tally, acks)
            if acks:
                conn.sock.sendall(b"".join(acks))
            if got:
                tally.first_recv = tally.first_recv or now
                tally.last_recv = now
                tally.counts[idx] += got
                remaining -= got
        ready = []
    sel.close()
    return tally


def consumer_main(params: ConnParams, spec: SubSpec, n_subs: int, role: str, out: Any, idle_s: float) -> None:
    conns: list[StompConn] = []
    try:
        for sub_id in range(n_subs):
            conn = open_stomp(params)
            conns.append(conn)
            subscribe(conn, spec.destination, spec.ack, spec.prefetch, sub_id)
        out.put(("ready", role, None))
        tally = consume(conns, spec, idle_s)
        for conn in conns:
            disconnect(conn)
        out.put(
            (
                "result",
                role,
                {
                    "counts": tally.counts,
                    "first_recv": tally.first_recv,
                    "last_recv": tally.last_recv,
                    "lat": tally.latencies.tobytes(),
                    "cpu": cpu_seconds(),
                },
            )
        )
    except Exception as exc:  # noqa: BLE001 - every failure must reach the parent
        out.put(("error", role, f"{type(exc).__name__}: {exc}"))
    finally:
        for conn in conns:
            conn.close()


def drain(params: ConnParams, destination: str, idle_s: float = 2.0, max_s: float = 30.0) -> int:
    """Best-effort removal of what a failed run left on a queue."""
    conn = open_stomp(params)
    try:
        subscribe(conn, destination, "auto", None, 0)
        conn.sock.settimeout(idle_s)
        drained = 0
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            try:
                frames = conn.pull()
            except TimeoutError:
                break
            drained += sum(1 for head, _ in frames if head.startswith(b"MESSAGE"))
        conn.sock.settimeout(params.io_timeout)
        disconnect(conn)
        return drained
    finally:
        conn.close()


# --------------------------------------------------------------------------
# Idle-connection holder process


def open_idle(params: ConnParams) -> socket.socket:
    sock = socket.create_connection((params.host, params.port), timeout=params.io_timeout)
    sock.sendall(params.connect_frame())
    return sock


def expect_connected(sock: socket.socket) -> None:
    data = b""
    while b"\0" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("broker closed the connection during CONNECT")
        data += chunk
    if not data.lstrip(b"\r\n").startswith(b"CONNECTED"):
        raise BrokerError(data.split(b"\n", 1)[0].decode(errors="replace"))


def holder_main(params: ConnParams, count: int, role: str, out: Any, release: Any, hold_s: float) -> None:
    socks: list[socket.socket] = []
    wave = 100  # pipelined CONNECTs per round trip; small enough not to overflow the accept backlog
    try:
        t0 = time.monotonic()
        for base in range(0, count, wave):
            group = [open_idle(params) for _ in range(min(wave, count - base))]
            socks.extend(group)
            for sock in group:
                expect_connected(sock)
        out.put(("ready", role, {"opened": len(socks), "seconds": time.monotonic() - t0}))
        release.wait(hold_s)
    except Exception as exc:  # noqa: BLE001 - every failure must reach the parent
        out.put(("error", role, f"{type(exc).__name__}: {exc} (after {len(socks)} connections)"))
    finally:
        for sock in socks:
            try:
                sock.sendall(b"DISCONNECT\n\n\0")
                sock.close()
            except OSError:
                pass
        out.put(("closed", role, None))


# --------------------------------------------------------------------------
# Broker observation


BrokerPids = int | tuple[int, ...] | None  # several brokers (a pair) are summed


def broker_procs(pid: BrokerPids) -> list[Any]:
    if pid is None or psutil is None:
        return []
    procs = []
    for one in (pid,) if isinstance(pid, int) else pid:
        try:
            root = psutil.Process(one)
            procs += [root, *root.children(recursive=True)]
        except psutil.Error:
            pass
    return procs


def broker_cpu(pid: BrokerPids) -> tuple[float, ...] | None:
    """CPU seconds of each broker (with its children), in the order given."""
    if pid is None or psutil is None:
        return None
    each = []
    for one in (pid,) if isinstance(pid, int) else pid:
        total = 0.0
        for proc in broker_procs(one):
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        each.append(total)
    return tuple(each)


def system_busy() -> float | None:
    """CPU seconds the whole machine spent busy, to spot other load during a run."""
    if psutil is None:
        return None
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "steal", 0.0)


@dataclass(frozen=True)
class CpuSample:
    each_broker: tuple[float, ...] | None
    system: float | None

    @property
    def broker(self) -> float | None:
        return None if self.each_broker is None else sum(self.each_broker)

    @classmethod
    def take(cls, pid: BrokerPids) -> CpuSample:
        return cls(broker_cpu(pid), system_busy())


def broker_rss(pid: BrokerPids) -> int | None:
    procs = broker_procs(pid)
    if not procs:
        return None
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


# --------------------------------------------------------------------------
# Scenarios


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # queue | topic | idle
    count: int  # messages, or connections for idle
    size: int = 256
    persistent: bool = False
    receipts: bool = False
    ack: str = "auto"
    prefetch: int | None = None
    subscribers: int = 1


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("queue-256", "queue", 100_000),
        Scenario("queue-256-persistent", "queue", 100_000, persistent=True, receipts=True),
        Scenario("queue-64k", "queue", 10_000, size=64 * 1024),
        Scenario("queue-1m", "queue", 1_000, size=1024 * 1024),
        Scenario("queue-16m", "queue", 64, size=16 * 1024 * 1024),
        Scenario("client-individual", "queue", 100_000, ack="client-individual", prefetch=1000),
        Scenario("topic-fanout", "topic", 10_000, subscribers=10),
        Scenario("idle-connections", "idle", 10_000),
    )
}


@dataclass
class Result:
    scenario: str
    ok: bool
    reason: str = ""
    messages: int = 0
    msgs_per_s: float | None = None
    mb_per_s: float | None = None
    latency_ms: tuple[float, float, float] | None = None
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


@dataclass
class RunContext:
    params: ConnParams
    broker_pid: BrokerPids
    scale: float
    timeout_s: float
    idle_s: float
    fanout_procs: int
    run_id: str
    wait_quiet_s: float = 0.0
    consume_params: ConnParams | None = None  # consumers' broker, if not params'
    settle_s: float = 0.0  # pause between the consumers' SUBSCRIBE receipts and the first SEND

    @property
    def consumer_params(self) -> ConnParams:
        return self.consume_params or self.params


def percentiles_ms(raw: list[bytes]) -> tuple[float, float, float] | None:
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


def scaled(n: int, scale: float) -> int:
    return max(1, round(n * scale))


def run_messaging(sc: Scenario, rc: RunContext) -> Result:
    count = scaled(sc.count, rc.scale)
    prefix = "/queue/" if sc.kind == "queue" else "/topic/"
    dest = f"{prefix}bench-{sc.name}-{rc.run_id}-{uuid.uuid4().hex[:6]}"
    sub_spec = SubSpec(dest, sc.ack, sc.prefetch, count)
    pub_spec = PubSpec(dest, count, sc.size, sc.persistent, sc.receipts)
    deadline = time.monotonic() + rc.timeout_s
    kids = Children()
    consumer_roles = []
    try:
        nproc = min(rc.fanout_procs, sc.subscribers) if sc.kind == "topic" else 1
        for i, n_subs in enumerate(split_evenly(sc.subscribers, nproc)):
            role = f"consumer{i}"
            consumer_roles.append(role)
            kids.start(role, consumer_main, rc.consumer_params, sub_spec, n_subs, role, kids.events, rc.idle_s)
        kids.await_all("ready", consumer_roles, deadline)
        if rc.settle_s > 0:
            # Consumers on another broker: let their demand reach the producer's broker.
            time.sleep(rc.settle_s)
        go = kids.ctx.Event()
        kids.start("producer", producer_main, rc.params, pub_spec, kids.events, go, rc.timeout_s)
        kids.await_all("ready", ["producer"], deadline)
        cpu0 = CpuSample.take(rc.broker_pid)
        go.set()
        results = kids.await_all("result", ["producer", *consumer_roles], deadline)
        cpu1 = CpuSample.take(rc.broker_pid)
        return summarise(sc, count, results, consumer_roles, cpu0, cpu1)
    except ScenarioFailed as exc:
        if sc.kind == "queue":
            exc.add_note(cleanup_note(rc.consumer_params, dest))
        raise
    finally:
        kids.stop()


def cleanup_note(params: ConnParams, dest: str) -> str:
    try:
        # A short I/O timeout: a hung broker must not add 30 s to every failure.
        return f"drained {drain(replace(params, io_timeout=5.0), dest)} leftover messages from {dest}"
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort
        return f"could not drain {dest}: {exc}"


def split_evenly(total: int, parts: int) -> list[int]:
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def summarise(
    sc: Scenario,
    count: int,
    results: dict[str, Any],
    consumer_roles: list[str],
    cpu0: CpuSample,
    cpu1: CpuSample,
) -> Result:
    prod = results["producer"]
    cons = [results[r] for r in consumer_roles]
    counts = [c for r in cons for c in r["counts"]]
    delivered = sum(counts)
    last_recv = max(r["last_recv"] for r in cons)
    if delivered == 0 or last_recv <= prod["first_send"]:
        raise ScenarioFailed("no message was delivered")
    elapsed = (last_recv - prod["first_send"]) / 1e9
    res = Result(sc.name, ok=True, messages=delivered)
    res.msgs_per_s = delivered / elapsed
    res.mb_per_s = delivered * sc.size / elapsed / 1e6
    res.latency_ms = percentiles_ms([r["lat"] for r in cons])
    client_cpu = [r["cpu"] for r in (prod, *cons)]
    res.client_cpu_pct = 100 * max(client_cpu) / elapsed
    res.other_cpu_pct = other_cpu_pct(cpu0, cpu1, sum(client_cpu), elapsed)
    if cpu0.broker is not None and cpu1.broker is not None:
        res.broker_cpu_pct = 100 * (cpu1.broker - cpu0.broker) / elapsed
        if len(cpu0.each_broker) > 1:  # which node of a pair is the busy one
            each = (100 * (b - a) / elapsed for a, b in zip(cpu0.each_broker, cpu1.each_broker, strict=True))
            res.notes.append("per broker " + " + ".join(f"{pct:.0f}%" for pct in each))
    if res.noisy:
        res.notes.append(f"NOISY: other processes used {res.other_cpu_pct:.0f}% CPU")
    if "receipt_lat" in prod:
        rec = percentiles_ms([prod["receipt_lat"]])
        if rec:
            res.notes.append("receipt p50/p99/max {:.1f}/{:.1f}/{:.1f} ms".format(*rec))
    if sc.subscribers > 1:
        res.notes.append(f"{len(counts)} subs, each got {min(counts)}..{max(counts)} of {count}")
    short = [c for c in counts if c < count]
    if short:
        res.ok = False
        res.reason = f"incomplete: {len(short)} of {len(counts)} subscriptions short, min {min(counts)}/{count}"
    return res


def other_cpu_pct(cpu0: CpuSample, cpu1: CpuSample, client_cpu: float, elapsed: float) -> float | None:
    """Machine CPU not spent by the broker or this bench: a shared 2-core box skews figures."""
    if None in (cpu0.system, cpu1.system, cpu0.broker, cpu1.broker):
        return None
    busy = cpu1.system - cpu0.system  # type: ignore[operator]
    broker = cpu1.broker - cpu0.broker  # type: ignore[operator]
    # client_cpu includes connection setup before the measured window, so clamp.
    return max(0.0, 100 * (busy - broker - client_cpu) / elapsed)


def wait_quiet(pid: BrokerPids, max_wait: float) -> None:
    """Wait until other processes leave the machine idle for 3 s in a row, or max_wait passes."""
    if psutil is None or max_wait <= 0:
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


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def run_idle(sc: Scenario, rc: RunContext) -> Result:
    count = scaled(sc.count, rc.scale)
    per_proc = max(100, raise_nofile() - 200)  # leave fds for the interpreter itself
    shares = split_evenly(count, math.ceil(count / per_proc))
    deadline = time.monotonic() + rc.timeout_s
    kids = Children()
    roles = [f"holder{i}" for i in range(len(shares))]
    release = kids.ctx.Event()
    try:
        time.sleep(1)  # let the previous scenario's garbage settle
        rss0 = broker_rss(rc.broker_pid)
        for role, share in zip(roles, shares, strict=True):
            kids.start(role, holder_main, rc.params, share, role, kids.events, release, rc.timeout_s)
        opened = kids.await_all("ready", roles, deadline)
        time.sleep(3)  # let the broker finish per-connection setup
        rss1 = broker_rss(rc.broker_pid)
        release.set()
        kids.await_all("closed", roles, deadline)
    finally:
        release.set()
        kids.stop()
    total = sum(o["opened"] for o in opened.values())
    secs = max(o["seconds"] for o in opened.values())
    res = Result(sc.name, ok=True, messages=0)
    res.notes.append(f"{total} conns opened in {secs:.1f} s ({total / secs:.0f}/s) by {len(roles)} proc(s)")
    if rss0 is not None and rss1 is not None:
        res.kib_per_conn = (rss1 - rss0) / total / 1024
        res.notes.insert(
            0,
            f"{res.kib_per_conn:.1f} KiB/conn (broker RSS {rss0 / 2**20:.0f} -> {rss1 / 2**20:.0f} MiB)",
        )
    else:
        res.notes.insert(0, "RSS n/a (pass --broker-pid; needs psutil)")
    return res


def run_scenario(sc: Scenario, rc: RunContext) -> Result:
    try:
        return run_idle(sc, rc) if sc.kind == "idle" else run_messaging(sc, rc)
    except Exception as exc:  # noqa: BLE001 - one failed scenario must not stop the run
        notes = getattr(exc, "__notes__", [])
        reason = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ScenarioFailed) else str(exc)
        return Result(sc.name, ok=False, reason="; ".join([reason, *notes]))


def pick_median(runs: list[Result]) -> Result:
    """Median run by throughput (or KiB/conn), preferring runs not flagged NOISY.

    Other load on a shared machine only ever slows a broker down, so noisy runs
    are dropped when there are quiet ones.
    """
    ok = [r for r in runs if r.ok]
    if not ok:
        return runs[-1]
    pool = sorted([r for r in ok if not r.noisy] or ok, key=Result.key)
    chosen = pool[(len(pool) - 1) // 2]
    if len(runs) > 1:
        spec, unit = (".0f", "msgs/s") if chosen.msgs_per_s is not None else (".1f", "KiB/conn")
        note = f"median of {len(pool)}/{len(runs)} runs, {pool[0].key():{spec}}..{pool[-1].key():{spec}} {unit}"
        if len(pool) < len(runs):
            note += " (noisy/failed runs dropped)"
        chosen.notes.append(note)
    return chosen


def run_repeated(sc: Scenario, rc: RunContext, repeat: int) -> Result:
    runs = []
    for i in range(repeat):
        wait_quiet(rc.broker_pid, rc.wait_quiet_s)
        res = run_scenario(sc, rc)
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
    if res.broker_cpu_pct is not None:
        parts.append(f"broker CPU {res.broker_cpu_pct:.0f}%")
    if res.client_cpu_pct is not None:
        parts.append(f"busiest client proc {res.client_cpu_pct:.0f}%")
    if res.other_cpu_pct is not None:
        parts.append(f"other load {res.other_cpu_pct:.0f}%")
    parts.extend(res.notes)
    line = parts[0] + " " + ", ".join(parts[1:])
    return line if res.ok else f"{line} -- FAILED ({res.reason})"


def markdown_table(label: str, results: list[Result]) -> str:
    rows = [
        "| broker | scenario | messages | msgs/s | MB/s | p50 ms | p99 ms | max ms | broker CPU | notes |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
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
            f"{fmt(pmax, '.1f')} | {cpu} | {notes.replace('|', '/')} |"
        )
    return "\n".join(rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=61613)
    ap.add_argument("--vhost", default="localhost", help="CONNECT host header")
    ap.add_argument("--login")
    ap.add_argument("--passcode")
    ap.add_argument(
        "--broker-pid",
        type=int,
        nargs="+",
        metavar="PID",
        help="broker PID for CPU and RSS (the java PID for ActiveMQ); several are summed (a broker pair)",
    )
    ap.add_argument("--consume-host", help="consumers connect to this broker instead of --host")
    ap.add_argument("--consume-port", type=int, help="consumers connect to this port instead of --port")
    ap.add_argument(
        "--settle",
        type=float,
        metavar="SECONDS",
        help="wait this long after the consumers subscribed before producing "
        "(default 1.0 when consumers use another broker than the producer, else 0)",
    )
    ap.add_argument("--scenario", nargs="+", choices=list(SCENARIOS), help="default: all")
    ap.add_argument("--label", default="broker", help="first column of the markdown table")
    ap.add_argument("--count", type=float, default=1.0, help="scale message and connection counts")
    ap.add_argument("--timeout", type=float, default=300.0, help="per-scenario timeout, seconds")
    ap.add_argument("--idle-timeout", type=float, default=30.0, help="consumer gives up after this much silence")
    ap.add_argument("--fanout-procs", type=int, default=1, help="processes sharing topic-fanout's subscribers")
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each run, wait up to this long for other processes to leave the CPUs idle",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs per scenario; the table shows the median")
    ap.add_argument(
        "--warmup",
        type=int,
        default=100_000,
        help="unreported queue-256 messages sent first (scaled by --count) so a JIT broker is warm; 0 = none",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_nofile()
    if args.broker_pid is not None and psutil is None:
        print("warning: psutil missing; broker CPU/RSS not measured", file=sys.stderr)
    params = ConnParams(args.host, args.port, args.vhost, args.login, args.passcode)
    consume = replace(params, host=args.consume_host or args.host, port=args.consume_port or args.port)
    remote = (consume.host, consume.port) != (params.host, params.port)
    pids = args.broker_pid
    rc = RunContext(
        params=params,
        broker_pid=None if not pids else pids[0] if len(pids) == 1 else tuple(pids),
        scale=args.count,
        timeout_s=args.timeout,
        idle_s=args.idle_timeout,
        fanout_procs=args.fanout_procs,
        run_id=uuid.uuid4().hex[:8],
        wait_quiet_s=args.wait_quiet,
        consume_params=consume if remote else None,
        settle_s=args.settle if args.settle is not None else (1.0 if remote else 0.0),
    )
    if args.warmup > 0:
        warm = Scenario("warmup", "queue", args.warmup)
        res = run_scenario(warm, rc)
        print(f"(warm-up: {report_line(res)})", flush=True)
    results = []
    for name in args.scenario or list(SCENARIOS):
        results.append(run_repeated(SCENARIOS[name], rc, max(1, args.repeat)))
    print()
    print(markdown_table(args.label, results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
