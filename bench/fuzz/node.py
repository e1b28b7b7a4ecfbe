"""The node under fuzzing: one real ``meshgate broker`` process on 127.0.0.1 with
every port the fuzzers hit (STOMP, STOMP over WebSocket, AMQP, the mesh link
listener with a cluster password the fuzzer knows), its log in a file the
fuzzer scans, its RSS read with psutil. Only this process is ever stopped, by
its pid."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

HOST = "127.0.0.1"
START_TIMEOUT = 30.0
# What a node logs only when something escaped every handler: Twisted's "Unhandled Error"
# (an exception out of dataReceived) and any traceback (log.exception, a failed Deferred).
UNHANDLED = re.compile(rb"Traceback \(most recent call last\)|Unhandled Error|Unhandled error in Deferred")
_LISTENING = re.compile(r"meshgate node \S+ \(([0-9a-f-]+)\) listening on (\w+)://[^:]+:(\d+)\s*$")
SCHEMES = ("stomp", "ws", "amqp")


class NodeError(Exception):
    pass


def _meshgate() -> str:
    candidate = Path(sys.executable).with_name("meshgate")
    return str(candidate) if candidate.exists() else "meshgate"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def command(checkout: Path | None) -> list[str]:
    """How to run ``meshgate``: the installed one, or another checkout's code (to see
    what the fuzzers find on an older commit)."""
    if checkout is None:
        return [_meshgate()]
    run = f"import sys; sys.path.insert(0, {str(Path(checkout).resolve())!r}); from meshgate.cli import main; " \
          "sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", run]


class FuzzNode:
    def __init__(self, workdir: Path, password: str | None = None, checkout: Path | None = None) -> None:
        self.workdir = Path(workdir)
        self.checkout = checkout
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.password = password or "fuzz-" + secrets.token_hex(16)
        self.log_path = self.workdir / "node.log"
        self.ports: dict[str, int] = {}
        self.node_id = ""
        self.proc: subprocess.Popen | None = None
        self._log_offset = 0

    def config(self, mesh_port: int) -> str:
        return "\n".join((
            '[stomp]', f'bind = "{HOST}:0"',
            '[stomp.websocket]', f'bind = "{HOST}:0"',
            '[amqp]', f'bind = "{HOST}:0"',
            # Durability is not what is fuzzed: without fsync the node takes inputs faster.
            '[store]', 'sync = "never"',
            '[mesh]', f'bind = "{HOST}:{mesh_port}"', f'cluster_password = "{self.password}"',
        )) + "\n"

    def start(self) -> FuzzNode:
        for _ in range(3):  # the mesh port is picked here: another process may take it meanwhile
            mesh_port = free_port()
            config = self.workdir / "node.toml"
            config.write_text(self.config(mesh_port))
            stdout = self.workdir / "node.out"
            with open(stdout, "wb") as out, open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [*command(self.checkout), "broker", "--name", "fuzz", "--config", str(config), "--data",
                     str(self.workdir / "data")],
                    stdout=out, stderr=log, stdin=subprocess.DEVNULL, cwd=self.workdir)
            if self._wait_listening(stdout):
                self.ports["mesh"] = mesh_port
                self._log_offset = self.log_path.stat().st_size
                return self
            self.stop()
            if "in use" not in self.log_path.read_text(errors="replace"):
                break
        raise NodeError(f"the node did not start; its log ({self.log_path}):\n{self.log_tail()}")

    def _wait_listening(self, stdout: Path) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and self.running:
            for line in stdout.read_text(errors="replace").splitlines():
                match = _LISTENING.search(line)
                if match:
                    self.node_id = match.group(1)
                    self.ports[match.group(2)] = int(match.group(3))
            if all(scheme in self.ports for scheme in SCHEMES):
                return True
            time.sleep(0.05)
        return False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss if self.running else 0

    def new_log(self) -> bytes:
        """What the node logged since the last call."""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_offset)
            data = log.read()
        self._log_offset += len(data)
        return data

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def log_tail(self, size: int = 4000) -> str:
        data = self.log_path.read_bytes()
        return data[-size:].decode("utf-8", "replace")

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 15 s; the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode
