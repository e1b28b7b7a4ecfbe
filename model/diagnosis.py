"""The stuck-message doctor's model (docs/doctor.md): the facts each node reports
about itself (``node_facts``), and the findings ``diagnosis`` draws from every
node's facts.

Ages are measured by the node that reports them, on its own clock (``*_for_s``
fields): the doctor compares durations, never one node's timestamps with another's,
so skewed clocks do not make a finding."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from model.mesh import RemoteDemand

Severity = Literal["critical", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("critical", "warning", "info")  # most urgent first


class _Facts(msgspec.Struct, kw_only=True):
    """Unknown fields are ignored on decoding: a newer node may report more."""


class RedistributionRule(_Facts, kw_only=True):
    """One ``[[mesh.redistribution]]`` entry."""

    destination: str
    delay_ms: int


class MeshSettingsFacts(_Facts, kw_only=True):
    """The ``[mesh]`` keys that decide whether a backlog moves (each node has its own)."""

    max_hops: int
    message_load_balancing: str
    duplex: bool
    redistribution_delay_ms: int
    redistribution: list[RedistributionRule] = []
    addresses: list[str] = []  # mesh.addresses: prefixes the mesh carries ("!" excludes)
    in_doubt_timeout_ms: int
    peer_retention_s: int
    reconnect_attempts: int


class QueueFacts(_Facts, kw_only=True):
    """A queue of the node that holds or consumes something (idle empty queues are left out)."""

    vhost: str = "/"
    name: str
    depth: int
    consumers: int
    in_flight: int = 0  # delivered to local consumers, unacked
    in_doubt: int = 0
    forwarding: int = 0  # sent over links, not yet stored by the peer
    oldest_age_ms: int | None = None
    remote_demand: list[RemoteDemand] = []  # consumers elsewhere this node has heard of
    remote_dispatch: bool = True  # false: its backlog is held here (redistribution delay, STRICT)
    hold_pending: bool = False  # a redistribution delay is running for it
    redistribution_delay_ms: int = 0  # the delay in force for it (-1: never)
    redistribution_key: str = "mesh.redistribution_delay_ms"  # which key sets that delay
    carried: bool = True  # mesh.addresses lets the mesh carry it


class PeerFacts(_Facts, kw_only=True):
    """A node this node is linked with, or has been and still keeps something for."""

    peer: str
    peer_name: str
    state: Literal["up", "down"]
    for_s: float = 0.0  # how long the link has been in that state
    dialled: bool = False  # this node dialled the link (matters when mesh.duplex is false)
    in_doubt: int = 0  # messages held until the peer says whether it has them
    in_doubt_for_s: float | None = None  # how long this node has been holding them
    backlog: int = 0  # topic messages kept for the peer
    markers: int = 0  # duplicate markers kept for the peer's resends
    departed: bool = False  # the mesh has dropped it from its view: not heard of any more
    heard_ago_s: float | None = None  # the mesh still hears of it (through other nodes): this long ago
    busy_for_s: float | None = None  # the peer said its store is full, this long ago


class ConsumerFacts(_Facts, kw_only=True):
    """A client consumer holding unacknowledged deliveries."""

    connection: str  # the connection id (meshgate connections, meshgate close)
    subscription: str
    vhost: str = "/"
    queue: str  # the queue it consumes (a topic subscription's own queue for topics)
    protocol: str = ""
    unacked: int
    # How long its oldest unacked delivery has been unacked, at least: the sampler saw the
    # same delivery at the head of the consumer's deliveries that long ago (None: just seen).
    unacked_for_s: float | None = None


class ProducerFacts(_Facts, kw_only=True):
    """A client connection not read now because a limit is reached (flow control)."""

    connection: str  # its id (meshgate connections)
    protocol: str = ""
    vhost: str = "/"
    limit_key: str  # broker.memory_limit, store.limit, store.max_disk_usage or max_messages (the vhost's)
    limit_state: str = ""  # how full that limit is now, in words
    paused_for_s: float = 0.0  # how long it has not been read


class DeadLetterFacts(_Facts, kw_only=True):
    """A queue's dead-lettered and expired messages, and its depth, over the sampler's
    window: where a dead-letter or expiry queue grows, and from which queues."""

    vhost: str = "/"
    name: str
    over_s: float  # how long the window is (since the oldest sample kept)
    depth: int = 0
    depth_growth: int = 0  # messages more now than at the window's start (negative: fewer)
    dead_lettered: int = 0  # of this queue's messages, sent to a dead-letter queue within the window
    expired: int = 0  # of this queue's messages, expired within the window
    dead_letter_queue: str = ""  # where this queue's dead letters go
    expiry_queue: str = ""  # where its expired messages go ("": discarded)
    max_delivery_attempts: int = 0
    max_delivery_attempts_key: str = "broker.max_delivery_attempts"
    message_ttl_ms: int | None = None  # the queue's own expiry for messages sent without one
    is_target: bool = False  # it is a dead-letter or expiry queue (of the broker or of a queue)


class DurableFacts(_Facts, kw_only=True):
    """A durable topic subscription with no subscriber on this node."""

    vhost: str = "/"
    name: str  # client-id.subscription-name (meshgate undefine durable NAME)
    topic: str
    depth: int  # messages kept for it here
    detached_for_s: float | None = None  # how long it has had no subscriber (None: unknown)
    subscribed_elsewhere: bool = False  # its subscriber is connected to another node


class StalledFacts(_Facts, kw_only=True):
    """A queue with waiting messages whose local consumers all take no more, in every
    sample for ``for_s``: each holds its prefetch unacked (``prefetch``), or each one's
    socket is backed up (``unwritable``: the client reads slower than the node sends)."""

    vhost: str = "/"
    name: str
    cause: str  # "prefetch" or "unwritable" (a str: a newer node may tell of another cause)
    for_s: float  # since the first sample that saw it so (a lower bound)
    depth: int
    consumers: int
    unacked: int = 0  # what they hold between them
    prefetch: int = 0  # the largest window among them
    connections: list[str] = []


class NodeFactSheet(_Facts, kw_only=True):
    """What one node reports to the doctor (the ``node_facts`` answer)."""

    node: str
    name: str
    taken_at: float
    mesh: MeshSettingsFacts | None = None  # None: the node is not in a mesh
    queues: list[QueueFacts] = []
    peers: list[PeerFacts] = []
    consumers: list[ConsumerFacts] = []
    sample_s: float = 0.0  # how often unacked deliveries are sampled (0: only when asked)
    producers: list[ProducerFacts] = []  # connections paused by flow control
    dead_letters: list[DeadLetterFacts] = []  # queues dead-lettering or expiring, and their targets
    durables: list[DurableFacts] = []  # durable subscriptions without a subscriber here
    stalled: list[StalledFacts] = []  # queues whose consumers take no more


class Remedy(_Facts, kw_only=True):
    label: str
    command: str  # the meshgate command line that does it
    request: dict[str, Any] | None = None  # the management request that does it (None: advice only)
    confirm: bool = False  # it drops or disconnects something: ask before doing it


class Finding(_Facts, kw_only=True):
    id: str  # f"{kind}/{node[:8]}/{vhost}/{subject}": the same finding keeps its id across runs
    kind: str
    severity: Severity
    node: str  # the node where it is seen
    node_name: str = ""
    vhost: str = "/"
    subject: str  # the queue, connection or peer it is about
    summary: str
    evidence: str  # the figures it is drawn from
    explanation: str  # why, naming the configuration key
    config_keys: list[str] = []
    remedy: Remedy | None = None


class UnansweredNode(_Facts, kw_only=True):
    node: str
    name: str
    reason: str


class DiagnosisReport(_Facts, kw_only=True):
    """The ``diagnosis`` answer: every finding, most urgent first."""

    taken_at: float
    reporter: str  # the node that was asked
    findings: list[Finding] = []
    nodes: list[str] = []  # the nodes whose facts were read
    unanswered: list[UnansweredNode] = []
