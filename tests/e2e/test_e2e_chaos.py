"""Chaos: four nodes, random kill -9 and restart while two producers send
persistent messages with receipts and two consumers on other nodes client-ack
them. At the end every receipted message was consumed, nothing is left on any
node, and a message delivered twice carried redelivered:true after its first
delivery. It runs with plaintext links and with every link over mutual TLS
([mesh.tls]; the TLS run first checks that the link ports speak nothing else).
MESHGATE_CHAOS_SECONDS sets how long the chaos lasts (short in CI; run it for
minutes by hand)."""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

import pytest
from chaos_support import CHAOS_SECONDS, chaos_rng, wait_all_consumed
from e2e_support import HOST, unique
from mesh_support import mesh_fixture  # noqa: F401  (the fixture)
from tls_support import Certificates, plaintext_answer, tls_answer

from gateway.stomp.codec import FrameParser, encode_frame
from mesh.codec import encode_frame as encode_link_frame
from mesh.wire import FrameType


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


def assert_links_speak_only_tls(nodes, certificates: Certificates) -> None:
    """Each node's link port refuses a plaintext peer's HELLO (no HELLO of its own comes
    back, the node logs why) and, over mutual TLS with a certificate of the mesh CA,
    answers with its HELLO."""
    plaintext_hello = encode_link_frame(int(FrameType.HELLO), b'{"version": 1}')
    for node in nodes:
        answer = plaintext_answer(node.link, plaintext_hello)
        assert b"\"nonce\"" not in answer and answer[:1] in (b"", b"\x15"), answer  # nothing, or a TLS alert
        node.wait_log(r"tls: peer 127\.0\.0\.1(:\d+)? speaks plaintext; this node requires TLS")
        tls_answer(node.link, certificates, f"probe-{node.name}", expected=f'"name":"{node.name}"'.encode())


@pytest.mark.slow
@pytest.mark.timeout(CHAOS_SECONDS + 240)
@pytest.mark.parametrize("links", ["plaintext", "tls"])
def test_random_kill9_loses_nothing_strands_nothing(mesh, tmp_path: Path, links: str):
    certificates = Certificates(tmp_path / "certificates") if links == "tls" else None
    extra = [certificates.table(f"node{i}") for i in range(4)] if certificates is not None else ""
    nodes = mesh(4, "full", both_ways=True, extra=extra)
    if certificates is not None:
        assert all(re.search(r"^\[mesh\.tls\]$", node.config, re.M) for node in nodes)
        assert_links_speak_only_tls(nodes, certificates)
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
