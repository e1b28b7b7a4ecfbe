"""Synthetic snapshot and event entries, written to Redis exactly as nodes write
them, and the rollups a reader should compute from them, worked out here
directly from the traffic (not from the entries) so the pipeline is checked
against something it did not compute."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import msgspec

from metrics.reporter import snapshot_fields
from model import latency
from model.events import DeadLetter, LinkUp
from model.mesh import SCHEMA_VERSION, WINDOW_S, Node, PartialQueue, Snapshot
from model.rollups import split_queue_key

COUNTER_NAMES = ("enqueued", "acked", "forwarded_out", "forwarded_in", "redistributed_out", "redistributed_in",
                 "expired", "dead_lettered")


@dataclass
class PartialTraffic:
    """One partial queue of one node start: its cumulative counters as the node keeps them."""

    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTER_NAMES, 0))
    latency: list[int] = field(default_factory=latency.empty_histogram)
    latency_sum_ms: float = 0.0
    depth: int = 0
    consumers: int = 0


@dataclass
class NodeTraffic:
    id: str
    started_at: float
    seq: int = 0
    queues: dict[str, PartialTraffic] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # the queues of its last snapshot
    queues_version: int = 0
    deepest: dict[tuple[str, float], int] = field(default_factory=dict)  # (queue, window) -> deepest depth seen


class Expected:
    """What happened per (resolution, window start, queue, node), kept as it happens."""

    def __init__(self) -> None:
        self.counts: dict[tuple[int, float, str, str], dict[str, int]] = {}
        self.latency: dict[tuple[int, float, str], list[int]] = {}
        self.depth_last: dict[tuple[int, float, str, str], tuple[float, int]] = {}
        self.depth_max: dict[tuple[int, float, str, str], int] = {}
        self.events: dict[tuple[int, float, str], int] = {}

    def add(self, t: float, queue: str, node: str, counter: str, amount: int) -> None:
        for seconds in (10, 60):
            key = (seconds, float(int(t // seconds) * seconds), queue, node)
            counts = self.counts.setdefault(key, dict.fromkeys(COUNTER_NAMES, 0))
            counts[counter] += amount

    def ack_latency(self, t: float, queue: str, micros: float) -> None:
        for seconds in (10, 60):
            key = (seconds, float(int(t // seconds) * seconds), queue)
            self.latency.setdefault(key, latency.empty_histogram())[latency.bucket_of(micros)] += 1

    def depth(self, t: float, queue: str, node: str, depth: int) -> None:
        for seconds in (10, 60):
            key = (seconds, float(int(t // seconds) * seconds), queue, node)
            if key not in self.depth_last or self.depth_last[key][0] <= t:
                self.depth_last[key] = (t, depth)
            self.depth_max[key] = max(self.depth_max.get(key, 0), depth)

    def event(self, t: float, kind: str) -> None:
        for seconds in (10, 60):
            key = (seconds, float(int(t // seconds) * seconds), kind)
            self.events[key] = self.events.get(key, 0) + 1

    def queue_total(self, seconds: int, start: float, queue: str, counter: str) -> int:
        return sum(c[counter] for (s, w, q, _), c in self.counts.items() if (s, w, q) == (seconds, start, queue))


class Mesh:
    """Nodes whose traffic the test drives (a queue of a vhost other than "/" named by
its ``model.rollups.queue_key``); ``snapshot`` writes what a node would
    (``headed`` False: what a node of an earlier version wrote, with no head fields
    and no ``window_depth_max``). Depths change only at snapshots here, so the
    deepest depth a node reports for a window is the deepest its snapshots show."""

    def __init__(self, client, prefix: str = "meshgate", seed: int = 7, headed: bool = True) -> None:
        self.client = client
        self.prefix = prefix
        self.headed = headed
        self.nodes: dict[str, NodeTraffic] = {}
        self.expected = Expected()
        self.random = random.Random(seed)
        self._encode = msgspec.json.Encoder().encode

    def start(self, node: str, at: float) -> NodeTraffic:
        """Start (or restart: counters from zero) a node."""
        self.nodes[node] = NodeTraffic(node, at)
        return self.nodes[node]

    def send(self, t: float, node: str, queue: str, count: int = 1, *, via_link: bool = False) -> None:
        partial = self.nodes[node].queues.setdefault(queue, PartialTraffic())
        partial.counters["enqueued"] += count
        partial.depth += count
        self.expected.add(t, queue, node, "enqueued", count)
        if via_link:
            partial.counters["forwarded_in"] += count
            self.expected.add(t, queue, node, "forwarded_in", count)

    def ack(self, t: float, node: str, queue: str, count: int = 1, latency_us: float = 2000.0) -> None:
        partial = self.nodes[node].queues[queue]
        partial.counters["acked"] += count
        partial.depth -= count
        self.expected.add(t, queue, node, "acked", count)
        for _ in range(count):
            partial.latency[latency.bucket_of(latency_us)] += 1
            partial.latency_sum_ms += latency_us / 1000
            self.expected.ack_latency(t, queue, latency_us)

    def forward(self, t: float, node: str, queue: str, count: int) -> None:
        partial = self.nodes[node].queues[queue]
        partial.counters["forwarded_out"] += count
        partial.depth -= count
        self.expected.add(t, queue, node, "forwarded_out", count)

    def snapshot(self, t: float, node: str, *, count_depth: bool = True) -> Snapshot:
        traffic = self.nodes[node]
        traffic.seq += 1
        window = t // WINDOW_S * WINDOW_S
        queues = []
        for name, partial in sorted(traffic.queues.items()):
            deepest = traffic.deepest[(name, window)] = max(traffic.deepest.get((name, window), 0), partial.depth)
            vhost, queue_name = split_queue_key(name)
            queues.append(PartialQueue(
                node=node, name=queue_name, vhost=vhost, depth=partial.depth, in_flight=0, consumers=partial.consumers,
                latency=latency.trimmed(list(partial.latency)), latency_sum_ms=partial.latency_sum_ms,
                window_depth_max=deepest if self.headed else 0, **partial.counters))
            if count_depth:
                self.expected.depth(t, name, node, partial.depth)
        names = sorted(traffic.queues)
        if names != traffic.names:
            traffic.names, traffic.queues_version = names, traffic.queues_version + 1
        snapshot = Snapshot(seq=traffic.seq, taken_at=t, node=Node(
            id=node, name=node, version="test", started_at=traffic.started_at, last_seen=t), queues=queues,
            queues_version=traffic.queues_version)
        self.write_snapshot(snapshot)
        return snapshot

    def write_snapshot(self, snapshot: Snapshot) -> None:
        data = self._encode(snapshot)
        fields = snapshot_fields(snapshot, data) if self.headed else {
            "node": snapshot.node.id, "seq": snapshot.seq, "schema": SCHEMA_VERSION, "data": data}
        self.client.xadd(f"{self.prefix}:snapshots", fields)

    def event(self, t: float, node: str, kind: str = "link_up", *, count: bool = True) -> None:
        if kind == "dead_letter":
            event = DeadLetter(time=t, node=node, queue="q", reason="expired", dead_letter_queue="DLQ", count=1)
        else:
            event = LinkUp(time=t, node=node, peer="p", peer_name="p", dialled=True)
        self.client.xadd(f"{self.prefix}:events", {
            "node": node, "kind": kind, "schema": SCHEMA_VERSION, "data": self._encode(event)})
        if count:
            self.expected.event(t, kind)

    def raw(self, stream: str, fields: dict) -> None:
        self.client.xadd(f"{self.prefix}:{stream}", fields)


def started_mesh(client, back: int, nodes: tuple[str, ...] = ("a", "b", "c"), **options) -> tuple[Mesh, float]:
    """A ``Mesh`` (made with ``options``) whose ``nodes`` started a second before ``base``, which
    is ``back`` seconds before the last whole minute; returns (mesh, base)."""
    mesh = Mesh(client, **options)
    base = float(int(time.time() // 60) * 60 - back)
    for node in nodes:
        mesh.start(node, base - 1)
    return mesh, base
