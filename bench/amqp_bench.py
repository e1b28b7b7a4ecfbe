#!/usr/bin/env python3
"""Pipelining AMQP 0-9-1 load generator for Meshgate, RabbitMQ and any other 0-9-1 broker.

Raw sockets and a small frame encoder/decoder of its own (no client library at
run time), so the figures measure the broker, not the client: producers write
pre-built frames in large batches, consumers read big chunks and split frames
with a lean parser, and producer and consumer run in separate processes so the
client is not the bottleneck on a 2-core machine.  See bench/README.md.

    python bench/amqp_bench.py --host 127.0.0.1 --port 5672 \\
        [--user guest --password guest] [--vhost /] [--broker-pid PID] \\
        [--scenario NAME ...] [--label rabbitmq-3.10] [--count 100000] [--repeat 3] \\
        [--get-count 20000] [--get-host HOST --get-port PORT] [--get-empty-timeout 5]

Scenarios:
  publish-256           256 B non-persistent, pipelined basic.publish without confirms on one
                        connection; basic.consume on another, basic.qos 1000, ack multiple every 100
  publish-256-confirms  256 B delivery-mode 2 to a durable queue, confirm.select, up to 1000
                        unconfirmed publishes; consumer as above
  consume-prefetch      pre-load N persistent messages (with confirms), then time the consumer
                        alone, basic.qos 1000, ack multiple every 100
  get                   pre-load --get-count 256 B non-persistent messages (pipelined publishes,
                        then until a passive queue.declare counts them all), then time a loop of
                        synchronous basic.get (no_ack=False) on one connection until all were got;
                        each get-ok is acked on its own (basic.ack, not multiple), the ack written
                        with the next basic.get, as a pika basic_get/basic_ack loop does. One
                        round trip per message; latency columns are the basic.get round trip.
                        With --get-port the gets go to another node (a mesh pair: messages on
                        --port's node, gets on --get-port's); a run of get-empty lasting over
                        --get-empty-timeout fails the run, saying how many it had got
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
import uuid
from array import array
from dataclasses import dataclass, field
from functools import partial
from typing import Any

# Shared with the STOMP load generator (the script's directory is on sys.path).
import common

CONFIRM_WINDOW = 1000
PREFETCH = 1000
ACK_EVERY = 100
DEFAULT_FRAME_MAX = 131072

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE

OCTET = struct.Struct(">B")
SHORT = struct.Struct(">H")
LONG = struct.Struct(">I")
LONGLONG = struct.Struct(">Q")
FRAME_HEAD = struct.Struct(">BHI")
METHOD_ID = struct.Struct(">HH")
# Body of every bench message starts with its sequence number and send time (ns).
STAMP = struct.Struct(">QQ")

# (class-id, method-id) of the methods the bench sends or must recognise.
CONNECTION_START = (10, 10)
CONNECTION_START_OK = (10, 11)
CONNECTION_TUNE = (10, 30)
CONNECTION_TUNE_OK = (10, 31)
CONNECTION_OPEN = (10, 40)
CONNECTION_OPEN_OK = (10, 41)
CONNECTION_CLOSE = (10, 50)
CONNECTION_CLOSE_OK = (10, 51)
CONNECTION_BLOCKED = (10, 60)
CONNECTION_UNBLOCKED = (10, 61)
CHANNEL_OPEN = (20, 10)
CHANNEL_OPEN_OK = (20, 11)
CHANNEL_CLOSE = (20, 40)
CHANNEL_CLOSE_OK = (20, 41)
QUEUE_DECLARE = (50, 10)
QUEUE_DECLARE_OK = (50, 11)
QUEUE_DELETE = (50, 40)
QUEUE_DELETE_OK = (50, 41)
BASIC_QOS = (60, 10)
BASIC_QOS_OK = (60, 11)
BASIC_CONSUME = (60, 20)
BASIC_CONSUME_OK = (60, 21)
BASIC_CANCEL = (60, 30)
BASIC_PUBLISH = (60, 40)
BASIC_RETURN = (60, 50)
BASIC_DELIVER = (60, 60)
BASIC_GET = (60, 70)
BASIC_GET_OK = (60, 71)
BASIC_GET_EMPTY = (60, 72)
BASIC_ACK = (60, 80)
BASIC_NACK = (60, 120)
CONFIRM_SELECT = (85, 10)
CONFIRM_SELECT_OK = (85, 11)

METHOD_NAMES = {
    CONNECTION_START: "connection.start",
    CONNECTION_START_OK: "connection.start-ok",
    CONNECTION_TUNE: "connection.tune",
    CONNECTION_TUNE_OK: "connection.tune-ok",
    CONNECTION_OPEN: "connection.open",
    CONNECTION_OPEN_OK: "connection.open-ok",
    CONNECTION_CLOSE: "connection.close",
    CONNECTION_CLOSE_OK: "connection.close-ok",
    CONNECTION_BLOCKED: "connection.blocked",
    CONNECTION_UNBLOCKED: "connection.unblocked",
    CHANNEL_OPEN: "channel.open",
    CHANNEL_OPEN_OK: "channel.open-ok",
    (20, 20): "channel.flow",
    CHANNEL_CLOSE: "channel.close",
    CHANNEL_CLOSE_OK: "channel.close-ok",
    QUEUE_DECLARE: "queue.declare",
    QUEUE_DECLARE_OK: "queue.declare-ok",
    (50, 30): "queue.purge",
    QUEUE_DELETE: "queue.delete",
    QUEUE_DELETE_OK: "queue.delete-ok",
    BASIC_QOS: "basic.qos",
    BASIC_QOS_OK: "basic.qos-ok",
    BASIC_CONSUME: "basic.consume",
    BASIC_CONSUME_OK: "basic.consume-ok",
    BASIC_CANCEL: "basic.cancel",
    (60, 31): "basic.cancel-ok",
    BASIC_PUBLISH: "basic.publish",
    BASIC_RETURN: "basic.return",
    BASIC_DELIVER: "basic.deliver",
    BASIC_GET: "basic.get",
    BASIC_GET_OK: "basic.get-ok",
    BASIC_GET_EMPTY: "basic.get-empty",
    BASIC_ACK: "basic.ack",
    BASIC_NACK: "basic.nack",
    CONFIRM_SELECT: "confirm.select",
    CONFIRM_SELECT_OK: "confirm.select-ok",
}

DELIVER_ID = METHOD_ID.pack(*BASIC_DELIVER)
GET_OK_ID = METHOD_ID.pack(*BASIC_GET_OK)
GET_EMPTY_ID = METHOD_ID.pack(*BASIC_GET_EMPTY)
ACK_ID = METHOD_ID.pack(*BASIC_ACK)
NACK_ID = METHOD_ID.pack(*BASIC_NACK)


class BrokerError(Exception):
    """The broker closed the connection or channel, or replied unexpectedly."""


def method_name(ids: tuple[int, int]) -> str:
    return METHOD_NAMES.get(ids, f"method {ids[0]}.{ids[1]}")


# --------------------------------------------------------------------------
# Encoding


def shortstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    if len(raw) > 255:
        raise ValueError(f"short string longer than 255 bytes: {raw[:40]!r}...")
    return OCTET.pack(len(raw)) + raw


def longstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return LONG.pack(len(raw)) + raw


def field_value(value: Any) -> bytes:
    # Only the types the bench sends (client properties): bool, int, str, table.
    if isinstance(value, bool):
        return b"t" + OCTET.pack(int(value))
    if isinstance(value, int):
        return b"l" + struct.pack(">q", value)
    if isinstance(value, (str, bytes)):
        return b"S" + longstr(value)
    if isinstance(value, dict):
        return b"F" + table(value)
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


def table(values: dict[str, Any]) -> bytes:
    body = b"".join(shortstr(key) + field_value(value) for key, value in values.items())
    return LONG.pack(len(body)) + body


def frame(ftype: int, channel: int, payload: bytes) -> bytes:
    return FRAME_HEAD.pack(ftype, channel, len(payload)) + payload + b"\xce"


def method_frame(channel: int, ids: tuple[int, int], args: bytes = b"") -> bytes:
    return frame(FRAME_METHOD, channel, METHOD_ID.pack(*ids) + args)


def content_frames(channel: int, body: bytes, frame_max: int, delivery_mode: int | None) -> bytes:
    """Content header frame plus body frame(s) of one message (basic class)."""
    flags, props = 0, b""
    if delivery_mode is not None:
        flags |= 1 << 12
        props += OCTET.pack(delivery_mode)
    fixed = SHORT.pack(60) + SHORT.pack(0) + LONGLONG.pack(len(body)) + SHORT.pack(flags)
    head = frame(FRAME_HEADER, channel, fixed + props)
    step = frame_max - 8  # a frame's header and end octet count against frame-max
    return head + b"".join(frame(FRAME_BODY, channel, body[i : i + step]) for i in range(0, len(body), step))


def publish_args(exchange: str, routing_key: str) -> bytes:
    return SHORT.pack(0) + shortstr(exchange) + shortstr(routing_key) + OCTET.pack(0)


def tally_result(tally: Any, started: float, **extra: Any) -> dict[str, Any]:
    """What a consuming process reports to the parent (``extra``: the scenario's own)."""
    return {
        "started": started,
        "received": tally.received,
        "unique": tally.seen.count(1),
        "duplicates": tally.duplicates,
        "foreign": tally.foreign,
        "redelivered": tally.redelivered,
        "first_recv": tally.first_recv,
        "last_recv": tally.last_recv,
        "lat": tally.latencies.tobytes(),
        **extra,
        "cpu": common.cpu_seconds(),
    }


def ack_frame(channel: int, tag: int, multiple: bool) -> bytes:
    return method_frame(channel, BASIC_ACK, LONGLONG.pack(tag) + OCTET.pack(int(multiple)))


# --------------------------------------------------------------------------
# Decoding


class Reader:
    """Sequential reader over a method frame's arguments."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _unpack(self, fmt: struct.Struct) -> Any:
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return value

    def octet(self) -> int:
        return self._unpack(OCTET)

    def short(self) -> int:
        return self._unpack(SHORT)

    def long(self) -> int:
        return self._unpack(LONG)

    def longlong(self) -> int:
        return self._unpack(LONGLONG)

    def shortstr(self) -> str:
        n = self.octet()
        self.pos += n
        return self.data[self.pos - n : self.pos].decode(errors="replace")

    def longstr(self) -> bytes:
        n = self.long()
        self.pos += n
        return bytes(self.data[self.pos - n : self.pos])

    def table(self) -> dict[str, Any]:
        end = self.pos + 4 + self.long()
        out: dict[str, Any] = {}
        while self.pos < end:
            key = self.shortstr()
            out[key] = self.field()
        self.pos = end
        return out

    def field(self) -> Any:
        kind = chr(self.octet())
        fixed = {"b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I", "l": ">q", "L": ">Q"}
        if kind in fixed:
            return self._unpack(struct.Struct(fixed[kind]))
        if kind == "t":
            return bool(self.octet())
        if kind == "f":
            return self._unpack(struct.Struct(">f"))
        if kind == "d":
            return self._unpack(struct.Struct(">d"))
        if kind == "T":
            return self.longlong()
        if kind == "D":
            scale = self.octet()
            return self._unpack(struct.Struct(">i")) / 10**scale
        if kind in "Sx":
            return self.longstr()
        if kind == "F":
            return self.table()
        if kind == "A":
            end = self.pos + 4 + self.long()
            items = []
            while self.pos < end:
                items.append(self.field())
            return items
        if kind == "V":
            return None
        raise BrokerError(f"unknown field-table value type {kind!r}")


def describe_close(args: bytes, what: str) -> str:
    """Human-readable connection.close / channel.close from the broker."""
    r = Reader(args)
    try:
        code, text = r.short(), r.shortstr()
        ids = (r.short(), r.short())
    except struct.error:
        return f"broker closed the {what} (malformed close method)"
    cause = f" (in reply to {method_name(ids)})" if ids != (0, 0) else ""
    return f"broker closed the {what}: {code} {text}{cause}"


def split_frames(buf: bytes, pos: int = 0) -> tuple[list[tuple[int, int, bytes]], int]:
    """Complete frames in buf as (type, channel, payload), and the first unparsed offset."""
    frames = []
    n = len(buf)
    while n - pos >= 8:
        ftype, channel, size = FRAME_HEAD.unpack_from(buf, pos)
        end = pos + 7 + size
        if end >= n:
            break
        if buf[end] != FRAME_END:
            raise BrokerError(f"bad frame end octet 0x{buf[end]:02x} (type {ftype}, size {size}): framing lost")
        frames.append((ftype, channel, buf[pos + 7 : end]))
        pos = end + 1
    return frames, pos


# --------------------------------------------------------------------------
# Connection


@dataclass(frozen=True)
class ConnParams:
    host: str
    port: int
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    io_timeout: float = 30.0


class AmqpConn(common.FramedSocket[tuple[int, int, bytes]]):
    """A blocking AMQP 0-9-1 connection with one channel (1) and a frame buffer."""

    CHANNEL = 1

    def __init__(self, sock: socket.socket, io_timeout: float) -> None:
        super().__init__(sock, split_frames)
        self.io_timeout = io_timeout
        self.frame_max = DEFAULT_FRAME_MAX
        self.server: str = "?"

    # -- frame I/O -----------------------------------------------------------

    def check(self, ftype: int, payload: bytes) -> tuple[int, int] | None:
        """Method id of a frame; raises on the broker closing the connection or channel."""
        if ftype != FRAME_METHOD:
            return None
        ids = METHOD_ID.unpack_from(payload)
        if ids == CONNECTION_CLOSE:
            self._send_quietly(method_frame(0, CONNECTION_CLOSE_OK))
            raise BrokerError(describe_close(payload[4:], "connection"))
        if ids == CHANNEL_CLOSE:
            self._send_quietly(method_frame(self.CHANNEL, CHANNEL_CLOSE_OK))
            raise BrokerError(describe_close(payload[4:], f"channel {self.CHANNEL}"))
        if ids == BASIC_CANCEL:
            raise BrokerError(f"broker cancelled the consumer {Reader(payload, 4).shortstr()!r}")
        if ids == BASIC_RETURN:
            r = Reader(payload, 4)
            raise BrokerError(f"broker returned a message: {r.short()} {r.shortstr()}")
        return ids

    def expect(self, want: tuple[int, int], channel: int | None = None) -> Reader:
        """Block until method `want` arrives; other frames read meanwhile are kept."""
        kept: list[tuple[int, int, bytes]] = []
        while True:
            frames = self.pull()
            for i, (ftype, chan, payload) in enumerate(frames):
                ids = self.check(ftype, payload)
                if ids == want and (channel is None or chan == channel):
                    self.pending = kept + frames[i + 1 :] + self.pending
                    return Reader(payload, 4)
                if ids in (CONNECTION_BLOCKED, CONNECTION_UNBLOCKED) or ftype == FRAME_HEARTBEAT:
                    continue
                kept.append((ftype, chan, payload))

    def call(self, ids: tuple[int, int], args: bytes, reply: tuple[int, int]) -> Reader:
        self.sock.sendall(method_frame(self.CHANNEL, ids, args))
        return self.expect(reply, self.CHANNEL)

    def _send_quietly(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            pass

    # -- methods -------------------------------------------------------------

    def declare_queue(self, name: str, durable: bool, passive: bool = False) -> int:
        """queue.declare; returns the queue's message count."""
        bits = (1 if passive else 0) | (2 if durable else 0)
        args = SHORT.pack(0) + shortstr(name) + OCTET.pack(bits) + table({})
        r = self.call(QUEUE_DECLARE, args, QUEUE_DECLARE_OK)
        r.shortstr()
        return r.long()

    def delete_queue(self, name: str) -> int:
        """queue.delete; returns how many messages were still in it."""
        r = self.call(QUEUE_DELETE, SHORT.pack(0) + shortstr(name) + OCTET.pack(0), QUEUE_DELETE_OK)
        return r.long()

    def qos(self, prefetch: int) -> None:
        self.call(BASIC_QOS, LONG.pack(0) + SHORT.pack(prefetch) + OCTET.pack(0), BASIC_QOS_OK)

    def confirm_select(self) -> None:
        self.call(CONFIRM_SELECT, OCTET.pack(0), CONFIRM_SELECT_OK)

    def consume(self, queue_name: str, tag: str) -> None:
        """basic.consume (manual acks); waits for consume-ok, deliveries after it stay pending."""
        args = SHORT.pack(0) + shortstr(queue_name) + shortstr(tag) + OCTET.pack(0) + table({})
        self.call(BASIC_CONSUME, args, BASIC_CONSUME_OK)

    def close(self, timeout: float = 10.0) -> None:
        """connection.close and wait for close-ok: everything sent before has been processed."""
        try:
            self.sock.settimeout(timeout)
            reason = SHORT.pack(200) + shortstr("bench done") + SHORT.pack(0) + SHORT.pack(0)
            self.sock.sendall(method_frame(0, CONNECTION_CLOSE, reason))
            while True:
                for ftype, _, payload in self.pull():
                    # Deliveries still in flight are dropped; a close from the
                    # broker instead of close-ok is an error check() reports.
                    if self.check(ftype, payload) == CONNECTION_CLOSE_OK:
                        return
        finally:
            self.abort()

    def abort(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def client_properties() -> dict[str, Any]:
    return {
        "product": "meshgate amqp_bench",
        "platform": f"Python {sys.version.split()[0]}",
        # Both make failures explicit: a refused login becomes a connection.close
        # with a reason instead of a bare TCP close, and a deleted queue cancels
        # the consumer visibly instead of leaving it waiting.
        "capabilities": {"authentication_failure_close": True, "consumer_cancel_notify": True},
    }


def connect(params: ConnParams) -> AmqpConn:
    """Open a connection (PLAIN auth, heartbeats off) and channel 1."""
    sock = common.open_socket(params.host, params.port, params.io_timeout)
    conn = AmqpConn(sock, params.io_timeout)
    try:
        sock.sendall(PROTOCOL_HEADER)
        first = b""
        while len(first) < 8:
            chunk = sock.recv(8 - len(first))
            if not chunk:
                raise ConnectionError("broker closed the TCP connection right after the AMQP protocol header")
            first += chunk
        if first.startswith(b"AMQP"):
            # A broker that does not speak our version answers with the header it wants.
            raise BrokerError(f"broker refused AMQP 0-9-1 and offered protocol header {first!r}")
        conn.buf = first
        r = conn.expect(CONNECTION_START, 0)
        r.pos += 2  # version-major, version-minor: the header exchange settled the version
        props = r.table()
        mechanisms = r.longstr().split()
        product, version = props.get("product", b"?"), props.get("version", b"")
        conn.server = f"{_text(product)} {_text(version)}".strip()
        if b"PLAIN" not in mechanisms:
            raise BrokerError(f"broker offers no PLAIN authentication (mechanisms: {mechanisms})")
        response = b"\0" + params.user.encode() + b"\0" + params.password.encode()
        sock.sendall(
            method_frame(
                0,
                CONNECTION_START_OK,
                table(client_properties()) + shortstr("PLAIN") + longstr(response) + shortstr("en_US"),
            )
        )
        r = conn.expect(CONNECTION_TUNE, 0)
        channel_max, frame_max, _heartbeat = r.short(), r.long(), r.short()
        conn.frame_max = frame_max or DEFAULT_FRAME_MAX
        # Heartbeats off: the bench's loops block in sendall/recv and never idle.
        tune_ok = SHORT.pack(channel_max) + LONG.pack(conn.frame_max) + SHORT.pack(0)
        sock.sendall(method_frame(0, CONNECTION_TUNE_OK, tune_ok))
        sock.sendall(method_frame(0, CONNECTION_OPEN, shortstr(params.vhost) + shortstr("") + OCTET.pack(0)))
        conn.expect(CONNECTION_OPEN_OK, 0)
        conn.call(CHANNEL_OPEN, shortstr(""), CHANNEL_OPEN_OK)
    except BaseException:
        conn.abort()
        raise
    return conn


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# --------------------------------------------------------------------------
# Producer process


@dataclass(frozen=True)
class PubSpec:
    queue: str
    count: int
    size: int
    persistent: bool
    confirms: bool


def message_parts(conn: AmqpConn, spec: PubSpec) -> tuple[bytes, bytes]:
    """Frames of one message split around its 16-byte stamp: (before, after)."""
    ch = conn.CHANNEL
    if spec.size < STAMP.size or spec.size > conn.frame_max - 8:
        raise ValueError(f"message size must be {STAMP.size}..{conn.frame_max - 8} bytes (one body frame)")
    publish = method_frame(ch, BASIC_PUBLISH, publish_args("", spec.queue))
    dummy = content_frames(ch, bytes(spec.size), conn.frame_max, 2 if spec.persistent else 1)
    # The body frame is last: its 7-byte frame header precedes the stamp.
    body_at = len(dummy) - (7 + spec.size + 1)
    before = publish + dummy[: body_at + 7]
    after = common.filler(spec.size - STAMP.size) + b"\xce"
    return before, after


def publish(conn: AmqpConn, spec: PubSpec) -> dict[str, Any]:
    """Fire-and-forget basic.publish in ~BATCH_BYTES writes; one timestamp per batch."""
    before, after = message_parts(conn, spec)
    per_batch = max(1, common.BATCH_BYTES // (len(before) + len(after) + STAMP.size))
    pack = STAMP.pack
    sent = 0
    first = time.time_ns()
    try:
        while sent < spec.count:
            k = min(per_batch, spec.count - sent)
            ts = time.time_ns()
            conn.sock.sendall(b"".join([before + pack(seq, ts) + after for seq in range(sent, sent + k)]))
            sent += k
            for ftype, _, payload in conn.poll():
                conn.check(ftype, payload)
    except TimeoutError:
        raise stalled(conn, sent, None) from None
    return {"first_send": first, "last_send": time.time_ns(), "sent": sent}


class Confirms:
    """Publisher-confirm bookkeeping: delivery tags 1..count, acks/nacks possibly multiple."""

    def __init__(self, count: int) -> None:
        self.state = bytearray(count + 1)  # 0 unconfirmed, 1 acked, 2 nacked
        self.low = 1  # lowest tag not yet confirmed
        self.acked = 0
        self.nacked = 0
        self.repeated = 0  # confirms for a tag already confirmed (should never happen)
        self.sent = 0
        self.last_confirm = 0
        self.sent_at = array("q", bytes(8 * (count + 1)))
        self.latency = array("q")

    @property
    def done(self) -> int:
        return self.acked + self.nacked

    def settle(self, tag: int, multiple: bool, mark: int, now: int) -> None:
        if tag >= len(self.state) or tag < 1:
            raise BrokerError(f"broker confirmed delivery tag {tag}, which was never published")
        state, lat, sent_at = self.state, self.latency, self.sent_at
        for t in range(self.low, tag + 1) if multiple else (tag,):
            if state[t]:
                if not multiple:
                    self.repeated += 1
                continue
            state[t] = mark
            lat.append(now - sent_at[t])
            if mark == 1:
                self.acked += 1
            else:
                self.nacked += 1
        while self.low < len(state) and state[self.low]:
            self.low += 1


def publish_with_confirms(conn: AmqpConn, spec: PubSpec) -> dict[str, Any]:
    """confirm.select, then publishes with up to CONFIRM_WINDOW unconfirmed (pipelined)."""
    conn.confirm_select()
    before, after = message_parts(conn, spec)
    chunk = max(1, min(CONFIRM_WINDOW // 4, common.BATCH_BYTES // (len(before) + len(after) + STAMP.size)))
    conf = Confirms(spec.count)
    first = time.time_ns()
    try:
        confirm_loop(conn, spec, conf, before, after, chunk)
    except TimeoutError:
        raise stalled(conn, conf.sent, conf.done) from None
    return {
        "first_send": first,
        "last_send": time.time_ns(),
        "last_confirm": conf.last_confirm or first,
        "sent": conf.sent,
        "acked": conf.acked,
        "nacked": conf.nacked,
        "repeated": conf.repeated,
        "confirm_lat": conf.latency.tobytes(),
    }


def confirm_loop(conn: AmqpConn, spec: PubSpec, conf: Confirms, before: bytes, after: bytes, chunk: int) -> None:
    """Keep up to CONFIRM_WINDOW publishes unconfirmed, writing `chunk` at a time."""
    pack = STAMP.pack
    sent = 0
    while conf.done < spec.count:
        want = min(CONFIRM_WINDOW - (sent - conf.done), spec.count - sent, chunk)
        if want > 0 and (want == chunk or sent + want == spec.count):
            ts = time.time_ns()
            conn.sock.sendall(b"".join([before + pack(seq, ts) + after for seq in range(sent, sent + want)]))
            # Delivery tags are 1-based: message seq s is tag s + 1.
            conf.sent_at[sent + 1 : sent + want + 1] = array("q", [ts]) * want
            sent += want
            conf.sent = sent
        window_full = CONFIRM_WINDOW - (sent - conf.done) < chunk
        frames = conn.pull() if (window_full or sent == spec.count) else conn.poll()
        now = time.time_ns()
        for ftype, _, payload in frames:
            if ftype != FRAME_METHOD:
                continue
            ids = payload[:4]
            if ids == ACK_ID or ids == NACK_ID:
                tag = LONGLONG.unpack_from(payload, 4)[0]
                conf.settle(tag, bool(payload[12] & 1), 1 if ids == ACK_ID else 2, now)
                conf.last_confirm = now
            else:
                conn.check(ftype, payload)


def stalled(conn: AmqpConn, sent: int, confirmed: int | None) -> BrokerError:
    """A socket timeout while publishing, told as what it means."""
    done = "" if confirmed is None else f", {confirmed} confirmed"
    return BrokerError(
        f"no progress for {conn.io_timeout:.0f} s after {sent} publishes{done}: the broker stopped reading "
        "or confirming (flow control, e.g. a memory or disk limit?)"
    )


def producer(params: ConnParams, spec: PubSpec) -> tuple[Any, Any, Any]:
    """What common.producer_main connects, publishes and closes with."""
    send = publish_with_confirms if spec.confirms else publish
    return partial(connect, params), partial(send, spec=spec), AmqpConn.close


# --------------------------------------------------------------------------
# Consumer process


@dataclass
class Tally:
    """What the consumer has seen."""

    expected: int
    seen: bytearray = field(init=False)
    received: int = 0
    duplicates: int = 0
    foreign: int = 0  # sequence numbers outside 0..expected-1
    redelivered: int = 0
    latencies: array = field(default_factory=lambda: array("q"))
    first_recv: int = 0
    last_recv: int = 0

    def __post_init__(self) -> None:
        self.seen = bytearray(self.expected)


def consume(conn: AmqpConn, tally: Tally, idle_s: float, record_latency: bool) -> None:
    """Read deliveries until all expected arrived or idle_s of silence; ack multiple every ACK_EVERY.

    The hot loop: frames are walked in place; only basic.deliver's delivery tag
    and redelivered bit and the first 16 body bytes (sequence, send time) are read.
    """
    sock = conn.sock
    sock.settimeout(idle_s)
    ch = conn.CHANNEL
    seen, lat = tally.seen, tally.latencies
    expected = tally.expected
    unpack_head, unpack_stamp, unpack_tag = FRAME_HEAD.unpack_from, STAMP.unpack_from, LONGLONG.unpack_from
    buf = conn.buf
    conn.buf = b""
    # Frames split off together with consume-ok go first.
    if conn.pending:
        buf = b"".join(frame(t, c, p) for t, c, p in conn.pending) + buf
        conn.pending = []
    tag = 0
    unacked = 0
    want_stamp = False
    fresh = bool(buf)
    while tally.received < expected:
        if not fresh:
            try:
                data = sock.recv(common.RECV_SIZE)
            except TimeoutError:
                break  # the broker went quiet: report what arrived
            if not data:
                raise ConnectionError("broker closed the TCP connection without connection.close")
            buf = buf + data if buf else data
        fresh = False
        now = time.time_ns()
        acks = []
        n = len(buf)
        pos = 0
        got = 0
        while n - pos >= 8:
            ftype, _, size = unpack_head(buf, pos)
            end = pos + 7 + size
            if end >= n:
                break
            if ftype == FRAME_BODY:
                if want_stamp:
                    want_stamp = False
                    seq, ts = unpack_stamp(buf, pos + 7)
                    got += 1
                    if seq >= expected:
                        tally.foreign += 1
                    elif seen[seq]:
                        tally.duplicates += 1
                    else:
                        seen[seq] = 1
                    if record_latency:
                        lat.append(now - ts)
                    unacked += 1
                    if unacked >= ACK_EVERY:
                        acks.append(ack_frame(ch, tag, True))
                        unacked = 0
            elif ftype == FRAME_METHOD:
                if buf[pos + 7 : pos + 11] == DELIVER_ID:
                    at = pos + 12 + buf[pos + 11]  # past the consumer tag
                    tag = unpack_tag(buf, at)[0]
                    if buf[at + 8] & 1:
                        tally.redelivered += 1
                    want_stamp = True
                else:
                    conn.check(ftype, buf[pos + 7 : end])
            if buf[end] != FRAME_END:
                raise BrokerError(f"bad frame end octet 0x{buf[end]:02x}: framing lost")
            pos = end + 1
        buf = buf[pos:]
        if acks:
            sock.sendall(b"".join(acks))
        if got:
            tally.received += got
            tally.first_recv = tally.first_recv or now
            tally.last_recv = now
    if unacked:
        sock.sendall(ack_frame(ch, tag, True))
    conn.buf = buf
    sock.settimeout(conn.io_timeout)


def consumer_main(
    params: ConnParams, queue_name: str, expected: int, out: Any, go: Any, idle_s: float, record_latency: bool
) -> None:
    """Consume `expected` messages from queue_name; with `go`, basic.consume only once it is set."""
    conn: AmqpConn | None = None
    try:
        conn = connect(params)
        conn.qos(PREFETCH)
        if go is None:
            # Subscribed before the producer starts, so no message can be missed.
            started = time.time_ns()
            conn.consume(queue_name, "bench-consumer")
            out.put(("ready", "consumer", None))
        else:
            out.put(("ready", "consumer", None))
            if not go.wait(idle_s * 10):
                raise TimeoutError("never told to start")
            started = time.time_ns()
            conn.consume(queue_name, "bench-consumer")
        tally = Tally(expected)
        consume(conn, tally, idle_s, record_latency)
        conn.close()
        conn = None
        out.put(
            (
                "result",
                "consumer",
                tally_result(tally, started),
            )
        )
    except Exception as exc:  # noqa: BLE001 - every failure must reach the parent
        out.put(("error", "consumer", f"{type(exc).__name__}: {exc}"))
    finally:
        if conn is not None:
            conn.abort()


# --------------------------------------------------------------------------
# basic.get process


class GetEmpty(Exception):
    """The broker answered basic.get-empty."""


def get_one(conn: AmqpConn, request: bytes) -> tuple[int, bool, bytes]:
    """Write `request` (ending with a basic.get) and read its reply: (delivery tag, redelivered,
    the body's first 16 bytes); raises GetEmpty on basic.get-empty."""
    conn.sock.sendall(request)
    tag, redelivered, left, stamp = 0, False, -1, b""
    while True:
        frames = conn.pull()
        for i, (ftype, _, payload) in enumerate(frames):
            if ftype == FRAME_METHOD:
                ids = payload[:4]
                if ids == GET_OK_ID:
                    tag = LONGLONG.unpack_from(payload, 4)[0]
                    redelivered = bool(payload[12] & 1)
                    continue
                if ids == GET_EMPTY_ID:
                    conn.pending = frames[i + 1 :]
                    raise GetEmpty
                conn.check(ftype, payload)
            elif ftype == FRAME_HEADER and tag:
                left = LONGLONG.unpack_from(payload, 4)[0]  # class, weight, then the body size
            elif ftype == FRAME_BODY and left > 0:
                stamp = stamp or payload[: STAMP.size]
                left -= len(payload)
            if left == 0:
                conn.pending = frames[i + 1 :]
                return tag, redelivered, stamp


def get_loop(conn: AmqpConn, queue_name: str, tally: Tally, empty_s: float) -> tuple[int, int]:
    """basic.get (no_ack=False) until tally.expected messages were got, each acked on its own with
    the next basic.get's write; returns (get-empty replies, the longest run of them in ns).

    Raises BrokerError after empty_s seconds of nothing but get-empty."""
    ch = conn.CHANNEL
    get = method_frame(ch, BASIC_GET, SHORT.pack(0) + shortstr(queue_name) + OCTET.pack(0))
    seen, lat, expected = tally.seen, tally.latencies, tally.expected
    unpack_stamp, now_ns = STAMP.unpack_from, time.time_ns
    ack = b""
    empties = 0
    empty_since = 0
    longest_empty = 0
    limit_ns = int(empty_s * 1e9)
    while tally.received < expected:
        sent = now_ns()
        try:
            tag, redelivered, stamp = get_one(conn, ack + get)
        except GetEmpty:
            now = now_ns()
            ack = b""
            empties += 1
            empty_since = empty_since or sent
            longest_empty = max(longest_empty, now - empty_since)
            if now - empty_since > limit_ns:
                raise BrokerError(
                    f"got {tally.received} of {expected} messages, then only basic.get-empty for "
                    f"{(now - empty_since) / 1e9:.1f} s ({empties} get-empty replies in all): the other "
                    f"{expected - tally.received} never reached the queue at :{conn.sock.getpeername()[1]}"
                ) from None
            continue
        now = now_ns()
        empty_since = 0
        lat.append(now - sent)
        tally.received += 1
        tally.first_recv = tally.first_recv or now
        tally.last_recv = now
        if redelivered:
            tally.redelivered += 1
        seq = unpack_stamp(stamp)[0] if len(stamp) == STAMP.size else expected
        if seq >= expected:
            tally.foreign += 1
        elif seen[seq]:
            tally.duplicates += 1
        else:
            seen[seq] = 1
        ack = ack_frame(ch, tag, False)
    if ack:
        conn.sock.sendall(ack)
    return empties, longest_empty


def getter_main(
    params: ConnParams, queue_name: str, expected: int, out: Any, go: Any, idle_s: float, empty_s: float, declare: bool
) -> None:
    """Get `expected` messages from queue_name with basic.get once `go` is set; with `declare`,
    queue.declare it first (on another node than the one it was filled on)."""
    conn: AmqpConn | None = None
    try:
        conn = connect(params)
        if declare:
            conn.declare_queue(queue_name, durable=False)
        out.put(("ready", "getter", None))
        if not go.wait(idle_s * 10):
            raise TimeoutError("never told to start")
        tally = Tally(expected)
        started = time.time_ns()
        empties, longest_empty = get_loop(conn, queue_name, tally, empty_s)
        # close-ok comes after the broker has read everything before it: the last ack too.
        conn.close()
        conn = None
        out.put(
            (
                "result",
                "getter",
                tally_result(tally, started, empties=empties, longest_empty=longest_empty),
            )
        )
    except Exception as exc:  # noqa: BLE001 - every failure must reach the parent
        out.put(("error", "getter", f"{type(exc).__name__}: {exc}"))
    finally:
        if conn is not None:
            conn.abort()


# --------------------------------------------------------------------------
# Scenarios


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # live (producer and consumer at once) | preload (fill, then consume alone) | get (fill, basic.get)
    size: int = 256
    persistent: bool = False
    confirms: bool = False


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("publish-256", "live"),
        Scenario("publish-256-confirms", "live", persistent=True, confirms=True),
        Scenario("consume-prefetch", "preload", persistent=True, confirms=True),
        Scenario("get", "get"),
    )
}


@dataclass
class RunContext:
    params: ConnParams
    broker_pid: common.BrokerPids
    count: int
    timeout_s: float
    idle_s: float
    run_id: str
    wait_quiet_s: float = 0.0
    get_count: int = 20_000
    get_params: ConnParams | None = None  # basic.get on another node than the pre-load (--get-port)
    get_empty_s: float = 5.0


def run_messaging(sc: Scenario, rc: RunContext, count: int) -> common.Result:
    """Declare a fresh queue, run the scenario on it, verify and delete it."""
    qname = f"bench-{sc.name}-{rc.run_id}-{uuid.uuid4().hex[:6]}"
    control = connect(rc.params)
    try:
        # Durable exactly when the messages are persistent: a persistent message
        # on a transient queue would not survive a restart either.
        control.declare_queue(qname, durable=sc.persistent)
        run = {"live": run_live, "preload": run_preload, "get": run_get}[sc.kind]
        res = run(sc, rc, qname, count, control)
    except Exception as exc:
        failure = common.ScenarioFailed(str(exc)) if isinstance(exc, BrokerError) else exc
        note = cleanup(rc.params, control, qname, rc.get_params if sc.kind == "get" else None)
        if note:
            failure.add_note(note)
        raise failure from (exc if failure is not exc else None)
    note = cleanup(rc.params, control, qname, rc.get_params if sc.kind == "get" else None)
    if note:
        res.notes.append(note)
        res.ok = False
        res.reason = res.reason or note
    return res


def cleanup(params: ConnParams, control: AmqpConn, qname: str, other: ConnParams | None = None) -> str:
    """Delete the scenario's queue; a non-empty queue means the run left messages behind.

    With `other` (the get node of a pair), the queue is deleted there too, and what it
    still held counts as well."""
    notes = [cleanup_here(params, control, qname)]
    if other is not None:
        notes.append(cleanup_elsewhere(other, qname))
    return "; ".join(note for note in notes if note)


def cleanup_elsewhere(params: ConnParams, qname: str) -> str:
    conn: AmqpConn | None = None
    try:
        conn = connect(params)
        left = conn.delete_queue(qname)
        conn.close()
        conn = None
        return f"{left} messages were left on {qname} at {params.host}:{params.port}" if left else ""
    except BrokerError as exc:
        # A mesh-wide delete from the other node may have come first: nothing left to delete.
        return "" if " 404 " in str(exc) else f"could not delete {qname} at {params.host}:{params.port}: {exc}"
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort
        return f"could not delete {qname} at {params.host}:{params.port}: {type(exc).__name__}: {exc}"
    finally:
        if conn is not None:
            conn.abort()


def cleanup_here(params: ConnParams, control: AmqpConn, qname: str) -> str:
    try:
        try:
            left = control.delete_queue(qname)
        except (BrokerError, OSError):
            # The control connection may be the casualty of the failure: use a fresh one.
            control.abort()
            control = connect(params)
            left = control.delete_queue(qname)
        control.close()
        return f"{left} messages were left on {qname}" if left else ""
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort
        control.abort()
        return f"could not delete {qname}: {type(exc).__name__}: {exc}"


def run_live(sc: Scenario, rc: RunContext, qname: str, count: int, control: AmqpConn) -> common.Result:
    spec = PubSpec(qname, count, sc.size, sc.persistent, sc.confirms)
    deadline = time.monotonic() + rc.timeout_s
    kids = common.Children()
    try:
        kids.start("consumer", consumer_main, rc.params, qname, count, kids.events, None, rc.idle_s, True)
        kids.await_all("ready", ["consumer"], deadline)
        go = kids.ctx.Event()
        kids.start("producer", common.producer_main, *producer(rc.params, spec), kids.events, go, rc.timeout_s)
        results, cpu0, cpu1 = timed(rc, kids, go, ["producer"], ["producer", "consumer"], deadline)
    finally:
        kids.stop()
    prod, cons = results["producer"], results["consumer"]
    start = prod["first_send"]
    end = max(cons["last_recv"], prod.get("last_confirm", 0))
    res = summarise(sc, count, start, end, [prod, cons], cpu0, cpu1)
    res.latency_ms = common.percentiles_ms([cons["lat"]])
    verify(res, count, prod["sent"], cons)
    if sc.confirms:
        confirm_notes(res, prod, count)
    return res


def timed(rc: RunContext, kids: common.Children, go: Any, ready: list[str], done: list[str],
          deadline: float) -> tuple[dict, Any, Any]:
    """Once ``ready`` are, start them all (``go``) and wait for ``done``'s results, the
    broker's CPU sampled before and after: what a scenario measures."""
    kids.await_all("ready", ready, deadline)
    cpu0 = common.CpuSample.take(rc.broker_pid)
    go.set()
    results = kids.await_all("result", done, deadline)
    cpu1 = common.CpuSample.take(rc.broker_pid)
    return results, cpu0, cpu1


def publish_all(rc: RunContext, spec: PubSpec, kids: common.Children, deadline: float) -> dict:
    """Pre-load: one producer process publishes ``spec`` at once; its result."""
    go = kids.ctx.Event()
    go.set()
    kids.start("producer", common.producer_main, *producer(rc.params, spec), kids.events, go, rc.timeout_s)
    return kids.await_all("result", ["producer"], deadline)["producer"]


def run_preload(sc: Scenario, rc: RunContext, qname: str, count: int, control: AmqpConn) -> common.Result:
    spec = PubSpec(qname, count, sc.size, sc.persistent, sc.confirms)
    deadline = time.monotonic() + rc.timeout_s
    kids = common.Children()
    try:
        prod = publish_all(rc, spec, kids, deadline)
        loaded_s = (prod["last_send"] - prod["first_send"]) / 1e9
        depth = control.declare_queue(qname, sc.persistent, passive=True)
        consume_go = kids.ctx.Event()
        kids.start("consumer", consumer_main, rc.params, qname, count, kids.events, consume_go, rc.idle_s, False)
        results, cpu0, cpu1 = timed(rc, kids, consume_go, ["consumer"], ["consumer"], deadline)
        cons = results["consumer"]
    finally:
        kids.stop()
    res = summarise(sc, count, cons["started"], cons["last_recv"], [cons], cpu0, cpu1)
    verify(res, count, prod["sent"], cons)
    res.notes.append(f"pre-loaded {depth} msgs in {loaded_s:.1f} s ({count / max(loaded_s, 1e-9):,.0f}/s confirmed)")
    if depth != count:
        res.ok = False
        res.reason = res.reason or f"queue held {depth} messages after pre-loading {count}"
    confirm_notes(res, prod, count, latency=False)
    return res


def run_get(sc: Scenario, rc: RunContext, qname: str, count: int, control: AmqpConn) -> common.Result:
    """Pre-load `count` messages (pipelined, no confirms), wait until the queue holds them all,
    then time one connection's basic.get loop (on rc.get_params' node, if given)."""
    spec = PubSpec(qname, count, sc.size, sc.persistent, sc.confirms)
    deadline = time.monotonic() + rc.timeout_s
    kids = common.Children()
    try:
        prod = publish_all(rc, spec, kids, deadline)
        depth = wait_for_depth(control, qname, count, rc.idle_s, deadline)
        loaded_s = (time.time_ns() - prod["first_send"]) / 1e9
        if depth != count:
            raise common.ScenarioFailed(f"queue held {depth} messages {rc.idle_s:.0f} s after pre-loading {count}")
        elsewhere = rc.get_params is not None
        get_go = kids.ctx.Event()
        kids.start(
            "getter",
            getter_main,
            rc.get_params or rc.params,
            qname,
            count,
            kids.events,
            get_go,
            rc.idle_s,
            rc.get_empty_s,
            elsewhere,
        )
        results, cpu0, cpu1 = timed(rc, kids, get_go, ["getter"], ["getter"], deadline)
        got = results["getter"]
    finally:
        kids.stop()
    res = summarise(sc, count, got["started"], got["last_recv"], [got], cpu0, cpu1)
    res.latency_ms = common.percentiles_ms([got["lat"]])
    verify(res, count, prod["sent"], got)
    if res.latency_ms:  # the table's 0.1 ms steps hide what a round trip takes
        res.notes.append("round trip p50/p99 {:.0f}/{:.0f} µs".format(*(1000 * ms for ms in res.latency_ms[:2])))
    where = f" on :{rc.params.port}, got from :{rc.get_params.port}" if rc.get_params is not None else ""
    res.notes.append(f"pre-loaded {depth} msgs in {loaded_s:.1f} s{where}")
    if got["empties"]:
        res.notes.append(f"{got['empties']} get-empty, longest run {got['longest_empty'] / 1e9:.2f} s")
    return res


def wait_for_depth(control: AmqpConn, qname: str, count: int, idle_s: float, deadline: float) -> int:
    """Passive queue.declare until the queue holds `count` messages, or its count stood still for idle_s."""
    depth, changed = -1, time.monotonic()
    while time.monotonic() < deadline:
        now_depth = control.declare_queue(qname, durable=False, passive=True)
        if now_depth >= count:
            return now_depth
        if now_depth != depth:
            depth, changed = now_depth, time.monotonic()
        elif time.monotonic() - changed > idle_s:
            break
        time.sleep(0.02)
    return depth


def summarise(
    sc: Scenario,
    count: int,
    start_ns: int,
    end_ns: int,
    procs: list[dict[str, Any]],
    cpu0: common.CpuSample,
    cpu1: common.CpuSample,
) -> common.Result:
    if end_ns <= start_ns:
        raise common.ScenarioFailed("no message was delivered")
    elapsed = (end_ns - start_ns) / 1e9
    res = common.throughput(sc.name, count, sc.size, elapsed)
    common.measure_cpu(res, elapsed, [p["cpu"] for p in procs], cpu0, cpu1)
    return res


def verify(res: common.Result, count: int, sent: int, cons: dict[str, Any]) -> None:
    """Exactly the messages sent, each once: else the figure is not valid."""
    problems = []
    if sent != count:
        problems.append(f"producer sent {sent} of {count}")
    if cons["received"] != count or cons["unique"] != count:
        problems.append(f"consumer got {cons['received']} deliveries, {cons['unique']} distinct, of {count} sent")
    if cons["duplicates"]:
        problems.append(f"{cons['duplicates']} duplicates")
    if cons["foreign"]:
        problems.append(f"{cons['foreign']} messages the bench did not send")
    if cons["redelivered"]:
        res.notes.append(f"{cons['redelivered']} flagged redelivered")
    if problems:
        res.ok = False
        res.reason = "; ".join(problems)
        res.messages = cons["received"]
    else:
        res.notes.insert(0, f"verified {count}/{count} exactly once")


def confirm_notes(res: common.Result, prod: dict[str, Any], count: int, latency: bool = True) -> None:
    if prod["nacked"] or prod["acked"] != count or prod["repeated"]:
        res.fail(f"confirms: {prod['acked']} acked, {prod['nacked']} nacked, {prod['repeated']} repeated, of {count}")
    elif latency:
        note = common.latency_note("confirm", prod["confirm_lat"])
        if note:
            res.notes.append(note)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = common.argument_parser(
        __doc__,
        5672,
        list(SCENARIOS),
        10_000,
        "unreported publish-256 messages sent first, so queue and connection code paths are warm",
    )
    ap.add_argument("--user", default="guest")
    ap.add_argument("--password", default="guest")
    ap.add_argument("--vhost", default="/", help="connection.open virtual host")
    ap.add_argument("--count", type=int, default=100_000, help="messages per scenario (but get)")
    ap.add_argument("--get-count", type=int, default=20_000, help="messages of the get scenario (one round trip each)")
    ap.add_argument("--get-host", help="the get scenario's basic.get loop on this host (default --host)")
    ap.add_argument(
        "--get-port",
        type=int,
        help="the get scenario's basic.get loop on this AMQP port, the pre-load on --port: another node "
        "of a mesh (the queue is declared there too); default --port",
    )
    ap.add_argument(
        "--get-empty-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="the get scenario fails after this long of nothing but basic.get-empty",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    params = ConnParams(args.host, args.port, args.user, args.password, args.vhost, io_timeout=args.idle_timeout)
    try:
        probe = connect(params)
        server = probe.server
        probe.close()
    except (BrokerError, OSError) as exc:
        print(f"cannot use {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    counts = f"{args.count} msgs per scenario, {args.get_count} for get"
    print(f"({args.label}: {server} at {args.host}:{args.port}, {counts})", flush=True)
    rc = RunContext(
        params=params,
        broker_pid=common.broker_pids(args),
        count=args.count,
        timeout_s=args.timeout,
        idle_s=args.idle_timeout,
        run_id=uuid.uuid4().hex[:8],
        wait_quiet_s=args.wait_quiet,
        get_count=args.get_count,
        get_params=get_params(args, params),
        get_empty_s=args.get_empty_timeout,
    )
    warm_up = partial(run_messaging, SCENARIOS["publish-256"], rc, args.warmup)

    def run(name: str) -> common.Result:
        return run_messaging(SCENARIOS[name], rc, rc.get_count if name == "get" else rc.count)

    return common.run_all(args, rc.broker_pid, run, warm_up)


def get_params(args: argparse.Namespace, params: ConnParams) -> ConnParams | None:
    """Where the get scenario's basic.get loop runs, if not on the pre-load's node."""
    host, port = args.get_host or args.host, args.get_port or args.port
    if (host, port) == (args.host, args.port):
        return None
    return ConnParams(host, port, params.user, params.password, params.vhost, params.io_timeout)


if __name__ == "__main__":
    sys.exit(main())
