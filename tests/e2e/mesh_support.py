"""Helpers for the mesh end-to-end tests: several real ``meshgate broker`` processes
on loopback, linked by static connectors and/or multicast discovery.

``mesh(n, topology="full" | "chain" | "ring" | [(i, j), ...], discovery=False, extra="")``
(the ``mesh`` fixture; import ``mesh_fixture`` from here into a test module) picks
free ports, writes one TOML config per node, starts the nodes and waits until every
expected link is up, judging by the ``mesh: linked with NAME`` log lines. It returns a
list of :class:`MeshMember` with ``.stomp`` / ``.link`` ports, ``.proc`` (the
:class:`BrokerProcess`) and ``stop()`` / ``kill9()`` / ``restart()``.

Every wait is bounded; a negative check ("nothing arrives") uses a short quiet
period *after* a positive fence, so it cannot pass just because the mesh was slow.
"""

from __future__ import annotations

import random
import re
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import pytest
from e2e_support import HOST, TIMEOUT, BrokerProcess, unique
from stomp_client import Client, open_client

LINK_TIMEOUT = 20.0  # links normally come up in well under a second
QUIET = 1.5  # how long a negative check waits for something that must not happen
FORBIDDEN_PORTS = {61613, 61614, 61616}
NAMES = "ABCDEFGH"


def free_port() -> int:
    """A TCP port on loopback nobody listens on right now (never the well-known broker ports),
    below the kernel's ephemeral range: a port picked now is bound later by the node given it,
    and meanwhile a port from that range could become some connection's own end (a CI run
    once lost a console mesh to "Address already in use" that way)."""
    low = _ephemeral_low()
    while True:
        port = random.randint(10000, low - 1)
        if port in FORBIDDEN_PORTS:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
        return port


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return max(low, 20000)


def random_group() -> str:
    """A random organisation-local multicast group and port, so parallel runs never meet."""
    return f"udp://239.255.{random.randint(0, 255)}.{random.randint(1, 254)}:{random.randint(40000, 60000)}"


def edges_for(n: int, topology: str | Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    if topology == "full":
        return [(i, j) for i in range(n) for j in range(i + 1, n)]
    if topology == "chain":
        return [(i, i + 1) for i in range(n - 1)]
    if topology == "ring":
        return [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1)]
    if topology in ("none", None):
        return []
    return [tuple(edge) for edge in topology]  # type: ignore[misc]


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class MeshMember:
    """One node of a test mesh."""

    def __init__(self, owner: MeshFactory, index: int, name: str, link: int, workdir: Path,
                 data_dir: Path | None = None) -> None:
        self.owner = owner
        self.index = index
        self.name = name
        self.link = link
        self.workdir = workdir
        self.proc = BrokerProcess(workdir, name=name, config="", data_dir=data_dir)
        self.config = ""

    # -- config ---------------------------------------------------------------------------

    def write_config(self, text: str) -> None:
        self.config = text
        assert self.proc.config_path is not None
        self.proc.config_path.write_text(text)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def stomp(self) -> int:
        return self.proc.port

    @property
    def link_address(self) -> str:
        return f"{HOST}:{self.link}"

    @property
    def running(self) -> bool:
        return self.proc.running

    @property
    def data_dir(self) -> Path:
        return self.proc.data_dir

    def start(self) -> MeshMember:
        self.proc.start()
        return self

    def stop(self) -> None:
        self.proc.stop()

    def kill9(self) -> None:
        self.proc.kill9()

    def restart(self, graceful: bool = True) -> MeshMember:
        self.proc.restart(graceful=graceful)
        return self

    # -- logs -----------------------------------------------------------------------------

    def stderr(self) -> str:
        return self.proc.stderr()

    def count(self, pattern: str) -> int:
        """How many stderr lines of the current process match ``pattern``."""
        regex = re.compile(pattern)
        return sum(1 for line in self.stderr().splitlines() if regex.search(line))

    def wait_log(self, pattern: str, count: int = 1, timeout: float = LINK_TIMEOUT) -> None:
        """Wait until ``count`` stderr lines of the current process match ``pattern``."""
        deadline = time.monotonic() + timeout
        while self.count(pattern) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no {count} log line(s) matching {pattern!r} within {timeout}s\n"
                                     f"{self.owner.describe()}")
            if not self.running:
                raise AssertionError(f"{self.name} exited while waiting for {pattern!r}\n{self.owner.describe()}")
            time.sleep(0.05)

    def linked_count(self, other: MeshMember | str) -> int:
        name = other if isinstance(other, str) else other.name
        return self.count(rf"mesh: linked with {re.escape(name)}$")

    def wait_linked(self, other: MeshMember | str, count: int = 1, timeout: float = LINK_TIMEOUT) -> None:
        name = other if isinstance(other, str) else other.name
        self.wait_log(rf"mesh: linked with {re.escape(name)}$", count, timeout)

    # -- clients --------------------------------------------------------------------------

    def client(self, version: str = "1.2", **kwargs) -> Client:
        client = open_client(self.proc, version, **kwargs)
        self.owner.clients.append(client)
        return client

    def fence(self, destination: str, consumer: Client, prefix: str = "fence") -> str:
        """Send a unique body to ``destination`` on this node and wait until ``consumer`` has it:
        what was sent before it has been delivered. Returns the body."""
        fence = unique(prefix)
        self.client().send(destination, fence, receipt=True)
        consumer.listener.wait_for_body(fence)
        return fence

    def reach(self, topic: str, consumer: Client, timeout: float = 10.0) -> None:
        """Publish probes to ``topic`` on this node until ``consumer`` (on another node) gets
        one: a topic message sent before the subscription's demand reached this node goes
        to nobody, so one fence may be too early; demand arrives in milliseconds."""
        producer = self.client()
        sent: list[str] = []

        def arrived() -> bool:
            sent.append(unique("probe"))
            producer.send(topic, sent[-1])
            return any(m.body in sent for m in consumer.listener.messages)

        wait_until(arrived, f"a probe on {topic} to reach the subscriber", timeout=timeout, interval=0.2)

    def subscriber(self, destination: str, **subscribe) -> Client:
        """A new client of this node, subscribed to ``destination`` (its receipt awaited)."""
        client = self.client()
        client.subscribe(destination, **subscribe)
        return client

    def __repr__(self) -> str:
        return f"<node {self.name} stomp={self.stomp} link={self.link} pid={self.proc.pid}>"


class MeshFactory:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.nodes: list[MeshMember] = []
        self.clients: list[Client] = []
        self.password = "e2e-" + unique("secret")

    def __call__(self, n: int, topology: str | Iterable[tuple[int, int]] = "full", discovery: bool = False,
                 extra: str | Sequence[str] | Mapping[int, str] = "", *, max_hops: int | None = None,
                 load_balancing: str | None = None, password: str | Sequence[str] | None = None,
                 both_ways: bool = False, wait: bool = True, start: bool = True,
                 names: Sequence[str] | None = None, sets: Sequence[str] = ()) -> list[MeshMember]:
        """Make ``n`` nodes. ``topology`` gives the static links (node i lists node j for each
        edge (i, j); ``both_ways`` makes j list i too); with ``discovery=True`` and no explicit
        topology there are no static peers and every node is expected to find every other.
        ``extra`` is TOML lines added to ``[mesh]`` (one string for all nodes, or a list /
        mapping by node index). ``password`` may be one per node. ``sets`` are ``--set KEY=VALUE``
        overrides for every node (e.g. ``metrics.redis_url=...``)."""
        if discovery and topology == "full":
            static_edges: list[tuple[int, int]] = []
            expected = edges_for(n, "full")
        else:
            static_edges = edges_for(n, topology)
            expected = list(static_edges)
        names = list(names or [f"{NAMES[i]}{len(self.nodes) + i}" if self.nodes else NAMES[i] for i in range(n)])
        group = random_group() if discovery else None
        created = []
        for i in range(n):
            member = MeshMember(self, len(self.nodes), names[i], free_port(), self.tmp_path)
            member.proc.sets.extend(sets)
            self.nodes.append(member)
            created.append(member)
        for i, member in enumerate(created):
            peers = [created[j] for (a, j) in static_edges if a == i]
            if both_ways:
                peers += [created[a] for (a, j) in static_edges if j == i]
            node_password = password[i] if isinstance(password, (list, tuple)) else (password or self.password)
            if isinstance(extra, str):
                node_extra = extra
            elif isinstance(extra, Mapping):
                node_extra = extra.get(i, "")
            else:
                node_extra = extra[i]
            lines = [
                "[mesh]",
                f"bind = {_toml_str(member.link_address)}",
                "static = [" + ", ".join(_toml_str(p.link_address) for p in peers) + "]",
                f"cluster_password = {_toml_str(node_password)}",
                "retry_interval_ms = 200",
                "max_retry_interval_ms = 1000",
                "check_period_ms = 500",
                "connection_ttl_ms = 2000",
            ]
            if max_hops is not None:
                lines.append(f"max_hops = {max_hops}")
            if load_balancing is not None:
                lines.append(f"message_load_balancing = {_toml_str(load_balancing)}")
            if node_extra:
                lines.append(node_extra.strip())
            if group is not None:
                lines += [
                    "",
                    "[mesh.discovery]",
                    f"group = {_toml_str(group)}",
                    'interface = "127.0.0.1"',
                    "broadcast_period_ms = 200",
                    "refresh_timeout_ms = 1000",
                ]
            member.write_config("\n".join(lines) + "\n")
        if start:
            for member in created:
                member.start()
            if wait:
                self.wait_links([(created[i], created[j]) for (i, j) in expected])
        return created

    def wait_links(self, pairs: Iterable[tuple[MeshMember, MeshMember]], timeout: float = LINK_TIMEOUT) -> None:
        """Wait until both ends of every pair logged that they are linked with the other."""
        for a, b in pairs:
            a.wait_linked(b, timeout=timeout)
            b.wait_linked(a, timeout=timeout)

    def describe(self) -> str:
        parts = []
        for node in self.nodes:
            past = "\n".join(node.proc.past_outputs)
            parts.append(f"===== {node!r}\n--- config ---\n{node.config}"
                         + (f"--- earlier runs ---\n{past[-4000:]}\n" if past else "")
                         + f"--- current run ---\n{node.proc.describe()}")
        return "\n".join(parts)

    def cleanup(self) -> None:
        for client in self.clients:
            client.drop()
        for node in self.nodes:
            node.proc.cleanup()


@pytest.fixture(name="mesh")
def mesh_fixture(tmp_path) -> Iterable[MeshFactory]:
    factory = MeshFactory(tmp_path)
    try:
        yield factory
    finally:
        # Shown by pytest only when the test failed: every node's config and logs.
        print(factory.describe())
        factory.cleanup()


# ---------------------------------------------------------------------------------------
# Small helpers shared by the mesh tests
# ---------------------------------------------------------------------------------------


def send_many(client: Client, destination: str, bodies: Iterable[str], persistent: bool = True,
              receipts: bool = True, headers: Mapping[str, str] | None = None) -> list[str]:
    """Send each body; with ``receipts`` every SEND asks for one and all are awaited at the end
    (the returned bodies are exactly the receipted ones)."""
    sent = []
    pending = []
    for body in bodies:
        h = dict(headers or {})
        if persistent:
            h["persistent"] = "true"
        rid = None
        if receipts:
            rid = f"rcpt-{unique('s')}"
            h["receipt"] = rid
            pending.append(rid)
        client.conn.send(destination, body, headers=h)
        sent.append(body)
    if pending:
        last = pending[-1]
        client.listener.wait_receipt(last, timeout=30)
        missing = [r for r in pending if r not in client.listener.receipts]
        assert not missing, f"{len(missing)} SENDs got no RECEIPT (first {missing[:5]})"
    return sent


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = TIMEOUT, describe: Callable[[], str] = str,
               interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; {describe()}")
        time.sleep(interval)


def delivered_id(node: MeshMember, destination: str, headers: Mapping[str, str] | None = None) -> str:
    """Send one message to ``destination`` through a new client of ``node`` that subscribed to it
    first, and return the message-id it came back with: the node's own id for it, the one its
    journey is recorded under. A new client each time, so it also works right after a restart."""
    client = node.subscriber(destination)
    client.send(destination, unique("m"), headers=headers, receipt=True)
    [message] = client.listener.wait_for(1)
    client.disconnect()
    return message.headers["message-id"]


def drain(node: MeshMember, destination: str, fence: str | None = None, timeout: float = TIMEOUT,
          **subscribe) -> list:
    """Subscribe a fresh consumer on ``node``, send a fence through the same node and queue, and
    return every message that arrived before it (the fence excluded). Queues are FIFO per node,
    so anything left on the node is delivered before the fence. The consumer is disconnected."""
    fence = fence or unique("fence")
    client = node.client()
    client.subscribe(destination, **subscribe)
    client.send(destination, fence, receipt=True)
    messages = client.listener.wait_for_body(fence, timeout=timeout)
    client.disconnect()
    before = []
    for message in messages:
        if message.body == fence:
            break
        before.append(message)
    return before
