"""The STOMP port (plain TCP): a CONNECT of some version (sometimes broken), then a
session's frames — SEND, SUBSCRIBE, ACK/NACK, transactions, heart-beats — some of
them mutated. The control client connects, subscribes, sends and receives a
message. The frame generator is shared with the WebSocket fuzzer."""

from __future__ import annotations

import random
import socket
import time
import uuid
from collections.abc import Callable

from bench.fuzz.mutate import Mutator
from bench.fuzz.node import HOST
from bench.fuzz.runner import Case, CaseBuilder, ControlFailed, Target

VERSIONS = ("1.0", "1.1", "1.2")
P_BROKEN_HANDSHAKE = 0.1
P_MUTATE = 0.25
CONTROL_QUEUE = "/queue/fuzz-control"
DURABLE_TOPIC = "/topic/fuzz-durable"  # outside /topic/fuzz.>: only expired messages are sent to it
# Broker-computed headers a client must not be able to shadow, and headers with meaning to the broker.
TRICKY_HEADERS = ("content-length", "message-id", "subscription", "destination", "ack", "redelivered", "receipt",
                  "content-type", "transaction", "persistent", "priority", "expires", "reply-to", "selector",
                  "activemq.prefetchSize", "activemq.subscriptionName", "durable", "id", "heart-beat", "x-a\\c")
TRICKY_VALUES = ("", "a\\nb", "a\\cb", "\\", "a\\r", "\\t", "é", "-1", "99999999999", "1,2,3", "x" * 300, "/queue/",
                 "/temp-queue/r", "true", "client-individual", "foo = 'bar' AND x > 3", "(", "\x7f")


def frame(command: str, headers: list[tuple[str, str]], body: bytes = b"", eol: bytes = b"\n") -> bytes:
    """Headers as given (a fuzzer means what it writes: no escaping, no added header)."""
    head = command.encode() + eol + b"".join(f"{k}:{v}".encode() + eol for k, v in headers)
    return head + eol + body + b"\0"


def connect_frame(rng: random.Random, version: str) -> bytes:
    headers = [("accept-version", version), ("host", rng.choice(("localhost", "/", "fuzz")))]
    if version == "1.0" and rng.random() < 0.5:
        headers = []
    if rng.random() < 0.5:
        headers.append(("heart-beat", rng.choice(("0,0", "0,500", "1000,0", "10,10"))))
    if rng.random() < 0.3:
        headers.append(("client-id", f"fuzz-client-{rng.randrange(4)}"))
    if rng.random() < 0.2:
        headers += [("login", "guest"), ("passcode", "guest")]
    return frame(rng.choice(("CONNECT", "CONNECT", "STOMP")) if version != "1.0" else "CONNECT", headers)


class SessionFrames:
    """Valid frames of a STOMP session, chosen at random (destinations from a small
    set, so the node's state stays bounded; queue messages either expire at once
    or go to the queue the session subscribed to, so they do not pile up)."""

    def __init__(self, rng: random.Random, version: str) -> None:
        self.rng = rng
        self.version = version
        self.queue = f"/queue/fuzz.{rng.randrange(4)}"
        self.subscriptions: list[str] = []
        self.transactions: list[str] = []
        self.makers: list[Callable[[], bytes]] = [
            self.send, self.send, self.send, self.subscribe, self.unsubscribe, self.ack, self.begin, self.end,
            self.heartbeat, self.tricky,
        ]

    def first(self) -> list[bytes]:
        return [self.subscribe(self.queue)]

    def next(self) -> bytes:
        return self.rng.choice(self.makers)()

    def _receipt(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        if self.rng.random() < 0.3:
            headers.append(("receipt", f"r-{self.rng.randrange(1000)}"))
        return headers

    def body(self) -> tuple[bytes, list[tuple[str, str]]]:
        rng = self.rng
        size = rng.choice((0, 1, 16, 300, 5000))
        if rng.random() < 0.5:
            body = rng.randbytes(size)
            return body, [("content-length", str(len(body)))]
        return bytes(rng.choice(b"abc xyz{}\n\r") for _ in range(size)), []

    def send(self) -> bytes:
        rng = self.rng
        if rng.random() < 0.5:
            destination, headers = self.queue, []
        elif rng.random() < 0.5:
            destination, headers = f"/topic/fuzz.{rng.choice(('a', 'b.c', '*', '>'))}", []
        elif rng.random() < 0.2:  # to the durable subscriptions, expired: a durable backlog would only grow
            destination, headers = DURABLE_TOPIC, [("expires", "1")]
        else:
            destination, headers = f"/queue/fuzz.{rng.randrange(8)}", [("expires", "1")]  # expired on arrival
        headers.insert(0, ("destination", destination))
        body, length = self.body()
        headers += length
        if rng.random() < 0.3:
            headers.append(("persistent", "true"))
        if rng.random() < 0.2:
            headers.append(("priority", str(rng.randrange(10))))
        if rng.random() < 0.2 and self.transactions:
            headers.append(("transaction", rng.choice(self.transactions)))
        if rng.random() < 0.1:
            headers.append(("reply-to", "/temp-queue/fuzz"))
        if rng.random() < 0.3:
            headers.append((rng.choice(TRICKY_HEADERS), rng.choice(TRICKY_VALUES)))
        return frame("SEND", self._receipt(headers), body)

    def subscribe(self, destination: str | None = None) -> bytes:
        rng = self.rng
        sub_id = f"s-{len(self.subscriptions)}"
        self.subscriptions.append(sub_id)
        destination = destination or rng.choice((self.queue, "/topic/fuzz.>", "/topic/fuzz.*", "/temp-queue/t"))
        headers = [("destination", destination), ("id", sub_id),
                   ("ack", rng.choice(("auto", "auto", "client", "client-individual")))]
        if rng.random() < 0.2:
            headers.append(("selector", rng.choice(("priority > 3", "x = 'y'", "a IN ('b')", "JMSPriority < 5"))))
        if rng.random() < 0.2:
            headers.append(("activemq.prefetchSize", str(rng.choice((1, 10, 1000)))))
        if rng.random() < 0.05 and destination.startswith("/topic/"):
            headers[0] = ("destination", DURABLE_TOPIC)
            headers.append(("activemq.subscriptionName", f"fuzz-durable-{rng.randrange(2)}"))
        return frame("SUBSCRIBE", self._receipt(headers))

    def unsubscribe(self) -> bytes:
        sub_id = self.rng.choice(self.subscriptions) if self.subscriptions else "s-0"
        headers = [("id", sub_id)] if self.version != "1.0" or self.rng.random() < 0.5 else \
            [("destination", self.queue)]
        return frame("UNSUBSCRIBE", self._receipt(headers))

    def ack(self) -> bytes:
        rng = self.rng
        message_id = f"fuzz-{rng.randrange(1, 50)}"
        if self.version == "1.2":
            headers = [("id", message_id)]
        else:
            headers = [("message-id", message_id), ("subscription", rng.choice(self.subscriptions or ["s-0"]))]
        command = "ACK" if self.version == "1.0" or rng.random() < 0.6 else "NACK"
        return frame(command, self._receipt(headers))

    def begin(self) -> bytes:
        tx = f"tx-{len(self.transactions)}"
        self.transactions.append(tx)
        return frame("BEGIN", self._receipt([("transaction", tx)]))

    def end(self) -> bytes:
        tx = self.rng.choice(self.transactions) if self.transactions else "tx-0"
        return frame(self.rng.choice(("COMMIT", "ABORT")), self._receipt([("transaction", tx)]))

    def heartbeat(self) -> bytes:
        return self.rng.choice((b"\n", b"\r\n", b"\n\n\n"))

    def tricky(self) -> bytes:
        """Frames on the edge of valid: CR LF lines, repeated headers, escapes, an
        unknown command, a late CONNECT, a DISCONNECT."""
        rng = self.rng
        choice = rng.randrange(6)
        if choice == 0:
            return frame("SEND", [("destination", self.queue), ("content-length", "3"), ("content-length", "1")],
                         b"abc", eol=b"\r\n")
        if choice == 1:
            return frame("SEND", [("destination", "/topic/fuzz.e"), ("a\\nb", "c\\cd"), ("x", "\\")], b"escape")
        if choice == 2:
            return frame(rng.choice(("FOO", "send", "MESSAGE", "CONNECTED", "ERROR", "")), [("a", "b")])
        if choice == 3:
            return frame("CONNECT", [("accept-version", self.version)])
        if choice == 4:
            return frame("DISCONNECT", [("receipt", "bye")])
        return frame("SEND", [("destination", "/queue/" + "x" * rng.choice((0, 300, 5000)))], b"long name")


def session_plan(rng: random.Random) -> list[tuple[bytes, float]]:
    """CONNECT (broken now and then), then up to 60 frames, each with the chance it
    is mutated: shared by STOMP over TCP and over WebSocket (which wraps them)."""
    version = rng.choice(VERSIONS)
    session = SessionFrames(rng, version)
    plan = [(connect_frame(rng, version), P_BROKEN_HANDSHAKE)]
    plan += [(first, P_MUTATE / 4) for first in session.first()]
    plan += [(session.next(), P_MUTATE) for _ in range(rng.choice((1, 4, 16, 60)))]
    return plan


def corpus(seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    frames = []
    for version in VERSIONS:
        session = SessionFrames(rng, version)
        frames.append(connect_frame(rng, version))
        frames += [session.next() for _ in range(40)]
    return frames


class StompTarget(Target):
    name = "stomp"
    scheme = "stomp"

    def __init__(self, node) -> None:
        super().__init__(node)
        self.corpus = corpus()

    def make_case(self, rng: random.Random, index: int) -> Case:
        builder = CaseBuilder(rng, Mutator(rng), self.corpus, index)
        for stomp_frame, p in session_plan(rng):
            builder.frames([stomp_frame], p)
        return builder.case

    def control(self, timeout: float) -> None:
        sock = socket.create_connection((HOST, self.port), timeout=timeout)
        try:
            stomp_round_trip(sock.sendall, lambda remaining: _receive(sock, remaining), timeout)
        finally:
            sock.close()


def _receive(sock: socket.socket, remaining: float) -> bytes:
    sock.settimeout(remaining)
    try:
        return sock.recv(65536)
    except TimeoutError:
        raise ControlFailed(f"no answer within the control timeout (last {remaining:.1f} s)") from None


def stomp_round_trip(send: Callable[[bytes], None], receive: Callable[[float], bytes], timeout: float) -> None:
    """CONNECT, SUBSCRIBE (with a receipt), SEND a unique body and read it back.
    ``receive(seconds)`` returns what arrived (b"" once closed) or raises ControlFailed."""
    deadline = time.monotonic() + timeout
    token = uuid.uuid4().hex
    buffer = bytearray()

    def wait_for(what: bytes) -> None:
        while what not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ControlFailed(f"no {what[:40]!r} within {timeout} s; got {bytes(buffer[-200:])!r}")
            data = receive(remaining)
            if not data:
                raise ControlFailed(f"the node closed the control connection; got {bytes(buffer[-200:])!r}")
            buffer.extend(data)

    send(frame("CONNECT", [("accept-version", "1.2"), ("host", "localhost")]))
    wait_for(b"CONNECTED")
    send(frame("SUBSCRIBE", [("destination", CONTROL_QUEUE), ("id", "c"), ("receipt", "subscribed")]))
    wait_for(b"receipt-id:subscribed")
    send(frame("SEND", [("destination", CONTROL_QUEUE), ("content-length", "32")], token.encode()))
    wait_for(token.encode())
    send(frame("DISCONNECT", [("receipt", "bye")]))
    wait_for(b"receipt-id:bye")
