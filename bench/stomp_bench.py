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
import resource
import selectors
import socket
import sys
import time
import uuid
from array import array
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

# Shared with the AMQP load generator (the script's directory is on sys.path).
import common

RECEIPT_WINDOW = 1000
TS_KEY = b"\nbench-ts:"
CL_KEY = b"\ncontent-length:"
ACK_KEY = b"\nack:"
RECEIPT_ID_KEY = b"\nreceipt-id:"
MESSAGE_KEY = b"\nmessage:"

Frame = tuple[bytes, bytes]  # (command line + headers, body)


class BrokerError(Exception):
    """The broker sent an ERROR frame or an unexpected reply."""


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


class StompConn(common.FramedSocket[Frame]):
    """A blocking STOMP connection with an incremental frame buffer."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock, split_frames)

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
    sock = common.open_socket(params.host, params.port, params.io_timeout)
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


def raise_on_error(frames: list[Frame]) -> None:
    for head, body in frames:
        if head.startswith(b"ERROR"):
            raise BrokerError(describe_error(head, body))


def publish(conn: StompConn, spec: PubSpec) -> dict[str, Any]:
    """Fire-and-forget SENDs in ~BATCH_BYTES writes; one timestamp per batch."""
    head = send_head(spec) + b"bench-ts:"
    tail = b"\n\n" + common.filler(spec.size) + b"\0"
    per_batch = max(1, common.BATCH_BYTES // (len(head) + len(tail) + 19))
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
    tail = b"\n\n" + common.filler(spec.size) + b"\0"
    chunk = max(1, min(RECEIPT_WINDOW // 4, common.BATCH_BYTES // (len(head) + len(tail) + 40)))
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
                    "cpu": common.cpu_seconds(),
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
class RunContext:
    params: ConnParams
    broker_pid: common.BrokerPids
    scale: float
    timeout_s: float
    idle_s: float
    fanout_procs: int
    run_id: str
    wait_quiet_s: float = 0.0
    consume_params: ConnParams | None = None  # consumers' broker, if not params'
    settle_s: float = 0.0  # pause between the consumers' SUBSCRIBE receipts and the first SEND
    destination: str | None = None  # every scenario's destination name, if not a fresh one per run

    @property
    def consumer_params(self) -> ConnParams:
        return self.consume_params or self.params


def scaled(n: int, scale: float) -> int:
    return max(1, round(n * scale))


def run_messaging(sc: Scenario, rc: RunContext) -> common.Result:
    count = scaled(sc.count, rc.scale)
    prefix = "/queue/" if sc.kind == "queue" else "/topic/"
    dest = prefix + (rc.destination or f"bench-{sc.name}-{rc.run_id}-{uuid.uuid4().hex[:6]}")
    sub_spec = SubSpec(dest, sc.ack, sc.prefetch, count)
    pub_spec = PubSpec(dest, count, sc.size, sc.persistent, sc.receipts)
    deadline = time.monotonic() + rc.timeout_s
    kids = common.Children()
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
        send = publish_with_receipts if pub_spec.receipts else publish
        connect, run = partial(open_stomp, rc.params), partial(send, spec=pub_spec)
        kids.start("producer", common.producer_main, connect, run, disconnect, kids.events, go, rc.timeout_s)
        kids.await_all("ready", ["producer"], deadline)
        cpu0 = common.CpuSample.take(rc.broker_pid)
        go.set()
        results = kids.await_all("result", ["producer", *consumer_roles], deadline)
        cpu1 = common.CpuSample.take(rc.broker_pid)
        return summarise(sc, count, results, consumer_roles, cpu0, cpu1)
    except common.ScenarioFailed as exc:
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
    cpu0: common.CpuSample,
    cpu1: common.CpuSample,
) -> common.Result:
    prod = results["producer"]
    cons = [results[r] for r in consumer_roles]
    counts = [c for r in cons for c in r["counts"]]
    delivered = sum(counts)
    last_recv = max(r["last_recv"] for r in cons)
    if delivered == 0 or last_recv <= prod["first_send"]:
        raise common.ScenarioFailed("no message was delivered")
    elapsed = (last_recv - prod["first_send"]) / 1e9
    res = common.throughput(sc.name, delivered, sc.size, elapsed)
    res.latency_ms = common.percentiles_ms([r["lat"] for r in cons])
    common.measure_cpu(res, elapsed, [r["cpu"] for r in (prod, *cons)], cpu0, cpu1)
    receipts = common.latency_note("receipt", prod["receipt_lat"]) if "receipt_lat" in prod else None
    if receipts:
        res.notes.append(receipts)
    if sc.subscribers > 1:
        res.notes.append(f"{len(counts)} subs, each got {min(counts)}..{max(counts)} of {count}")
    short = [c for c in counts if c < count]
    if short:
        res.fail(f"incomplete: {len(short)} of {len(counts)} subscriptions short, min {min(counts)}/{count}")
    return res


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def run_idle(sc: Scenario, rc: RunContext) -> common.Result:
    count = scaled(sc.count, rc.scale)
    per_proc = max(100, raise_nofile() - 200)  # leave fds for the interpreter itself
    shares = split_evenly(count, math.ceil(count / per_proc))
    deadline = time.monotonic() + rc.timeout_s
    kids = common.Children()
    roles = [f"holder{i}" for i in range(len(shares))]
    release = kids.ctx.Event()
    try:
        time.sleep(1)  # let the previous scenario's garbage settle
        rss0 = common.broker_rss(rc.broker_pid)
        for role, share in zip(roles, shares, strict=True):
            kids.start(role, holder_main, rc.params, share, role, kids.events, release, rc.timeout_s)
        opened = kids.await_all("ready", roles, deadline)
        time.sleep(3)  # let the broker finish per-connection setup
        rss1 = common.broker_rss(rc.broker_pid)
        release.set()
        kids.await_all("closed", roles, deadline)
    finally:
        release.set()
        kids.stop()
    total = sum(o["opened"] for o in opened.values())
    secs = max(o["seconds"] for o in opened.values())
    res = common.Result(sc.name, ok=True, messages=0)
    res.notes.append(f"{total} conns opened in {secs:.1f} s ({total / secs:.0f}/s) by {len(roles)} proc(s)")
    if rss0 is not None and rss1 is not None:
        res.kib_per_conn = (rss1 - rss0) / total / 1024
        res.notes.insert(
            0,
            f"{res.kib_per_conn:.1f} KiB/conn (broker RSS {rss0 / 2**20:.0f} -> {rss1 / 2**20:.0f} MiB)",
        )
    else:
        res.notes.insert(0, "RSS n/a (pass --broker-pid)")
    return res


def run_scenario(sc: Scenario, rc: RunContext) -> common.Result:
    return run_idle(sc, rc) if sc.kind == "idle" else run_messaging(sc, rc)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = common.argument_parser(
        __doc__,
        61613,
        list(SCENARIOS),
        100_000,
        "unreported queue-256 messages sent first (scaled by --count) so a JIT broker is warm",
    )
    ap.add_argument("--vhost", default="localhost", help="CONNECT host header")
    ap.add_argument("--login")
    ap.add_argument("--passcode")
    ap.add_argument("--consume-host", help="consumers connect to this broker instead of --host")
    ap.add_argument("--consume-port", type=int, help="consumers connect to this port instead of --port")
    ap.add_argument(
        "--settle",
        type=float,
        metavar="SECONDS",
        help="wait this long after the consumers subscribed before producing "
        "(default 1.0 when consumers use another broker than the producer, else 0)",
    )
    ap.add_argument("--count", type=float, default=1.0, help="scale message and connection counts")
    ap.add_argument("--fanout-procs", type=int, default=1, help="processes sharing topic-fanout's subscribers")
    ap.add_argument("--destination", metavar="NAME",
                    help="use this queue or topic name (e.g. one traced by meshgate trace-next) instead of a fresh one")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_nofile()
    params = ConnParams(args.host, args.port, args.vhost, args.login, args.passcode)
    consume = replace(params, host=args.consume_host or args.host, port=args.consume_port or args.port)
    remote = (consume.host, consume.port) != (params.host, params.port)
    rc = RunContext(
        params=params,
        broker_pid=common.broker_pids(args),
        scale=args.count,
        timeout_s=args.timeout,
        idle_s=args.idle_timeout,
        fanout_procs=args.fanout_procs,
        run_id=uuid.uuid4().hex[:8],
        wait_quiet_s=args.wait_quiet,
        consume_params=consume if remote else None,
        settle_s=args.settle if args.settle is not None else (1.0 if remote else 0.0),
        destination=args.destination,
    )
    warm_up = partial(run_scenario, Scenario("warmup", "queue", args.warmup), rc)
    return common.run_all(args, rc.broker_pid, lambda name: run_scenario(SCENARIOS[name], rc), warm_up)


if __name__ == "__main__":
    sys.exit(main())
