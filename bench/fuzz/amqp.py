"""The AMQP 0-9-1 port: the protocol header and the handshake (start-ok, tune-ok,
open: sometimes broken), then a session's frames — channels, declares, binds,
publishes with properties and field tables, consumes, gets, acks, confirms,
transactions, heart-beats — some of them mutated. The control client publishes
a message and gets it back with basic.get.

Frames are encoded here, not with gateway.amqp.codec: a fuzzer that shared the
node's encoder would share its mistakes."""

from __future__ import annotations

import datetime
import random
import socket
import struct
import time
import uuid

from bench.fuzz.mutate import Mutator
from bench.fuzz.node import HOST
from bench.fuzz.runner import Case, CaseBuilder, ControlFailed, Target

HEADER = b"AMQP\x00\x00\x09\x01"
P_BROKEN_HANDSHAKE = 0.04  # per handshake frame (four of them)
P_MUTATE = 0.2
P_HOSTILE_TABLE = 0.05
CONTROL_QUEUE = "fuzz-control"


# -- encoding ------------------------------------------------------------------------------------

def frame(kind: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def method(channel: int, class_id: int, method_id: int, *args: bytes) -> bytes:
    return frame(1, channel, struct.pack(">HH", class_id, method_id) + b"".join(args))


def shortstr(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return bytes([len(raw)]) + raw


def longstr(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack(">I", len(raw)) + raw


def short(value: int) -> bytes:
    return struct.pack(">H", value)


def long(value: int) -> bytes:
    return struct.pack(">I", value)


def longlong(value: int) -> bytes:
    return struct.pack(">Q", value)


def bits(*flags: bool) -> bytes:
    return bytes([sum(1 << i for i, flag in enumerate(flags) if flag)])


def table(items: dict) -> bytes:
    body = b"".join(shortstr(key) + value(item) for key, item in items.items())
    return long(len(body)) + body


def value(item: object) -> bytes:
    if isinstance(item, bool):
        return b"t" + bytes([item])
    if isinstance(item, int):
        return b"I" + struct.pack(">i", item) if -2 ** 31 <= item < 2 ** 31 else b"l" + struct.pack(">q", item)
    if isinstance(item, float):
        return b"d" + struct.pack(">d", item)
    if isinstance(item, str):
        return b"S" + longstr(item)
    if isinstance(item, bytes):
        return b"x" + longstr(item)
    if isinstance(item, datetime.datetime):
        return b"T" + longlong(int(item.timestamp()))
    if isinstance(item, dict):
        return b"F" + table(item)
    if isinstance(item, list):
        body = b"".join(value(x) for x in item)
        return b"A" + long(len(body)) + body
    return b"V"


def random_table(rng: random.Random, depth: int = 0) -> dict:
    """Every field type the spec and RabbitMQ know, a little nesting."""
    items: dict = {}
    for _ in range(rng.randrange(5)):
        kind = rng.randrange(9 if depth < 2 else 7)
        key = rng.choice(("x-match", "content-length", "a", "priority", "x-message-ttl", "k" * 40, "é"))
        items[key] = (rng.randrange(-5, 2 ** 40), rng.random() * 1e6, rng.choice(("", "v", "any", "all")),
                      rng.randbytes(rng.randrange(8)), rng.random() < 0.5, None,
                      datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
                      random_table(rng, depth + 1) if depth < 2 else {},
                      [rng.randrange(100), "s", random_table(rng, depth + 1)] if depth < 2 else [])[kind]
    return items


def hostile_table(rng: random.Random) -> bytes:
    """A field table (with its length) a decoder must refuse or survive: deep nesting,
    timestamps past any calendar, lengths past the end, unknown type codes, NaNs,
    thousands of entries."""
    choice = rng.randrange(8)
    if choice == 0:  # tables in tables (or arrays in arrays), hundreds or thousands deep
        depth, array = rng.choice((40, 500, 3000)), rng.random() < 0.5
        inner = b""
        for _ in range(depth):
            inner = b"A" + long(len(inner)) + inner if array else b"F" + long(len(b"\x01k" + inner)) + b"\x01k" + inner
        entries = b"\x01k" + inner
    elif choice == 1:
        entries = shortstr("t") + b"T" + longlong(rng.choice((2 ** 64 - 1, 2 ** 63 - 1, 2 ** 63, 253402300800, 0)))
    elif choice == 2:
        entries = shortstr("s") + rng.choice(b"SxA") .to_bytes(1, "big") + long(rng.choice((2 ** 32 - 1, 2 ** 31, 5)))
    elif choice == 3:
        entries = shortstr("u") + bytes([rng.randrange(256)]) + rng.randbytes(rng.randrange(9))
    elif choice == 4:
        entries = shortstr("n") + rng.choice((b"d" + struct.pack(">d", float("nan")), b"f\x7f\x80\x00\x00",  # inf
                                              b"D\xff" + struct.pack(">i", -2 ** 31), b"l" + longlong(2 ** 63)))
    elif choice == 5:
        entries = b"".join(shortstr(f"k{i}") + b"V" for i in range(rng.choice((2000, 20000))))
    elif choice == 6:
        entries = shortstr("a") + b"I" + long(1) + shortstr("a") + b"S" + longstr("dup") + b"\x00" + b"V" + \
            b"\x02\xff\xfe" + b"t\x01"
    else:
        entries = table(random_table(rng))[4:]
    size = len(entries) if rng.random() < 0.8 else rng.choice((len(entries) + 1, max(len(entries) - 1, 0), 2 ** 32 - 1))
    return long(size) + entries


def any_table(rng: random.Random, items: dict) -> bytes:
    """``items`` as a table, now and then a hostile one instead."""
    return hostile_table(rng) if rng.random() < P_HOSTILE_TABLE else table(items)


# -- a session ---------------------------------------------------------------------------------------

def handshake(rng: random.Random) -> list[bytes]:
    properties = {"product": "fuzz", "capabilities": {"publisher_confirms": True, "basic.nack": True}}
    if rng.random() < 0.3:
        properties.update(random_table(rng))
    if rng.random() < 0.8:
        mechanism, response = b"PLAIN", b"\x00guest\x00guest"
    else:  # AMQPLAIN: a field table without its length (sometimes cut short)
        mechanism, response = b"AMQPLAIN", table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]
        if rng.random() < 0.2:
            response = response[:rng.randrange(len(response))]
    return [
        HEADER,
        method(0, 10, 11, any_table(rng, properties), shortstr(mechanism), longstr(response), shortstr("en_US")),
        method(0, 10, 31, short(rng.choice((0, 16, 2047))), long(rng.choice((0, 4096, 131072))), short(0)),
        method(0, 10, 40, shortstr("/"), shortstr(""), bits(False)),
    ]


class SessionFrames:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        # A few names, auto-deleted with their last consumer: what one case leaves, a later one drains or deletes.
        self.queue = f"fuzz.q{rng.randrange(8)}"
        self.channels = [1]
        self.makers = [self.publish, self.publish, self.publish, self.declare, self.bind, self.consume, self.get,
                       self.settle, self.channel_level, self.other]

    def first(self) -> list[bytes]:
        return [method(1, 20, 10, shortstr("")),
                method(1, 50, 10, short(0), shortstr(self.queue), bits(False, False, False, True, False), table({})),
                method(1, 60, 20, short(0), shortstr(self.queue), shortstr("c1"), bits(False, True, False, False),
                       table({}))]

    @property
    def channel(self) -> int:
        return self.rng.choice(self.channels)

    def next(self) -> list[bytes]:
        return self.rng.choice(self.makers)()

    def publish(self) -> list[bytes]:
        rng, channel = self.rng, self.channel
        exchange, key = rng.choice((("", self.queue), ("amq.topic", "fuzz.t"), ("", "fuzz.nowhere"),
                                    ("fuzz.x", self.queue), ("amq.fanout", ""), ("amq.headers", "")))
        body = rng.randbytes(rng.choice((0, 1, 100, 5000)) if rng.random() < 0.95 else 140000)
        flags, properties = 0, b""
        for bit, encoded in ((15, shortstr("text/plain")), (13, any_table(rng, random_table(rng))), (12, bytes([2])),
                             (11, bytes([rng.randrange(10)])), (9, shortstr("reply")), (8, shortstr("60000")),
                             (7, shortstr("id-1")), (6, longlong(1767225600)), (4, shortstr("guest"))):
            if rng.random() < 0.3:
                flags |= 1 << bit
                properties += encoded
        header = frame(2, channel, short(60) + short(0) + longlong(len(body)) + short(flags) + properties)
        frames = [method(channel, 60, 40, short(0), shortstr(exchange), shortstr(key), bits(rng.random() < 0.2)),
                  header]
        piece = rng.choice((4096 - 8, 131072 - 8, len(body) or 1))
        frames += [frame(3, channel, body[i:i + piece]) for i in range(0, len(body), piece)]
        return frames

    def declare(self) -> list[bytes]:
        rng, channel = self.rng, self.channel
        if rng.random() < 0.5:
            arguments = rng.choice(({}, {"x-message-ttl": 1000}, {"x-max-length": 5}, {"x-dead-letter-exchange": ""},
                                    {"x-unknown": "?"}, {"x-message-ttl": "soon"}))
            return [method(channel, 50, 10, short(0), shortstr(rng.choice((self.queue, "", "amq.bad"))),
                           bits(rng.random() < 0.3, False, rng.random() < 0.2, True, rng.random() < 0.2),
                           any_table(rng, arguments))]
        return [method(channel, 40, 10, short(0), shortstr("fuzz.x"),
                       shortstr(rng.choice(("direct", "topic", "fanout", "headers", "x-bad"))),
                       bits(rng.random() < 0.2, False, True, False, False), table({}))]

    def bind(self) -> list[bytes]:
        rng, channel = self.rng, self.channel
        class_method = rng.choice(((50, 20), (50, 50), (40, 30)))
        args = [short(0), shortstr(self.queue), shortstr(rng.choice(("fuzz.x", "amq.topic", "amq.headers"))),
                shortstr(rng.choice(("fuzz.#", self.queue, "*.x"))), ]
        if class_method != (50, 50):
            args.append(bits(False))
        return [method(channel, *class_method, *args, any_table(rng, rng.choice(({}, {"x-match": "any", "a": 1}))))]

    def consume(self) -> list[bytes]:
        rng, channel = self.rng, self.channel
        if rng.random() < 0.3:
            return [method(channel, 60, 30, shortstr(rng.choice(("c1", "c2", "nope"))), bits(False))]
        if rng.random() < 0.3:
            return [method(channel, 60, 10, long(0), short(rng.randrange(100)), bits(rng.random() < 0.5))]
        return [method(channel, 60, 20, short(0), shortstr(self.queue), shortstr(rng.choice(("", "c2"))),
                       bits(False, rng.random() < 0.5, rng.random() < 0.1, False), table({}))]

    def get(self) -> list[bytes]:
        return [method(self.channel, 60, 70, short(0), shortstr(self.queue), bits(self.rng.random() < 0.5))]

    def settle(self) -> list[bytes]:
        rng, channel, tag = self.rng, self.channel, self.rng.randrange(0, 20)
        return [rng.choice((method(channel, 60, 80, longlong(tag), bits(rng.random() < 0.3)),
                            method(channel, 60, 120, longlong(tag), bits(rng.random() < 0.3, rng.random() < 0.5)),
                            method(channel, 60, 90, longlong(tag), bits(rng.random() < 0.5)),
                            method(channel, 60, 110, bits(True))))]

    def channel_level(self) -> list[bytes]:
        rng = self.rng
        choice = rng.randrange(4)
        if choice == 0:
            number = rng.randrange(1, 5)
            self.channels.append(number)
            return [method(number, 20, 10, shortstr(""))]
        if choice == 1:
            return [method(self.channel, 20, 40, short(200), shortstr("bye"), short(0), short(0))]
        if choice == 2:
            return [method(self.channel, 85, 10, bits(False))]
        return [method(self.channel, 90, rng.choice((10, 20, 30)))]

    def other(self) -> list[bytes]:
        rng = self.rng
        return [rng.choice((frame(8, 0, b""), method(self.channel, 20, 20, bits(True)),
                            method(self.channel, 50, 30, short(0), shortstr(self.queue), bits(False)),
                            method(self.channel, 40, 20, short(0), shortstr("fuzz.x"), bits(False, False)),
                            method(0, 10, 50, short(200), shortstr("bye"), short(0), short(0)),
                            method(self.channel, 60, 40, short(0), shortstr(""), shortstr("q"), bits(False))))]


def lengths(data: bytes) -> list[tuple[int, int]]:
    """The frame's payload size, its channel and (for a method) its class and method ids."""
    fields = [(3, 4), (1, 2)]
    if data[:1] == b"\x01":
        fields += [(7, 2), (9, 2)]
    elif data[:1] == b"\x02":
        fields += [(11, 8), (19, 2)]  # a content header's body size and property flags
    return fields


def corpus(seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    session = SessionFrames(rng)
    frames = handshake(rng) + session.first()
    for _ in range(60):
        frames += session.next()
    return frames


class AmqpTarget(Target):
    name = "amqp"
    scheme = "amqp"

    def __init__(self, node) -> None:
        super().__init__(node)
        self.corpus = corpus()

    def make_case(self, rng: random.Random, index: int) -> Case:
        builder = CaseBuilder(rng, Mutator(rng, lengths), self.corpus, index)
        for part in handshake(rng):
            builder.frames([part], P_BROKEN_HANDSHAKE)
        session = SessionFrames(rng)
        builder.frames(session.first(), P_MUTATE / 4)
        for _ in range(rng.choice((1, 4, 16, 40))):
            builder.frames(session.next(), P_MUTATE)
        return builder.case

    def control(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        token = uuid.uuid4().hex.encode()
        sock = socket.create_connection((HOST, self.port), timeout=timeout)
        try:
            sock.sendall(b"".join((
                HEADER,
                method(0, 10, 11, table({"product": "fuzz-control"}), shortstr("PLAIN"),
                       longstr(b"\x00guest\x00guest"), shortstr("en_US")),
                method(0, 10, 31, short(0), long(131072), short(0)),
                method(0, 10, 40, shortstr("/"), shortstr(""), bits(False)),
                method(1, 20, 10, shortstr("")),
                method(1, 50, 10, short(0), shortstr(CONTROL_QUEUE), bits(False), table({})),
                method(1, 60, 40, short(0), shortstr(""), shortstr(CONTROL_QUEUE), bits(False)),
                frame(2, 1, short(60) + short(0) + longlong(len(token)) + short(0)),
                frame(3, 1, token),
            )))
            buffer = bytearray()
            while token not in buffer:
                sock.sendall(method(1, 60, 70, short(0), shortstr(CONTROL_QUEUE), bits(True)))
                buffer += _read_some(sock, deadline)
                if b"\x00\x0a\x00\x32" in buffer[:64]:  # connection.close in the handshake
                    raise ControlFailed(f"the node closed the control connection: {bytes(buffer[:200])!r}")
            sock.sendall(method(0, 10, 50, short(200), shortstr("bye"), short(0), short(0)))
        finally:
            sock.close()


def _read_some(sock: socket.socket, deadline: float) -> bytes:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ControlFailed("no message back within the control timeout")
    sock.settimeout(min(remaining, 0.2))
    try:
        data = sock.recv(65536)
    except TimeoutError:
        return b""
    if not data:
        raise ControlFailed("the node closed the control connection")
    return data
