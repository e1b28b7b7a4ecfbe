"""Processes of HA nodes (docs/ha.md) for the end-to-end tests: a member of a pair
(``meshgate broker`` with its own data dir, or a shared one, launched without
waiting for listeners, since a backup or a standby has none), a ``meshgate
witness``, a TCP proxy the test can cut, and the set of them a test started,
stopped at teardown. Used by ``test_e2e_ha_replicated.py``,
``test_e2e_ha_mesh_quorum.py``, ``test_e2e_ha_shared_store.py`` and
``test_e2e_chaos_pairs.py``."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from e2e_support import HOST, MESHGATE, BrokerProcess, _Output
from mesh_support import free_port


class Member(BrokerProcess):
    """One member of the pair named ``node`` (each member has its own data dir, named
    after ``label``); ``launch()`` does not wait for listeners, since a backup has none."""

    def __init__(self, workdir: Path, label: str, config: str, node: str = "A", data_dir: Path | None = None) -> None:
        super().__init__(workdir, name=label, config=config, data_dir=data_dir or workdir / f"data-{label}")
        self.label = label
        self.node = node

    def command(self, port: int) -> list[str]:
        cmd = super().command(port)
        cmd[cmd.index("--name") + 1] = self.node
        return cmd

    def launch(self, port: int) -> Member:
        assert not self.running
        if self.output is not None:
            self.past_outputs.append(self.describe())
        self.port = port
        self.proc = subprocess.Popen(self.command(port), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir)
        self.output = _Output(self.proc)
        self.starts += 1
        return self

    def wait_listening(self, timeout: float) -> None:
        match = self.output.wait_for(r"listening on stomp://(\S+):(\d+)\s*$", timeout=timeout)
        assert match is not None, f"{self.label} did not start listening within {timeout} s\n{self.describe()}"
        self.port = int(match.group(2))

    def wait_log(self, pattern: str, timeout: float = 15.0) -> re.Match:
        match = self.output.wait_for(pattern, stream="stderr", timeout=timeout)
        assert match is not None, f"{self.label}: no log line matching {pattern!r} within {timeout} s\n" \
                                  f"{self.describe()}"
        return match

    def wait_exit(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.label} still runs after {timeout} s\n{self.describe()}") from None
        self.output.join()
        return code


class Witness:
    """``meshgate witness`` on a free loopback port (it keys its table by node id, so
    one witness serves any number of pairs that share its password); ``options`` are
    more of its command line (its TLS files)."""

    def __init__(self, workdir: Path, password: str, options: Sequence[str] = ()) -> None:
        self.port = free_port()
        env = {**os.environ, "MESHGATE_HA_PASSWORD": password}
        self.proc = subprocess.Popen([MESHGATE, "witness", "--bind", f"{HOST}:{self.port}", *options], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     cwd=workdir)
        self.output = _Output(self.proc)
        assert self.output.wait_for(r"meshgate witness listening on", timeout=15), self.output.text("stderr")

    def stderr(self) -> str:
        return self.output.text("stderr")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.output.join()


def mesh_table(password: str, bind: int, peers: list[int], *, max_retry_interval_ms: int = 1000,
               check_period_ms: int = 500, connection_ttl_ms: int = 2000) -> str:
    """A [mesh] table on loopback: ``bind``, the ``peers`` to dial, quick retries and liveness checks."""
    static = ", ".join(f'"{HOST}:{port}"' for port in peers)
    return (f'[mesh]\nbind = "{HOST}:{bind}"\nstatic = [{static}]\ncluster_password = "{password}"\n'
            f"retry_interval_ms = 200\nmax_retry_interval_ms = {max_retry_interval_ms}\n"
            f"check_period_ms = {check_period_ms}\nconnection_ttl_ms = {connection_ttl_ms}\n")


def ha_table(role: str, bind: int, peer: int, witness: int | None = None, extra: str = "", *,
             password: str | None = None) -> str:
    """The [ha] table of a replicated member (quick heartbeats and takeover), then ``extra``."""
    text = (f'[ha]\nmode = "replicated"\nrole = "{role}"\nreplication_bind = "{HOST}:{bind}"\n'
            f'peer = "{HOST}:{peer}"\nheartbeat_ms = 200\ntakeover_after_ms = 1000\n')
    if password is not None:
        text += f'password = "{password}"\n'
    if witness is not None:
        text += f'witness = "{HOST}:{witness}"\n'
    return text + extra


class Producing:
    """Persistent sends of ``bodies`` to ``queue`` on a thread of their own, each returning
    once receipted; what was receipted, and what the thread raised, are kept."""

    def __init__(self, producer, queue: str, bodies: list[str]) -> None:
        self.receipted: list[str] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._send, args=(producer, queue, bodies), daemon=True)
        self.thread.start()

    def _send(self, producer, queue: str, bodies: list[str]) -> None:
        try:
            for body in bodies:
                producer.send(queue, body, {"persistent": "true"}, timeout=30)  # returns once receipted
                self.receipted.append(body)
        except BaseException as problem:  # noqa: BLE001 -- the test reports it
            self.errors.append(problem)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((HOST, port)) == 0


class Proxy:
    """A TCP proxy on a fixed port that the test stops (closing every connection:
    the link is cut) and starts again."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = free_port()
        self.server: socket.socket | None = None
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()

    def start(self) -> Proxy:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((HOST, self.port))
        server.listen(16)
        self.server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()
        return self

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((HOST, self.target), timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                if self.server is not server:
                    client.close()
                    upstream.close()
                    return
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def relayed(self, data: bytes) -> None:
        """Each chunk on its way through, in either direction (a test may keep them)."""

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self.relayed(data)
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        with self.lock:
            server, self.server = self.server, None
            sockets, self.sockets = self.sockets, []
        if server is not None:
            server.close()
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


class HAProcesses:
    """The members, witnesses and proxies a test started, all stopped at teardown by ``cleanup``;
    ``password`` is what the witnesses share with the members."""

    def __init__(self, workdir: Path, password: str | None = None) -> None:
        self.workdir = workdir
        self.password = password
        self.members: list[Member] = []
        self.witnesses: list[Witness] = []
        self.proxies: list[Proxy] = []

    def member(self, label: str, config: str, node: str = "A") -> Member:
        member = Member(self.workdir, label, config, node=node)
        self.members.append(member)
        return member

    def witness(self, options: Sequence[str] = ()) -> Witness:
        assert self.password is not None, "a witness needs the members' password"
        witness = Witness(self.workdir, self.password, options)
        self.witnesses.append(witness)
        return witness

    def proxy(self, target: int) -> Proxy:
        proxy = Proxy(target).start()
        self.proxies.append(proxy)
        return proxy

    def cleanup(self) -> None:
        for member in self.members:
            try:
                if member.running and member.pid is not None:
                    os.kill(member.pid, signal.SIGCONT)  # a member frozen by the test could not stop
            except OSError:
                pass
            print(member.describe())
            member.cleanup()
        for proxy in self.proxies:
            proxy.stop()
        for witness in self.witnesses:
            witness.stop()
