"""What the console shows, derived from the nodes' snapshots: rows of the node,
queue and link tables with cluster totals and rates. The per-node parts are the
model's own structs (model.mesh)."""

from __future__ import annotations

from typing import Literal

import msgspec

from model.mesh import Link, Node, PartialQueue
from model.names import DEFAULT_VHOST
from model.rollups import queue_key

NodeState = Literal["up", "leaving", "down", "silent"]  # silent: linked, but writes no snapshots


class Rates(msgspec.Struct, kw_only=True):
    """Messages per second over the last snapshot interval. ``enqueue`` counts what
    producers sent (not messages forwarded in from other nodes, which were sent once
    already); ``forward`` and ``redistribute`` what left for other nodes."""

    enqueue: float = 0.0
    ack: float = 0.0
    forward: float = 0.0
    redistribute: float = 0.0
    expire: float = 0.0
    dead_letter: float = 0.0

    def add(self, other: Rates) -> None:
        for field in self.__struct_fields__:
            setattr(self, field, getattr(self, field) + getattr(other, field))


class NodeRow(msgspec.Struct, kw_only=True):
    id: str
    name: str
    state: NodeState
    age: float | None  # seconds since its last snapshot (None: it never wrote one)
    node: Node | None  # its own last word (None: known only from its peers)
    queues: int = 0
    messages: int = 0  # waiting, in flight and in doubt, over its partial queues
    consumers: int = 0
    in_doubt: int = 0
    links_up: int = 0
    links_down: int = 0
    rates: Rates = msgspec.field(default_factory=Rates)


class QueueWhere(msgspec.Struct, kw_only=True):
    """Where a queue's messages and consumers are: one node's share, as lists show it."""

    node: str
    node_name: str
    messages: int
    consumers: int
    in_flight: int
    in_doubt: int


class QueuePart(QueueWhere, kw_only=True):
    """One node's partial queue in full, as the queue's own page shows it."""

    depth: int
    forwarding: int
    oldest_age_ms: int | None
    rates: Rates
    partial: PartialQueue  # the node's own figures


class QueueRow(msgspec.Struct, kw_only=True):
    name: str
    vhost: str = DEFAULT_VHOST
    messages: int  # the sum over nodes of waiting, in flight and in doubt
    depth: int
    in_flight: int
    forwarding: int
    in_doubt: int
    consumers: int
    node_count: int
    rates: Rates
    latency: list[int]  # merged histogram (model.latency)
    latency_sum_ms: float = 0.0
    nodes: list[QueueWhere] = []  # by node name

    @property
    def key(self) -> str:
        return queue_key(self.name, self.vhost)


class QueueDetail(QueueRow, kw_only=True):
    """A queue with each node's partial queue in full."""

    nodes: list[QueuePart] = []


class LinkRow(msgspec.Struct, kw_only=True):
    """A link between two nodes, as both ends (or the one that writes snapshots) report it."""

    id: str  # "<node id>~<node id>", the lower id first
    a: str
    a_name: str
    b: str
    b_name: str
    state: Literal["up", "down"]
    direction: str
    since: float
    in_flight: int  # both ways
    backlog: int
    in_doubt: int
    forwarded: int  # both ways, since the ends started
    rate: float  # messages per second forwarded, both ways
    rate_from_a: float = 0.0  # of which from a to b
    rate_from_b: float = 0.0
    ends: list[Link] = []


class Overview(msgspec.Struct, kw_only=True):
    taken_at: float
    nodes_up: int
    nodes_down: int
    nodes: int
    links_up: int
    links_down: int
    queues: int
    messages: int
    consumers: int
    connections: int
    in_doubt: int
    rates: Rates
    metrics_behind: list[str] = []  # names of nodes whose publishing to Redis is behind
