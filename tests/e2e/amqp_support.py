"""AMQP clients for the end-to-end tests: pika connections to a broker process's
AMQP listener (found in what the process printed), always closed at teardown."""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path

import pika
from e2e_support import HOST, BrokerProcess, module_broker
from mesh_support import wait_until

from gateway.amqp.codec import encode_method

AMQP_ON = "amqp.bind=127.0.0.1:0"  # a --set that gives a node an AMQP listener on a free port


def amqp_broker(tmp_path_factory, name: str) -> AbstractContextManager[BrokerProcess]:
    """A started broker with an AMQP listener (for a module-scoped fixture), cleaned up after."""
    return module_broker(tmp_path_factory, name, sets=[AMQP_ON])


def declare_dead_lettered(channel, queue: str, dead: str, arguments: dict[str, object]) -> None:
    """Declare ``dead``, then ``queue`` with ``arguments`` and its dead letters routed to ``dead``."""
    channel.queue_declare(dead)
    dead_letters = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}
    channel.queue_declare(queue, arguments={**arguments, **dead_letters})


def amqp_port(process, timeout: float = 10.0) -> int:
    """The port a broker (or a mesh member's process) printed for its AMQP listener
    (the line after its STOMP one, which is what starting it waited for)."""
    deadline = time.monotonic() + timeout
    while not (ports := re.findall(r"listening on amqp://[^\s:]+:(\d+)", process.stdout())):
        assert time.monotonic() < deadline, f"no AMQP listener in the broker's output:\n{process.stdout()[-2000:]}"
        time.sleep(0.02)
    return int(ports[-1])


def amqp_url(process, vhost: str = "/") -> str:
    """A kombu/Celery broker URL for a broker (or a mesh member's process) as guest: the
    vhost is the URL's path (``//`` is ``/``)."""
    return f"amqp://guest:guest@{HOST}:{amqp_port(process)}/{vhost}"


class Pika:
    """Opens pika BlockingConnections; ``close_all`` at teardown."""

    def __init__(self) -> None:
        self.connections: list[pika.BlockingConnection] = []

    def __call__(self, process, user: str = "guest", password: str = "guest", **options) -> pika.BlockingConnection:
        parameters = pika.ConnectionParameters(HOST, amqp_port(process), credentials=pika.PlainCredentials(
            user, password), connection_attempts=1, socket_timeout=10, blocked_connection_timeout=30, **options)
        connection = pika.BlockingConnection(parameters)
        self.connections.append(connection)
        return connection

    def close_all(self) -> None:
        for connection in self.connections:
            if connection.is_open:
                try:
                    connection.close()
                except Exception:  # noqa: BLE001 - already broken by the test: nothing to close
                    pass


def publish_numbered(channel, queue: str, count: int, properties: pika.BasicProperties | None = None) -> None:
    """Publish the bodies ``b"0"``, ``b"1"``, … (``count`` of them) to ``queue`` through the default exchange."""
    for i in range(count):
        channel.basic_publish("", queue, b"%d" % i, properties)


def channels_holding_unacked(connection: pika.BlockingConnection, queue: str, published: int, held: int,
                             prefetch: int, global_prefetch: int | None = None) -> tuple:
    """Two new channels of ``connection`` with something to list: the first in confirm mode,
    having published ``published`` messages to a new ``queue``; the second consuming them
    with ``prefetch`` (and a channel-wide ``global_prefetch``), once ``held`` deliveries sit
    unacked on it. Returns (confirming, consuming)."""
    confirming, consuming = connection.channel(), connection.channel()
    confirming.queue_declare(queue)
    confirming.confirm_delivery()
    publish_numbered(confirming, queue, published)
    consuming.basic_qos(prefetch_count=prefetch)
    if global_prefetch is not None:
        consuming.basic_qos(prefetch_count=global_prefetch, global_qos=True)
    got: list[bytes] = []
    consuming.basic_consume(queue, lambda channel, method, properties, body: got.append(body))
    await_deliveries(connection, got, held)
    return confirming, consuming


def drain(channel, queue: str, count: int, timeout: float = 10.0) -> list:
    """``count`` deliveries (method, properties, body) from ``queue``, acked."""
    got = []
    for method, properties, body in channel.consume(queue, inactivity_timeout=timeout):
        assert method is not None, f"timed out after {len(got)} of {count} messages from {queue}"
        got.append((method, properties, body))
        channel.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    channel.cancel()
    return got


def await_deliveries(connection: pika.BlockingConnection, got: list, count: int, timeout: float = 10.0) -> None:
    """Process ``connection``'s events until its consumers' callbacks have put ``count`` items in ``got``."""
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} deliveries after {timeout} s"
        connection.process_data_events(time_limit=0.05)


def expect_no_more(connection: pika.BlockingConnection, got: list, count: int, wait: float = 0.5) -> None:
    """After ``count`` deliveries came (evidence that they flow), none more within ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)
    assert len(got) == count, f"{len(got)} deliveries where the limit is {count}"


class CeleryWorker:
    """A real ``celery worker`` process (solo pool) of the app module ``app`` in ``workdir``,
    named ``name``, on ``broker_url`` with results in ``backend``; ``env`` adds to its
    environment (what the app module reads besides BROKER, BACKEND and RAN). RAN names a
    file of this worker's own (``ran``) where the app's tasks may note, a line each, what
    they ran: ``runs()`` reads them back, to count executions beside the results."""

    def __init__(self, workdir: Path, app: str, name: str, broker_url: str, backend: str,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.path = workdir / f"{name}.log"
        self.ran = workdir / f"{name}.ran"
        environment = {**os.environ, "BROKER": broker_url, "BACKEND": backend, "PYTHONPATH": str(workdir),
                       "RAN": str(self.ran), **(env or {})}
        environment.pop("DJANGO_SETTINGS_MODULE", None)  # the test run's: Celery would set Django up in the worker
        self.log = self.path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", app, "worker", "--pool=solo", "--concurrency=1",
             "--loglevel=INFO", "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=workdir, env=environment, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.path.read_text()

    def runs(self) -> list[str]:
        """The lines the app's tasks wrote to RAN so far, in the order they ran."""
        return self.ran.read_text().splitlines() if self.ran.exists() else []

    def wait_ready(self) -> None:
        wait_until(lambda: "ready." in self.output() or self.proc.poll() is not None,
                   f"the Celery worker {self.name} to start", timeout=60)
        assert self.proc.poll() is None, self.output()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class RawChannel:
    """A client on raw sockets, through the handshake with channel 1 open: publishes a
    content header's property bytes exactly as given and reads back the property bytes
    of what ``basic.get`` answers, exactly as the node wrote them (no client library
    between: pika and py-amqp decode table values to Python types, losing their codes)."""

    def __init__(self, process, timeout: float = 10.0) -> None:
        from tests.amqp_inputs import PROTOCOL_HEADER, start_ok

        self.sock = socket.create_connection((HOST, amqp_port(process)), timeout=timeout)
        self._data = b""
        self.sock.sendall(PROTOCOL_HEADER)
        self._expect(0x000A000A)  # connection.start
        self.sock.sendall(start_ok())
        self._expect(0x000A001E)  # connection.tune
        self.sock.sendall(encode_method(0, "connection.tune_ok", channel_max=16, frame_max=131072, heartbeat=0)
                          + encode_method(0, "connection.open", virtual_host="/")
                          + encode_method(1, "channel.open"))
        self._expect(0x000A0029)  # connection.open-ok
        self._expect(0x0014000B)  # channel.open-ok

    def declare(self, queue: str, durable: bool = False) -> None:
        self.sock.sendall(encode_method(1, "queue.declare", queue=queue, durable=durable))
        self._expect(0x0032000B)

    def publish(self, queue: str, flags: int, properties: bytes, body: bytes = b"body") -> None:
        """basic.publish to ``queue`` through the default exchange, with these property flags and bytes."""
        from tests.amqp_inputs import frame

        header = struct.pack(">HHQH", 60, 0, len(body), flags) + properties
        self.sock.sendall(encode_method(1, "basic.publish", exchange="", routing_key=queue)
                          + frame(2, 1, header) + frame(3, 1, body))

    def get(self, queue: str) -> tuple[int, bytes]:
        """basic.get (no-ack) from ``queue``: the (flags, property bytes) of the message got."""
        self.sock.sendall(encode_method(1, "basic.get", queue=queue, no_ack=True))
        self._expect(0x003C0047)  # basic.get-ok
        kind, payload = self._frame()
        assert kind == 2, (kind, payload[:40])
        size, flags = struct.unpack_from(">QH", payload, 4)
        while size > 0:  # the body's frames
            kind, body = self._frame()
            assert kind == 3, (kind, body[:40])
            size -= len(body)
        return flags, payload[14:]

    def close(self) -> None:
        self.sock.close()

    def _expect(self, method: int) -> bytes:
        kind, payload = self._frame()
        got = struct.unpack_from(">I", payload)[0]
        assert kind == 1 and got == method, f"expected method {method:#010x}, got {kind} {payload[:60]!r}"
        return payload

    def _frame(self) -> tuple[int, bytes]:
        while True:
            if len(self._data) >= 7:
                kind, _, size = struct.unpack_from(">BHI", self._data)
                if len(self._data) >= 8 + size:
                    payload, self._data = self._data[7:7 + size], self._data[8 + size:]
                    return kind, payload
            chunk = self.sock.recv(65536)
            assert chunk, f"the node closed the socket (after {self._data[:100]!r})"
            self._data += chunk
