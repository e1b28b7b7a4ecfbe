"""Chaos with replicated pairs (docs/ha.md): a mesh of two primary/backup pairs, P and
Q, one witness serving both (it keys its table by node id) and a plain node R. Two
producers with the failover client (``failover:(P1,P2)``) send persistent messages
with receipts to a queue on P; consumers with the failover client on Q
(``failover:(Q1,Q2)``, two of them) and on R ack each message (client-individual).
For MESHGATE_CHAOS_SECONDS (15 s by default, as in CI) a seeded loop
(MESHGATE_CHAOS_SEED; the seed is printed) picks a pair, waits until it is whole
again (one member serving, its backup in sync), kills one of its members with
``kill -9`` — the serving one or the backup — and restarts it with its own config
after a short random delay: a killed serving member is restarted once its backup has
taken over, and rejoins as the backup; a killed backup rejoins and catches up. Both
members of a pair are never down at once (that is an outage, not HA).

At the end: every receipted message was consumed at least once; of the copies of one
message at most one is unmarked (the others carry ``redelivered:true`` or the
client's ``meshgate-resent:true``); nothing is left in the queue on any node; each
pair has exactly one serving member, its backup in sync."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
from chaos_support import CHAOS_SECONDS, chaos_rng, wait_all_consumed
from e2e_support import HOST, BrokerProcess, manage, unique
from ha_support import Member, Witness, ha_table, listening, mesh_table
from mesh_support import free_port, wait_until

from meshgate.client import FailoverConnection, FailoverError
from model.requests import Summary

PASSWORD = "e2e-" + unique("pairs")
TAKEOVER_TIMEOUT = 15.0  # kill -9 of the serving member to its backup listening (normally ~2 s)
HEAL_TIMEOUT = 30.0  # a restarted member back in sync (normally well under a second after it starts)
CLIENT_OPTIONS = "initialReconnectDelay=50&maxReconnectDelay=250&connectionTimeout=2000"


def summary(port: int):
    """The node's own summary, or None if it does not answer (not serving, or just killed)."""
    try:
        reply = manage(port, Summary(), timeout=3)
    except Exception:  # noqa: BLE001  (refused, reset, timed out: not serving)
        return None
    return reply.result if reply.ok else None


class Pair:
    """Node ``name`` as two members, ``name1`` (role primary) and ``name2`` (role backup),
    each with its own data dir, STOMP, mesh and replication ports (fixed across restarts)."""

    def __init__(self, workdir: Path, name: str) -> None:
        self.workdir = workdir
        self.name = name
        self.links = [free_port(), free_port()]
        self.stomps = [free_port(), free_port()]
        self.repl = [free_port(), free_port()]
        self.members: list[Member] = []
        self.kills = 0

    def configure(self, witness: Witness, peers: list[int]) -> None:
        for i, role in enumerate(("primary", "backup")):
            config = mesh_table(PASSWORD, self.links[i], peers) + ha_table(
                role, self.repl[i], self.repl[1 - i], witness.port, password=PASSWORD)
            self.members.append(Member(self.workdir, f"{self.name}{i + 1}", config, node=self.name))

    @property
    def url(self) -> str:
        brokers = ",".join(f"tcp://{HOST}:{port}" for port in self.stomps)
        return f"failover:({brokers})?randomize=false&{CLIENT_OPTIONS}"

    def serving(self) -> list[tuple[Member, object]]:
        """The members that serve now, with their summaries."""
        found = []
        for member in self.members:
            if member.running and listening(member.port):
                node = summary(member.port)
                if node is not None and node.node.ha_role == "primary":
                    found.append((member, node.node))
        return found

    @property
    def stomp(self) -> int:
        """The serving member's STOMP port (for management requests)."""
        serving = self.serving()
        assert len(serving) == 1, f"{self.name}: {len(serving)} serving members\n{self.describe()}"
        return serving[0][0].port

    def state(self) -> str:
        serving = self.serving()
        running = [m.label for m in self.members if m.running]
        return (f"{self.name}: running {running}, serving {[m.label for m, _ in serving]}, "
                f"replication {[n.replication_state for _, n in serving]}")

    def whole(self) -> bool:
        """Both members run, exactly one serves and its backup is in sync."""
        if not all(m.running for m in self.members):
            return False
        serving = self.serving()
        return len(serving) == 1 and serving[0][1].replication_state == "in-sync"

    def wait_whole(self, timeout: float = HEAL_TIMEOUT) -> None:
        wait_until(self.whole, f"pair {self.name} serving with its backup in sync", timeout=timeout,
                   describe=lambda: f"{self.state()}\n{self.describe()}", interval=0.1)

    def describe(self) -> str:
        parts = []
        for member in self.members:
            past = "\n".join(member.past_outputs)
            parts.append(f"===== {member.label} (node {self.name})\n"
                         + (f"--- earlier runs ---\n{past[-6000:]}\n" if past else "")
                         + f"--- current run ---\n{member.describe()}")
        return "\n".join(parts)


class PairsMesh:
    """The witness, pairs P and Q and the plain node R; everything the test started, stopped by pid."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.witness: Witness | None = None
        self.pairs: list[Pair] = []
        self.plain: BrokerProcess | None = None
        self.events: list[str] = []

    def start(self) -> tuple[Pair, Pair, BrokerProcess]:
        self.witness = Witness(self.workdir, PASSWORD)
        p, q = Pair(self.workdir, "P"), Pair(self.workdir, "Q")
        self.pairs = [p, q]
        r_link = free_port()
        p.configure(self.witness, q.links + [r_link])
        q.configure(self.witness, p.links + [r_link])
        self.plain = BrokerProcess(self.workdir, name="R", config=mesh_table(PASSWORD, r_link, p.links + q.links))
        for pair in self.pairs:
            pair.members[0].launch(pair.stomps[0])
        self.plain.start(port=free_port())
        for pair in self.pairs:
            pair.members[0].wait_listening(timeout=20)
            pair.members[1].launch(pair.stomps[1])
        for pair in self.pairs:
            pair.members[1].wait_log(r"replication: caught up with the primary", timeout=20)
            pair.wait_whole()
        for member, others in ((p.members[0], ("Q", "R")), (q.members[0], ("P", "R"))):
            for other in others:
                member.wait_log(rf"mesh: linked with {other}$", timeout=20)
        for other in ("P", "Q"):
            assert self.plain.output.wait_for(rf"mesh: linked with {other}$", stream="stderr", timeout=20), \
                self.plain.describe()
        return p, q, self.plain

    def event(self, text: str) -> None:
        self.events.append(text)
        print(text)

    def describe(self) -> str:
        parts = ["events:\n" + "\n".join(self.events)]
        parts += [pair.describe() for pair in self.pairs]
        if self.plain is not None:
            parts.append(f"===== R (plain)\n{self.plain.describe()}")
        if self.witness is not None:
            parts.append(f"===== witness\n{self.witness.output.text('stdout')}\n{self.witness.output.text('stderr')}")
        return "\n".join(parts)

    def cleanup(self) -> None:
        processes = [m for pair in self.pairs for m in pair.members] + ([self.plain] if self.plain else [])
        for process in processes:  # all at once, so that no backup outlives its primary long enough to take over
            if process.running:
                process.proc.send_signal(signal.SIGTERM)
        for process in processes:
            process.cleanup()
        if self.witness is not None:
            self.witness.stop()


@pytest.fixture
def pairs_mesh(tmp_path):
    made = PairsMesh(tmp_path)
    try:
        yield made
    finally:
        print(made.describe())  # shown by pytest only when the test failed
        made.cleanup()


class Plain:
    """R as ``queue_depths`` wants it (``.name``, ``.stomp``)."""

    def __init__(self, process: BrokerProcess) -> None:
        self.name, self.stomp = process.name, process.port


def produce(url: str, destination: str, name: str, receipted: set, stop: threading.Event, problems: list) -> None:
    conn = FailoverConnection(url).connect()
    n = 0
    try:
        while not stop.is_set():
            body = f"{name}-{n}"
            n += 1
            try:
                conn.send(destination, body, {"persistent": "true"}, timeout=20)  # returns once receipted
            except FailoverError as e:  # outcome unknown: not counted as receipted
                problems.append(f"{body}: {e!r}")
                continue
            receipted.add(body)
    finally:
        conn.disconnect()


def consumer(url: str, destination: str, name: str, deliveries: list) -> FailoverConnection:
    conn = FailoverConnection(url).connect()

    def handle(message) -> None:
        deliveries.append((time.monotonic(), message.body, message.redelivered, message.resent, name,
                           message.headers.get("message-id")))
        conn.ack(message)

    conn.subscribe(destination, id="chaos", ack="client-individual",
                   headers={"activemq.prefetchSize": "20"}, callback=handle)
    return conn


def chaos(pairs: list[Pair], rng, seconds: float, pairs_mesh: PairsMesh) -> int:
    """Kill -9 and restart random members of random pairs for ``seconds``; the number of kills."""
    kills = 0
    began = time.monotonic()
    deadline = began + seconds
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.3, 1.2))  # pacing only
        pair = rng.choice(pairs)
        pair.wait_whole()  # never kill in a pair that is not whole again
        (serving, _), = pair.serving()
        victim = rng.choice(pair.members)
        was_serving = victim is serving
        pid = victim.pid
        victim.kill9()
        kills += 1
        pair.kills += 1
        at = time.monotonic() - began
        if was_serving:
            survivor = next(m for m in pair.members if m is not victim)
            survivor.wait_listening(timeout=TAKEOVER_TIMEOUT)  # the backup took over
            took = time.monotonic() - began - at
        delay = rng.uniform(0.2, 1.0)
        time.sleep(delay)
        victim.launch(victim.port)  # its own config: role as first configured
        if victim is pair.members[0]:  # role = "primary", and the other member serves: it must not serve
            victim.wait_log(r"ha: not starting as the primary: .*rejoins as the backup", timeout=HEAL_TIMEOUT)
        pairs_mesh.event(f"{at:6.1f}s kill -9 {victim.label} ({'serving' if was_serving else 'backup'}, "
                         f"pid {pid})"
                         + (f", {survivor.label} took over in {took:.1f}s" if was_serving else "")
                         + f", restarted after {delay:.1f}s more")
    return kills


@pytest.mark.slow
@pytest.mark.timeout(CHAOS_SECONDS + 240)
def test_random_kill9_of_pair_members_loses_nothing_strands_nothing(pairs_mesh):
    rng = chaos_rng()
    p, q, r = pairs_mesh.start()
    address = unique("chaos-pairs")
    destination = "/queue/" + address
    receipted: set[str] = set()
    deliveries: list[tuple] = []  # (time, body, redelivered, resent, consumer, message-id)
    problems: list[str] = []
    consumers = [consumer(q.url, destination, "q-a", deliveries), consumer(q.url, destination, "q-b", deliveries),
                 consumer(f"failover:(tcp://{HOST}:{r.port})?{CLIENT_OPTIONS}", destination, "r", deliveries)]
    stop = threading.Event()
    producers = [threading.Thread(target=produce, args=(p.url, destination, f"p{i}", receipted, stop, problems),
                                  daemon=True) for i in range(2)]
    for thread in producers:
        thread.start()
    views = [p, q, Plain(r)]
    try:
        wait_until(lambda: len(receipted) >= 20, "the producers under way", timeout=20)
        kills = chaos([p, q], rng, CHAOS_SECONDS, pairs_mesh)
        stop.set()
        for thread in producers:
            thread.join(30)
        assert not any(thread.is_alive() for thread in producers), "a producer is stuck"
        for pair in (p, q):
            pair.wait_whole()
        wait_all_consumed(receipted, deliveries, views, address, consumed_within=60, emptied_within=30)
    finally:
        stop.set()
        for conn in consumers:
            conn.disconnect()
    marks = {"redelivered": sum(1 for d in deliveries if d[2]), "resent": sum(1 for d in deliveries if d[3])}
    pairs_mesh.event(f"{kills} kills (P {p.kills}, Q {q.kills}), {len(receipted)} receipted, "
                     f"{len(deliveries)} deliveries ({len(deliveries) - len({d[1] for d in deliveries})} copies; "
                     f"marked {marks}), {len(problems)} send problems {problems[:3]}")
    assert kills >= 2 and len(receipted) > 50
    for pair in (p, q):
        serving = pair.serving()
        assert len(serving) == 1 and serving[0][1].replication_state == "in-sync", pair.state()
        assert sum(listening(m.port) for m in pair.members) == 1, pair.state()
    copies: dict[str, list[tuple]] = {}
    for at, body, redelivered, resent, *where in deliveries:
        copies.setdefault(body, []).append((at, redelivered, resent, *where))
    unmarked = {body: sorted(c) for body, c in copies.items()
                if len(c) > 1 and sum(1 for entry in c if not (entry[1] or entry[2])) > 1}
    assert not unmarked, f"delivered again without redelivered:true or meshgate-resent:true: " \
                         f"{list(unmarked.items())[:5]}"
