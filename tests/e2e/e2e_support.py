"""Helpers for the end-to-end suite: real ``meshgate broker`` processes, stomp.py
clients with a frame-collecting listener, and a raw socket STOMP client for
byte-exact tests.

Every wait here is a condition/event wait with a timeout, never a bare sleep:
a test states what it waits for (n messages, a receipt, an ERROR, the socket
closing) and fails with a description of what did arrive when it times out.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import stomp
from stomp.exception import ConnectFailedException

HOST = "127.0.0.1"
TIMEOUT = 10.0  # default for every wait; generous, tests normally finish far sooner
START_TIMEOUT = 20.0
STOP_TIMEOUT = 15.0


def _meshgate() -> str:
    candidate = Path(sys.executable).with_name("meshgate")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("meshgate")
    if found is None:
        raise RuntimeError("cannot find the meshgate command next to the Python interpreter or on PATH")
    return found


MESHGATE = _meshgate()


def unique(prefix: str = "d") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def security_config(hashes: Mapping[str, str], users: Mapping[str, list[str]],
                    rules: Iterable[Mapping[str, object]] = ()) -> str:
    """The [security] TOML of ``users`` (name -> groups; password hashes from the ``hashes``
    fixture) and authorization entries (``destination``, and who may ``read``/``write``/``admin``)."""
    lines = []
    for user, groups in users.items():
        lines.append(f"[security.users.{user}]")
        lines += [f"password = {json.dumps(hashes[user])}", f"groups = {json.dumps(groups)}"]
    for rule in rules:
        lines.append("[[security.authorization]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in rule.items()]
    return "\n".join(lines) + "\n"


def queue() -> str:
    """A queue no other test uses."""
    return "/queue/" + unique("q")


def topic() -> str:
    """A topic no other test uses."""
    return "/topic/" + unique("t")


def now_ms() -> int:
    return int(time.time() * 1000)


def run_meshgate(args: list[str], *, input: str | None = None, cwd: Path | None = None,
                 timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run the meshgate command to completion (for commands expected to exit)."""
    return subprocess.run([MESHGATE, *args], input=input, capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def manage(port: int, request, login: str | None = None, passcode: str | None = None, timeout: float = TIMEOUT):
    """Send one management request (a model.requests struct) to the node on ``port``; the Reply."""
    from management.client import ManagementClient

    with ManagementClient(HOST, port, login, passcode, timeout=timeout) as client:
        return client.ask(request)


def manage_result(port: int, request, login: str | None = None, passcode: str | None = None):
    """The result of a request that must succeed on every node it concerns."""
    reply = manage(port, request, login, passcode)
    assert reply.ok and not reply.failures, reply
    return reply.result


def password_hash(password: str) -> str:
    result = run_meshgate(["passwd", "--stdin"], input=password + "\n")
    assert result.returncode == 0, f"meshgate passwd failed: {result.stderr}"
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("pbkdf2_sha256$"), line
    return line


# ---------------------------------------------------------------------------------------
# Broker processes
# ---------------------------------------------------------------------------------------


class BrokerStartError(AssertionError):
    pass


class _Output:
    """Drains a process's stdout and stderr on threads; lines can be waited for."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._cond = threading.Condition()
        self._eof: set[str] = set()
        self._threads = [
            threading.Thread(target=self._pump, args=("stdout", proc.stdout), daemon=True),
            threading.Thread(target=self._pump, args=("stderr", proc.stderr), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _pump(self, name: str, stream) -> None:
        try:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                with self._cond:
                    self.lines[name].append(line)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._eof.add(name)
                self._cond.notify_all()

    def wait_for(self, pattern: str, stream: str = "stdout", timeout: float = TIMEOUT) -> re.Match | None:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                lines = self.lines[stream]
                for line in lines[seen:]:
                    match = regex.search(line)
                    if match:
                        return match
                seen = len(lines)
                remaining = deadline - time.monotonic()
                if stream in self._eof or remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def join(self, timeout: float = 5.0) -> None:
        for thread in self._threads:
            thread.join(timeout)

    def text(self, stream: str) -> str:
        with self._cond:
            return "\n".join(self.lines[stream])


class BrokerProcess:
    """One broker node. ``start()``/``stop()``/``kill9()``/``restart()`` keep the data
    dir; ``restart()`` reuses the port (falling back to a fresh one if it is taken)."""

    def __init__(self, workdir: Path, name: str = "e2e", config: str | None = None,
                 sets: Iterable[str] = (), tls: bool = False, data_dir: Path | None = None) -> None:
        self.workdir = Path(workdir)
        self.name = name
        self.data_dir = Path(data_dir) if data_dir is not None else self.workdir / f"data-{name}"
        self.config_path: Path | None = None
        if config is not None:
            self.config_path = self.workdir / f"{name}.toml"
            self.config_path.write_text(config)
        self.sets = list(sets)
        self.tls = tls
        self.host = HOST
        self.port = 0
        self.tls_port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.output: _Output | None = None
        self.past_outputs: list[str] = []
        self.starts = 0

    # -- state ----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def command(self, port: int) -> list[str]:
        cmd = [MESHGATE, "broker", "--name", self.name, "--stomp", f"{HOST}:{port}", "--data", str(self.data_dir)]
        if self.config_path is not None:
            cmd += ["--config", str(self.config_path)]
        for item in self.sets:
            cmd += ["--set", item]
        return cmd

    def stdout(self) -> str:
        return self.output.text("stdout") if self.output else ""

    def stderr(self) -> str:
        return self.output.text("stderr") if self.output else ""

    def describe(self) -> str:
        status = None if self.proc is None else self.proc.poll()
        return (
            f"broker {self.name} pid={self.pid} port={self.port} exit status={status}\n"
            f"command: {' '.join(self.command(self.port))}\n"
            f"--- stdout ---\n{self.stdout()[-6000:]}\n--- stderr ---\n{self.stderr()[-6000:]}"
        )

    def rss(self) -> int:
        import psutil

        return psutil.Process(self.pid).memory_info().rss

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, port: int | None = None, timeout: float = START_TIMEOUT) -> BrokerProcess:
        assert not self.running, "broker already running"
        if self.output is not None:
            self.past_outputs.append(self.describe())
        port = self.port if port is None else port
        self.proc = subprocess.Popen(self.command(port), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir)
        self.output = _Output(self.proc)
        self.starts += 1
        match = self.output.wait_for(r"listening on stomp://(\S+):(\d+)\s*$", timeout=timeout)
        if match is None:
            self._force_stop()
            raise BrokerStartError(f"broker did not report 'listening on' within {timeout}s\n{self.describe()}")
        self.port = int(match.group(2))
        if self.tls:
            match = self.output.wait_for(r"listening on stomp\+ssl://(\S+):(\d+)\s*$", timeout=timeout)
            if match is None:
                self._force_stop()
                raise BrokerStartError(f"broker did not report its TLS listener\n{self.describe()}")
            self.tls_port = int(match.group(2))
        return self

    def stop(self, timeout: float = STOP_TIMEOUT, expect: int = 0) -> int:
        """Graceful stop (SIGTERM); asserts the exit status (0 unless ``expect`` says)."""
        assert self.proc is not None, "broker was never started"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._force_stop()
            raise AssertionError(f"broker did not exit within {timeout}s of SIGTERM\n{self.describe()}") from None
        self.output.join()
        assert code == expect, f"broker exited with status {code} after SIGTERM\n{self.describe()}"
        return code

    def kill9(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, "broker is not running"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(STOP_TIMEOUT)
        self.output.join()

    def restart(self, graceful: bool = True, timeout: float = START_TIMEOUT) -> BrokerProcess:
        if self.running:
            if graceful:
                self.stop()
            else:
                self.kill9()
        try:
            return self.start(port=self.port, timeout=timeout)
        except BrokerStartError:
            if "in use" not in self.stderr().lower() and "listen" not in self.stderr().lower():
                raise
        return self.start(port=0, timeout=timeout)  # the old port was taken meanwhile

    def _force_stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)
        if self.output is not None:
            self.output.join()

    def cleanup(self) -> None:
        """Stop whatever is left (teardown): SIGTERM, then SIGKILL if it hangs."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        if self.output is not None:
            self.output.join()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


# ---------------------------------------------------------------------------------------
# stomp.py clients
# ---------------------------------------------------------------------------------------


@contextmanager
def module_broker(tmp_path_factory, name: str, config: str | None = None, sets=()) -> Iterator[BrokerProcess]:
    """A started broker for a module-scoped fixture, cleaned up after."""
    broker = BrokerProcess(tmp_path_factory.mktemp(name), name=name, config=config, sets=sets)
    broker.start()
    try:
        yield broker
    finally:
        broker.cleanup()


class ConnectRefused(AssertionError):
    def __init__(self, frame) -> None:
        super().__init__(f"connection refused: {frame.headers if frame is not None else 'socket closed'}")
        self.frame = frame


class Collector(stomp.ConnectionListener):
    """Collects what a stomp.py connection receives; every wait has a timeout."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.connected: list = []
        self.messages: list = []
        self.receipts: list[str] = []
        self.errors: list = []
        self.heartbeats = 0
        self.heartbeat_timeouts = 0
        self.disconnected = False

    def _record(self, attribute: str, item) -> None:
        with self._cond:
            getattr(self, attribute).append(item)
            self._cond.notify_all()

    def on_connected(self, frame) -> None:
        self._record("connected", frame)

    def on_message(self, frame) -> None:
        self._record("messages", frame)

    def on_receipt(self, frame) -> None:
        self._record("receipts", frame.headers.get("receipt-id"))

    def on_error(self, frame) -> None:
        self._record("errors", frame)

    def on_heartbeat(self) -> None:
        with self._cond:
            self.heartbeats += 1
            self._cond.notify_all()

    def on_disconnected(self) -> None:
        with self._cond:
            self.disconnected = True
            self._cond.notify_all()

    def on_heartbeat_timeout(self) -> None:
        with self._cond:
            self.heartbeat_timeouts += 1
            self._cond.notify_all()

    def summary(self) -> str:
        with self._cond:
            messages = [(m.headers.get("destination"), m.body[:40]) for m in self.messages]
            errors = [e.headers for e in self.errors]
            return (f"{len(self.messages)} messages {messages[:30]}, receipts {self.receipts[:30]}, "
                    f"errors {errors}, disconnected={self.disconnected}")

    def wait_until(self, predicate: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; got {self.summary()}")

    def wait_for(self, n: int, timeout: float = TIMEOUT) -> list:
        """Wait until at least ``n`` messages arrived; return all messages so far."""
        self.wait_until(lambda: len(self.messages) >= n, f"{n} messages", timeout)
        with self._cond:
            return list(self.messages)

    def wait_for_body(self, body: str, timeout: float = TIMEOUT) -> list:
        """Wait for a message with this body (a fence); return all messages so far."""
        self.wait_until(lambda: any(m.body == body for m in self.messages), f"message {body!r}", timeout)
        with self._cond:
            return list(self.messages)

    def wait_receipt(self, receipt_id: str, timeout: float = TIMEOUT) -> None:
        self.wait_until(lambda: receipt_id in self.receipts, f"RECEIPT {receipt_id!r}", timeout)

    def wait_error(self, timeout: float = TIMEOUT):
        self.wait_until(lambda: bool(self.errors), "an ERROR frame", timeout)
        return self.errors[0]

    def wait_disconnected(self, timeout: float = TIMEOUT) -> None:
        self.wait_until(lambda: self.disconnected, "the connection to close", timeout)

    def bodies(self) -> list[str]:
        with self._cond:
            return [m.body for m in self.messages]

    def clear(self) -> None:
        with self._cond:
            self.messages.clear()


_receipt_ids = itertools.count(1)


def _receipt_id() -> str:
    return f"r-{next(_receipt_ids)}"


class Client:
    """A stomp.py connection plus its Collector, with version-aware helpers.
    Frames that take ``receipt=True`` wait for their RECEIPT (synchronisation)."""

    def __init__(self, conn, listener: Collector, version: str) -> None:
        self.conn = conn
        self.listener = listener
        self.version = version

    @property
    def messages(self) -> list:
        return self.listener.messages

    @property
    def connected_frame(self):
        return self.listener.connected[0]

    def _receipt(self, headers: dict, receipt) -> str | None:
        if receipt is True:
            receipt = _receipt_id()
        if receipt:
            headers["receipt"] = receipt
        return receipt or None

    def _wait(self, receipt: str | None, wait: bool) -> None:
        if receipt and wait:
            self.listener.wait_receipt(receipt)

    def send(self, destination: str, body: str | bytes = "", *, receipt=False, wait: bool = True,
             headers: Mapping[str, str] | None = None, **more: str) -> None:
        h = dict(headers or {})
        h.update(more)
        rid = self._receipt(h, receipt)
        self.conn.send(destination, body, headers=h)
        self._wait(rid, wait)

    def subscribe(self, destination: str, id: str | None = None, ack: str = "auto", *, receipt=True,
                  headers: Mapping[str, str] | None = None, **more: str) -> str:
        sub_id = id or unique("sub")
        h = dict(headers or {})
        h.update(more)
        rid = self._receipt(h, receipt)
        self.conn.subscribe(destination, id=sub_id, ack=ack, headers=h)
        self._wait(rid, True)
        return sub_id

    def receive(self, destination: str, count: int) -> list:
        """Subscribe to ``destination`` and wait for ``count`` messages."""
        self.subscribe(destination)
        return self.listener.wait_for(count)

    def fenced(self, destination: str, ack: str = "auto") -> list:
        """Subscribe to ``destination`` and send it a fence: the messages it held, then the fence."""
        self.subscribe(destination, ack=ack)
        self.send(destination, "fence")
        return self.listener.wait_for_body("fence")

    def unsubscribe(self, id: str, destination: str | None = None, *, receipt=True,
                    headers: Mapping[str, str] | None = None) -> None:
        h = dict(headers or {})
        rid = self._receipt(h, receipt)
        if self.version == "1.0":
            self.conn.unsubscribe(destination=destination, id=id, headers=h)
        else:
            self.conn.unsubscribe(id, headers=h)
        self._wait(rid, True)

    def ack(self, message, transaction: str | None = None, receipt=False) -> None:
        self._settle(self.conn.ack, message, transaction, receipt)

    def nack(self, message, transaction: str | None = None, receipt=False) -> None:
        if self.version == "1.0":
            raise AssertionError("STOMP 1.0 has no NACK")
        self._settle(self.conn.nack, message, transaction, receipt)

    def _settle(self, method, message, transaction: str | None, receipt) -> None:
        """ACK or NACK, addressed the way the connection's STOMP version wants."""
        rid = _receipt_id() if receipt is True else (receipt or None)
        h = message.headers
        if self.version == "1.2":
            method(h["ack"], transaction=transaction, receipt=rid)
        elif self.version == "1.1":
            method(h["message-id"], h["subscription"], transaction=transaction, receipt=rid)
        else:
            method(h["message-id"], transaction=transaction, receipt=rid)
        self._wait(rid, True)

    def begin(self, transaction: str, receipt=True) -> None:
        h: dict = {}
        rid = self._receipt(h, receipt)
        self.conn.begin(transaction, headers=h)
        self._wait(rid, True)

    def commit(self, transaction: str, receipt=True) -> None:
        h: dict = {}
        rid = self._receipt(h, receipt)
        self.conn.commit(transaction, headers=h)
        self._wait(rid, True)

    def abort(self, transaction: str, receipt=True) -> None:
        h: dict = {}
        rid = self._receipt(h, receipt)
        self.conn.abort(transaction, headers=h)
        self._wait(rid, True)

    def sync(self) -> None:
        """Round trip: everything this client sent before has been processed."""
        h: dict = {}
        rid = self._receipt(h, True)
        # A BEGIN/ABORT pair of a throw-away transaction is a harmless frame that takes a receipt.
        tx = unique("sync")
        self.conn.begin(tx)
        self.conn.abort(tx, headers=h)
        self._wait(rid, True)

    def disconnect(self, timeout: float = TIMEOUT) -> None:
        """DISCONNECT with a receipt, wait for the socket to close."""
        if self.conn.is_connected():
            # stomp.py adds a receipt and closes the socket when the RECEIPT arrives.
            self.conn.disconnect()
            try:
                self.listener.wait_disconnected(timeout)
            finally:
                self.drop()

    def drop(self) -> None:
        """Close the socket without a DISCONNECT (as a crashing client would)."""
        try:
            self.conn.transport.disconnect_socket()
        except Exception:
            pass
        try:
            self.listener.wait_disconnected(5)
        except AssertionError:
            pass


def open_client(broker: BrokerProcess, version: str = "1.2", *, login: str | None = None,
                passcode: str | None = None, heartbeats: tuple[int, int] = (0, 0),
                headers: Mapping[str, str] | None = None, tls: dict | None = None,
                timeout: float = TIMEOUT) -> Client:
    """Connect a stomp.py client; raises ConnectRefused with the ERROR frame on refusal."""
    port = broker.tls_port if tls is not None else broker.port
    host_and_ports = [(broker.host, port)]
    common = dict(host_and_ports=host_and_ports, reconnect_attempts_max=1, timeout=timeout)
    if version == "1.0":
        conn = stomp.Connection10(**common)
    elif version == "1.1":
        conn = stomp.Connection11(heartbeats=heartbeats, **common)
    elif version == "1.2":
        conn = stomp.Connection12(heartbeats=heartbeats, **common)
    else:
        raise ValueError(version)
    if tls is not None:
        conn.set_ssl(for_hosts=host_and_ports, **tls)
    listener = Collector()
    conn.set_listener("collector", listener)
    client = Client(conn, listener, version)
    try:
        conn.connect(login, passcode, wait=False, headers=dict(headers or {}))
    except ConnectFailedException:
        raise ConnectRefused(None) from None
    listener.wait_until(lambda: bool(listener.connected or listener.errors or listener.disconnected),
                        "CONNECTED", timeout)
    if not listener.connected:
        client.drop()
        raise ConnectRefused(listener.errors[0] if listener.errors else None)
    return client


# ---------------------------------------------------------------------------------------
# Raw socket client
# ---------------------------------------------------------------------------------------


_UNESCAPE = {"1.1": {"n": "\n", "c": ":", "\\": "\\"}, "1.2": {"n": "\n", "c": ":", "\\": "\\", "r": "\r"}}


class RawFrame:
    def __init__(self, command: str, headers: dict[str, str], body: bytes, header_lines: list[str]) -> None:
        self.command = command
        self.headers = headers
        self.body = body
        self.header_lines = header_lines

    def __repr__(self) -> str:
        return f"RawFrame({self.command!r}, {self.headers!r}, {self.body[:80]!r})"


class ConnectionClosed(AssertionError):
    pass


def encode(command: str, headers: Mapping[str, str] | Iterable[tuple[str, str]] = (), body: bytes | str = b"",
           eol: bytes = b"\n") -> bytes:
    """A frame byte for byte as given: no escaping, no content-length unless asked."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    if isinstance(body, str):
        body = body.encode()
    head = command.encode() + eol
    for name, value in items:
        head += f"{name}:{value}".encode() + eol
    return head + eol + body + b"\0"


class RawClient:
    """A STOMP client on a plain socket: what is sent is exactly the given bytes."""

    def __init__(self, host: str, port: int, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.version: str | None = None
        self.heartbeat_times: list[float] = []
        self.closed = False
        self.frames: list[RawFrame] = []  # everything read so far, in order

    @classmethod
    def to(cls, broker: BrokerProcess, timeout: float = TIMEOUT) -> RawClient:
        return cls(broker.host, broker.port, timeout)

    # -- out ------------------------------------------------------------------------------

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, command: str, headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
                   body: bytes | str = b"") -> None:
        self.sendall(encode(command, headers, body))

    def closed_after(self, command: str, headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
                     body: bytes | str = b"") -> list[RawFrame]:
        """Send a frame the broker must refuse: the frames read until it closes the connection."""
        self.send_frame(command, headers, body)
        return self.wait_closed()

    def connect(self, version: str | None = "1.2", headers: Mapping[str, str] | None = None,
                command: str = "CONNECT") -> RawFrame:
        h = {}
        if version is not None:
            h["accept-version"] = version
        h["host"] = "localhost"
        h.update(headers or {})
        self.send_frame(command, h)
        frame = self.read_frame()
        assert frame.command == "CONNECTED", frame
        self.version = frame.headers.get("version", "1.0")
        return frame

    # -- in -------------------------------------------------------------------------------

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(262144)
        except TimeoutError:
            raise
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            raise ConnectionClosed("the broker closed the connection")
        self.buf += data

    def _take_frame(self) -> RawFrame | None:
        buf = self.buf
        while buf[:1] == b"\n" or buf[:2] == b"\r\n":
            del buf[: 1 if buf[:1] == b"\n" else 2]
            self.heartbeat_times.append(time.monotonic())
        if buf[:1] == b"\r":
            return None
        end = buf.find(b"\n\n")
        if end < 0:
            return None
        lines = buf[:end].decode("utf-8").split("\n")
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        command = lines[0]
        headers: dict[str, str] = {}
        table = _UNESCAPE.get(self.version or "1.0") if command != "CONNECTED" else None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if table:
                name = re.sub(r"\\(.)", lambda m: table.get(m.group(1), "\\" + m.group(1)), name)
                value = re.sub(r"\\(.)", lambda m: table.get(m.group(1), "\\" + m.group(1)), value)
            headers.setdefault(name, value)
        start = end + 2
        if "content-length" in headers:
            stop = start + int(headers["content-length"])
            if len(buf) <= stop:
                return None
            assert buf[stop] == 0, f"frame body not NUL-terminated after content-length: {bytes(buf[:200])!r}"
        else:
            stop = buf.find(b"\0", start)
            if stop < 0:
                return None
        frame = RawFrame(command, headers, bytes(buf[start:stop]), lines[1:])
        del buf[: stop + 1]
        self.frames.append(frame)
        return frame

    def read_frame(self, timeout: float = TIMEOUT) -> RawFrame:
        deadline = time.monotonic() + timeout
        while True:
            frame = self._take_frame()
            if frame is not None:
                return frame
            try:
                self._fill(deadline)
            except TimeoutError:
                raise AssertionError(f"no frame within {timeout}s; buffered {bytes(self.buf[:200])!r}") from None

    def expect(self, command: str, timeout: float = TIMEOUT) -> RawFrame:
        frame = self.read_frame(timeout)
        assert frame.command == command, f"expected {command}, got {frame!r}"
        return frame

    def read_frames(self, n: int, timeout: float = TIMEOUT) -> list[RawFrame]:
        deadline = time.monotonic() + timeout
        return [self.read_frame(max(0.001, deadline - time.monotonic())) for _ in range(n)]

    def _read_into(self, frames: list[RawFrame], deadline: float) -> NoReturn:
        """Append the frames that arrive to ``frames`` until reading raises: TimeoutError at
        ``deadline``, ConnectionClosed when the broker closes the connection."""
        while True:
            frame = self._take_frame()
            if frame is not None:
                frames.append(frame)
            else:
                self._fill(deadline)

    def poll(self, duration: float) -> list[RawFrame]:
        """Read whatever arrives during ``duration`` seconds (heart-beats are recorded)."""
        frames: list[RawFrame] = []
        try:
            self._read_into(frames, time.monotonic() + duration)
        except TimeoutError:
            return frames

    def wait_closed(self, timeout: float = TIMEOUT) -> list[RawFrame]:
        """Read until the broker closes the connection; return the frames read meanwhile.
        Fails if the connection is still open after ``timeout``."""
        frames: list[RawFrame] = []
        try:
            self._read_into(frames, time.monotonic() + timeout)
        except ConnectionClosed:
            return frames
        except TimeoutError:
            raise AssertionError(f"connection still open after {timeout}s; frames read: {frames}") from None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
