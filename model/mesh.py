"""The state of the mesh: nodes, links, partial queues, topic subscriptions and
connections, as every reader and writer sees them.

Units: times are epoch seconds (float), durations milliseconds, sizes bytes.
Counters (``enqueued``, ``forwarded_out``, …) are cumulative since the node's
``started_at``: a reader computes rates from two snapshots with the same
``started_at`` and starts again from zero when it changes (the node restarted).
docs/management.md lists every field."""

from __future__ import annotations

from typing import Literal

import msgspec

SCHEMA_VERSION = 1

NodeState = Literal["up", "leaving", "down"]


class _Model(msgspec.Struct, kw_only=True):
    """Unknown fields are ignored on decoding, so a newer node may add fields
    without breaking older readers; removing or renaming one bumps SCHEMA_VERSION."""


class Addresses(_Model, kw_only=True):
    stomp: str | None = None  # "host:port" of the STOMP listener
    stomp_tls: str | None = None
    link: str | None = None  # the mesh link listener
    websocket: str | None = None  # STOMP over WebSocket (ws://)
    websocket_tls: str | None = None  # (wss://)
    amqp: str | None = None  # the AMQP 0-9-1 listener
    amqp_tls: str | None = None


class MetricsStatus(_Model, kw_only=True):
    """How the node's publishing to Redis is doing."""

    state: Literal["off", "ok", "behind"] = "off"  # behind: Redis unreachable or slow, entries buffered
    buffered: int = 0  # entries waiting to be written
    dropped: int = 0  # entries dropped since start because the buffer was full
    last_error: str | None = None


class Standby(_Model, kw_only=True):
    """A process waiting to take a node's data dir over (``[ha] mode = "shared-store"``)."""

    host: str
    pid: int
    since: float  # when it started waiting


class ListenerCertificate(_Model, kw_only=True):
    """The certificate a TLS listener or dialler of the node presents (docs/mesh.md "Security")."""

    listener: str  # "stomp+ssl" | "wss" | "amqps" | "mesh" | "replication"
    subject: str  # RFC 4514, e.g. "CN=node-a,O=Example"
    not_after: float  # expiry, epoch seconds


class Node(_Model, kw_only=True):
    id: str
    name: str
    version: str  # Meshgate's version
    group_name: str = ""
    started_at: float
    state: NodeState = "up"  # as seen by the reporter
    last_seen: float  # when the reporter last heard of it (its own: now)
    addresses: Addresses = msgspec.field(default_factory=Addresses)
    connections: int = 0  # client connections
    memory_used: int = 0  # bytes of queued messages (what broker.memory_limit meters)
    memory_limit: int = 0
    store_bytes: int = 0  # journal size on disk
    store_limit: int | None = None  # store.limit
    disk_free: int | None = None  # bytes free on the store's filesystem
    store_blocked: str | None = None  # why persistent producers wait (a limit reached, a failing disk), else None
    in_doubt: int = 0  # messages held until a peer says whether it has them
    metrics: MetricsStatus = msgspec.field(default_factory=MetricsStatus)
    # High availability (docs/ha.md). Plain strings, not literals, so that a reader
    # keeps decoding when a later version adds a mode.
    ha_mode: str = "none"  # "none" | "shared-store" ([ha] mode)
    ha_state: str = "active"  # "active" (serving) | "standby" (waiting; it exposes nothing, so is not reported)
    epoch: int = 0  # the data dir's epoch this process serves under: one more at each shared-store start
    standbys: list[Standby] = []  # processes waiting on this node's data dir lock
    # Replicated pairs ([ha] mode = "replicated"): reported by the serving member.
    ha_role: str = ""  # "primary" while serving ("" without replication)
    replication_state: str = ""  # "no-backup" | "catching-up" | "in-sync"
    replication_lag: int = 0  # journal bytes written and not yet acknowledged by the backup
    replication_sync: bool = False  # receipts wait for the backup (ha.sync) once it is in sync
    replication_backup: str = ""  # the backup's address, as the replication listener sees it
    certificates: list[ListenerCertificate] = []  # one per TLS listener/dialler, as last (re)loaded


class Link(_Model, kw_only=True):
    node: str  # the reporting node
    peer: str
    peer_name: str
    direction: Literal["dialled", "accepted", "duplex"]  # duplex: traffic both ways; else from the dialler
    dialled: bool  # the reporting node dialled it
    state: Literal["up", "down"]  # down: a peer this node has linked with, not linked now
    since: float  # when it came up (or went down)
    address: str | None = None  # the peer's link listener
    in_flight: int = 0  # forwarded messages the peer has not yet confirmed stored
    backlog: int = 0  # topic messages kept for the peer, waiting for its link
    in_doubt: int = 0  # messages held until the peer says whether it has them
    forwarded_out: int = 0  # messages whose custody passed to the peer, since started_at
    forwarded_in: int = 0  # messages received from the peer, since started_at


class RemoteDemand(_Model, kw_only=True):
    node: str  # the node whose consumers want the queue
    via: str  # the neighbour the demand came through
    consumers: int
    hops: int  # 1: a neighbour


WINDOW_S = 10  # the metrics' finest window: the rollups' 10-second one, and ``window_depth_max``'s


class PartialQueue(_Model, kw_only=True, omit_defaults=True):
    """One queue on one node; the cluster-wide queue is the sum over nodes.

    A node may hold thousands of them, most idle: fields at their defaults (zero
    counters, no remote demand, an empty histogram) are left out of the JSON, and
    readers fill them in."""

    node: str
    name: str
    vhost: str = "/"  # left out of the JSON for "/": older readers see what they always saw
    depth: int  # messages waiting
    in_flight: int  # delivered to local consumers, not yet acknowledged
    forwarding: int = 0  # sent over links, not yet stored by the peer
    in_doubt: int = 0
    consumers: int  # local consumers
    remote_demand: list[RemoteDemand] = []
    oldest_age_ms: int | None = None  # how long the oldest waiting message has waited
    enqueued: int = 0
    acked: int = 0  # acknowledged by local consumers
    forwarded_out: int = 0
    forwarded_in: int = 0
    redistributed_out: int = 0  # a backlog that moved to consumers elsewhere
    redistributed_in: int = 0
    expired: int = 0
    dead_lettered: int = 0
    latency: list[int] = []  # model.latency buckets; trailing empty ones left out ([]: nothing counted)
    latency_sum_ms: float = 0.0  # the latencies counted in ``latency``, added up
    # The deepest depth since the 10-second window ``taken_at`` falls in began (at a
    # multiple of 10 s of the node's clock); a window's last snapshot has its deepest.
    window_depth_max: int = 0


class TopicSubscription(_Model, kw_only=True):
    node: str
    name: str  # the subscription's queue: client-id.name for durable ones
    destination: str  # "/topic/PATTERN"
    client_id: str | None = None
    durable: bool
    active: bool  # a subscriber is attached
    depth: int
    in_flight: int = 0
    selector: str | None = None
    connection: str | None = None  # the attached subscriber's connection id


class ChannelSummary(_Model, kw_only=True):
    """One open channel of an AMQP connection."""

    number: int
    consumers: int = 0
    unacked: int = 0  # deliveries (basic.get ones too) awaiting ack, nack or reject
    prefetch: int = 0  # basic.qos per consumer, for consumers made from now on (0: no limit)
    global_prefetch: int = 0  # basic.qos global: unacked shared by the channel's consumers (0: no limit)
    confirm: bool = False  # in publisher-confirm mode (confirm.select)
    transactional: bool = False  # tx.select


class Connection(_Model, kw_only=True):
    id: str
    node: str
    remote: str  # "host:port"
    user: str
    protocol: str  # "stomp" or "amqp"
    version: str
    since: float
    client_id: str | None = None
    subscriptions: int = 0  # consumers (AMQP: on all its channels)
    unacked: int = 0
    vhost: str = "/"  # the vhost the client chose (docs/vhosts.md)
    channels: int = 0  # AMQP: open channels (0 for STOMP)
    channel_details: list[ChannelSummary] = []  # AMQP: one per open channel, by number


class QueueSummary(msgspec.Struct, array_like=True):
    """A partial queue in the gossip: [name, depth, consumers, in_flight, in_doubt, vhost].

    A reader of an earlier release ignores the trailing vhost, so it would take any
    row for "/"'s: mesh.topology sends a node of link protocol 4 the rows of "/"
    alone. (msgspec writes every field of an array-like struct, defaults too: a row
    of "/" says so; a row without it, from such a node, is "/"'s.)"""

    name: str
    depth: int
    consumers: int
    in_flight: int
    in_doubt: int
    vhost: str = "/"


class NodeSummary(_Model, kw_only=True):
    """One node as the mesh view holds it: what gossip carries, and what the
    ``nodes`` request answers per node."""

    node: Node
    links: list[str] = []  # ids of the nodes it is linked with now
    queues: list[QueueSummary] = []
    age: float = 0.0  # seconds since this entry was fresh, as the reporter knows it
    answered: bool = False  # fresh from the node itself, not from gossip
    seq: int = 0  # the node's count of its summaries since it started: the newer one wins


class ClusterView(_Model, kw_only=True):
    schema_version: int = SCHEMA_VERSION
    reporter: str  # the node that was asked
    taken_at: float
    nodes: list[NodeSummary]


class Snapshot(_Model, kw_only=True):
    """What every node writes to ``<prefix>:snapshots`` each interval."""

    schema_version: int = SCHEMA_VERSION
    seq: int  # 1, 2, … per start of the node: (node.id, node.started_at, seq) is unique
    taken_at: float
    node: Node
    queues_version: int = 0  # goes up whenever a queue is created or deleted on the node
    links: list[Link] = []
    queues: list[PartialQueue] = []
    subscriptions: list[TopicSubscription] = []


def address_text(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
