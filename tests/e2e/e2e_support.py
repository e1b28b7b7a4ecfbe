"""Helpers for the end-to-end suite: real ``meshgate broker`` processes, their
configuration and management requests. The clients that talk to them are
``stomp_client.py`` (stomp.py with a frame-collecting listener) and
``raw_stomp.py`` (a raw socket STOMP client for byte-exact tests).

Every wait here is a condition/event wait with a timeout, never a bare sleep:
a test states what it waits for (n messages, a receipt, an ERROR, the socket
closing) and fails with a description of what did arrive when it times out.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

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
                 timeout: float = 30.0, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the meshgate command to completion (for commands expected to exit); ``env``, its
    whole environment (default: this process's)."""
    return subprocess.run([MESHGATE, *args], input=input, capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


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


def older_release(tmp_path_factory, commit: str) -> Path:
    """The source of an older release, from this repository's history (``git archive``),
    to run a node of it beside this release's (``PYTHONPATH``); skips without git or
    without that commit in this checkout's history."""
    repo = Path(__file__).resolve().parents[2]
    if shutil.which("git") is None:
        pytest.skip("git is needed for the source of the older release")
    archive = subprocess.run(["git", "-C", str(repo), "archive", commit], capture_output=True)
    if archive.returncode:
        pytest.skip(f"commit {commit[:12]} is not in this checkout's history")
    target = tmp_path_factory.mktemp("release-" + commit[:8])
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target


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
        self.env: dict[str, str] | None = None  # the process's environment (None: this one's)
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
                                     stdin=subprocess.DEVNULL, cwd=self.workdir, env=self.env)
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


@contextmanager
def module_broker(tmp_path_factory, name: str, config: str | None = None, sets=()) -> Iterator[BrokerProcess]:
    """A started broker for a module-scoped fixture, cleaned up after."""
    broker = BrokerProcess(tmp_path_factory.mktemp(name), name=name, config=config, sets=sets)
    broker.start()
    try:
        yield broker
    finally:
        broker.cleanup()
