"""The Prometheus text format of the mesh's model, for every reader that exports it:
the console's ``GET /metrics`` (every node, from their snapshots) and a node's own
``GET /metrics`` (itself). One set of families, defined once: a series scraped from a
node is the series the console gives for it. A partial queue's series carry its
``vhost`` label, ``/`` included."""

from __future__ import annotations

from typing import NamedTuple

from model.latency import BUCKETS, bounds_us, padded
from model.mesh import Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class NodeUp(NamedTuple):
    name: str
    id: str
    up: bool


_NODE_GAUGES = (
    ("node_connections", "Client connections.", lambda n: n.connections),
    ("node_memory_used_bytes", "Bytes of queued messages, as the memory limit meters them.", lambda n: n.memory_used),
    ("node_memory_limit_bytes", "broker.memory_limit.", lambda n: n.memory_limit),
    ("node_store_bytes", "Journal size on disk.", lambda n: n.store_bytes),
    ("node_messages_in_doubt", "Messages held until a peer says whether it has them.", lambda n: n.in_doubt),
    ("node_start_time_seconds", "When the node started (epoch seconds).", lambda n: n.started_at),
)
_QUEUE_GAUGES = (
    ("queue_messages", "Messages waiting in the partial queue.", lambda q: q.depth),
    ("queue_messages_in_flight", "Delivered to local consumers, not yet acknowledged.", lambda q: q.in_flight),
    ("queue_messages_forwarding", "Sent over links, not yet stored by the peer.", lambda q: q.forwarding),
    ("queue_messages_in_doubt", "Held until a peer says whether it has them.", lambda q: q.in_doubt),
    ("queue_consumers", "Local consumers.", lambda q: q.consumers),
    ("queue_oldest_message_age_seconds", "How long the oldest waiting message has waited.",
     lambda q: (q.oldest_age_ms or 0) / 1000.0),
)
_QUEUE_COUNTERS = (
    ("queue_enqueued", "Messages that entered the partial queue.", "enqueued"),
    ("queue_acked", "Messages acknowledged by local consumers.", "acked"),
    ("queue_forwarded_out", "Messages whose custody passed to another node.", "forwarded_out"),
    ("queue_forwarded_in", "Messages received from another node.", "forwarded_in"),
    ("queue_redistributed_out", "Backlog moved to consumers on another node.", "redistributed_out"),
    ("queue_redistributed_in", "Backlog received from another node.", "redistributed_in"),
    ("queue_expired", "Messages that expired.", "expired"),
    ("queue_dead_lettered", "Messages moved to the dead-letter queue.", "dead_lettered"),
)
_LINK_GAUGES = (
    ("link_up", "1 while the link is up.", lambda link: 1 if link.state == "up" else 0),
    ("link_messages_in_flight", "Forwarded, not yet confirmed stored by the peer.", lambda link: link.in_flight),
    ("link_backlog_messages", "Topic messages kept for the peer.", lambda link: link.backlog),
)
_LINK_COUNTERS = (
    ("link_forwarded_out", "Messages whose custody passed to the peer.", "forwarded_out"),
    ("link_forwarded_in", "Messages received from the peer.", "forwarded_in"),
)
_LE = [f"{bounds_us(i)[1] / 1e6:.6g}" for i in range(BUCKETS - 1)] + ["+Inf"]


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{key}="{_label(str(value))}"' for key, value in labels.items()) + "}"


def exposition(nodes: list[NodeUp], snapshots: list[Snapshot]) -> str:
    """Every node's ``meshgate_node_up`` and, from ``snapshots`` (those of the nodes up),
    their gauges and counters, queues and links."""
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, object]]) -> None:
        name = f"meshgate_{name}_total" if kind == "counter" else f"meshgate_{name}"
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value}" for labels, value in samples)

    family("node_up", "gauge", "1 while the node is up (writing snapshots, not lost by its neighbours).",
           [(_labels(node=node.name, node_id=node.id), 1 if node.up else 0) for node in nodes])
    for name, help_text, get in _NODE_GAUGES:
        family(name, "gauge", help_text, [(_labels(node=s.node.name), get(s.node)) for s in snapshots])
    family("node_metrics_dropped", "counter", "Snapshots and events the node could not write to Redis.",
           [(_labels(node=s.node.name), s.node.metrics.dropped) for s in snapshots])
    # Every vhost's partial queues, each with its vhost ("/" too): summing over
    # ``vhost`` gives what the series without it gave.
    queues = [(s.node.name, q) for s in snapshots for q in s.queues]
    for name, help_text, get in _QUEUE_GAUGES:
        family(name, "gauge", help_text,
               [(_labels(node=node, vhost=q.vhost, queue=q.name), get(q)) for node, q in queues])
    for name, help_text, field in _QUEUE_COUNTERS:
        family(name, "counter", help_text,
               [(_labels(node=node, vhost=q.vhost, queue=q.name), getattr(q, field)) for node, q in queues])
    lines.append("# HELP meshgate_queue_latency_seconds From a SEND accepted to its ack, on whichever node.")
    lines.append("# TYPE meshgate_queue_latency_seconds histogram")
    for node, q in queues:
        total = 0
        labels = _labels(node=node, vhost=q.vhost, queue=q.name)
        for le, count in zip(_LE, padded(q.latency), strict=True):
            total += count
            lines.append(f"meshgate_queue_latency_seconds_bucket{labels[:-1]},le=\"{le}\"}} {total}")
        lines.append(f"meshgate_queue_latency_seconds_sum{labels} {q.latency_sum_ms / 1000.0}")
        lines.append(f"meshgate_queue_latency_seconds_count{labels} {total}")
    links = [(s.node.name, link) for s in snapshots for link in s.links]
    for name, help_text, get in _LINK_GAUGES:
        family(name, "gauge", help_text, [(_labels(node=node, peer=link.peer_name), get(link)) for node, link in links])
    for name, help_text, field in _LINK_COUNTERS:
        family(name, "counter", help_text,
               [(_labels(node=node, peer=link.peer_name), getattr(link, field)) for node, link in links])
    return "\n".join(lines) + "\n"
