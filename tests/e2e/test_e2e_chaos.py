"""Chaos: four nodes, random kill -9 and restart while two producers send
persistent messages with receipts and two consumers on other nodes client-ack
them. At the end every receipted message was consumed, nothing is left on any
node, and a message delivered twice carried redelivered:true after its first
delivery. MESHGATE_CHAOS_SECONDS sets how long the chaos lasts (short in CI;
run it for minutes by hand)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from chaos_support import CHAOS_SECONDS, chaos_rng, wait_all_consumed
from e2e_support import HOST, unique
from mesh_support import mesh_fixture  # noqa: F401  (the fixture)

from gateway.stomp.codec import FrameParser, encode_frame


class Wire:
    """A blocking raw STOMP 1.2 connection; any socket trouble raises OSError."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=2)
        self.parser = FrameParser("1.2")
        self.pending: list = []
        self.send("CONNECT", {"accept-version": "1.2", "host": "chaos", "heart-beat": "0,0"})
        if self.next(5).command != "CONNECTED":
            raise OSError("no CONNECTED")

    def send(self, command: str, headers: dict, body: bytes = b"") -> None:
        self.sock.sendall(encode_frame(command, headers, body))

    def next(self, timeout: float):
        deadline = time.monotonic() + timeout
        while not self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame in time")
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                raise OSError("connection closed")
            self.pending.extend(self.parser.feed(data))
        return self.pending.pop(0)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def produce(node, destination: str, name: str, receipted: set, stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        try:
            wire = Wire(node.stomp)
        except OSError:
            time.sleep(0.1)
            continue
        try:
            while not stop.is_set():
                body = f"{name}-{n}"
                n += 1  # never resent: a retry would be a new message, not a broker duplicate
                wire.send("SEND", {"destination": destination, "persistent": "true", "receipt": body}, body.encode())
                frame = wire.next(10)
                if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == body:
                    receipted.add(body)
        except (OSError, TimeoutError):
            wire.close()


def consume(node, destination: str, deliveries: list, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            wire = Wire(node.stomp)
            wire.send("SUBSCRIBE", {"id": "s", "destination": destination, "ack": "client-individual",
                                    "activemq.prefetchSize": "20"})
        except OSError:
            time.sleep(0.1)
            continue
        try:
            while not stop.is_set():
                try:
                    frame = wire.next(0.5)
                except TimeoutError:
                    continue
                if frame.command == "MESSAGE":
                    redelivered = frame.headers.get("redelivered") == "true"
                    deliveries.append((time.monotonic(), frame.body.decode(), redelivered, node.name,
                                       frame.headers.get("message-id")))
                    wire.send("ACK", {"id": frame.headers["ack"]})
        except OSError:
            wire.close()
    wire.close()


@pytest.mark.slow
@pytest.mark.timeout(CHAOS_SECONDS + 240)
def test_random_kill9_loses_nothing_strands_nothing(mesh):
    nodes = mesh(4, "full", both_ways=True)
    address = unique("chaos")
    destination = "/queue/" + address
    producers_stop, consumers_stop = threading.Event(), threading.Event()
    receipted: set[str] = set()
    deliveries: list[tuple] = []  # (time, body, redelivered, node, message-id)
    threads = [threading.Thread(target=consume, args=(nodes[i], destination, deliveries, consumers_stop))
               for i in (2, 3)]
    threads += [threading.Thread(target=produce, args=(nodes[i], destination, f"p{i}", receipted, producers_stop))
                for i in (0, 1)]
    for thread in threads:
        thread.start()
    rng = chaos_rng()
    kills = 0
    try:
        deadline = time.monotonic() + CHAOS_SECONDS
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(1.0, 3.0))
            victim = rng.choice(nodes)
            victim.kill9()
            kills += 1
            time.sleep(rng.uniform(0.2, 1.0))
            victim.restart(graceful=False)
        producers_stop.set()
        mesh.wait_links([(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:]])
        wait_all_consumed(receipted, deliveries, nodes, address, consumed_within=90, emptied_within=60)
    finally:
        producers_stop.set()
        consumers_stop.set()
        for thread in threads:
            thread.join(10)
    assert kills >= 1 and len(receipted) > 50
    seen: dict[str, list[tuple[float, bool]]] = {}
    for at, body, redelivered, *where in deliveries:
        seen.setdefault(body, []).append((at, redelivered, *where))
    unflagged = {body: times for body, times in seen.items() if len(times) > 1
                 and not all(entry[1] for entry in sorted(times)[1:])}
    assert not unflagged, f"delivered again without redelivered:true: {list(unflagged.items())[:5]}"
