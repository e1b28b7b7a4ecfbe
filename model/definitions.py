"""Mesh-wide definitions: queue settings, durable topic subscriptions and traced
destinations (and, in the default vhost's, vhosts and their permissions made by command), held
alike by every node of the mesh (docs/mesh.md, "Mesh-wide definitions").

There is one record per kind and name. A change anywhere makes a new record
numbered one past every version its node has seen (a Lamport clock); of two
records for one name the higher ``(version, origin)`` wins, on every node alike,
so nodes that merge the same records in any order end up holding the same ones.
A deletion is a record too (a *tombstone*: neither ``queue`` nor ``durable``), so
that a node that was away learns of it rather than bringing the old one back."""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

import msgspec

from model.names import check_name, name_problem, quoted

QUEUE_SETTINGS: Final = "queue"
DURABLE_SUBSCRIPTION: Final = "durable"
EXCHANGE: Final = "exchange"  # AMQP exchanges and their bindings (docs/amqp.md)
BINDING: Final = "binding"
VHOST: Final = "vhost"  # a virtual host of the mesh (docs/vhosts.md); held in the default vhost's definitions
# RabbitMQ's configure/write/read of a user or group in a vhost, set by command (docs/vhosts.md,
# "Permissions"); held in the default vhost's definitions, as vhosts are
PERMISSION: Final = "permission"
# A destination traced without a header, for a while (docs/journeys.md, "Tracing a destination for a while")
TRACE: Final = "trace"
DefinitionKind = Literal["queue", "durable", "exchange", "binding", "vhost", "permission", "trace"]
# The kinds the release before vhosts knew: it drops a whole DEFINITIONS frame holding
# any other (mesh.definitions sends the others in a frame of their own).
KINDS_BEFORE_VHOSTS: Final = frozenset({"queue", "durable", "exchange", "binding"})
ExchangeType = Literal["direct", "fanout", "topic", "headers"]


class QueueSettings(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Per-queue settings; a setting left out is the node's ``[broker]`` default."""

    max_delivery_attempts: Annotated[int, msgspec.Meta(ge=1)] | None = None
    dead_letter_queue: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    expiry_queue: str | None = None  # "" discards expired messages
    message_ttl_ms: Annotated[int, msgspec.Meta(ge=1)] | None = None  # for messages sent without `expires`
    # Messages waiting in the queue on one node at most; the oldest go (dead-lettered) to make room.
    max_length: Annotated[int, msgspec.Meta(ge=0)] | None = None
    # AMQP's x-dead-letter-exchange / -routing-key: where rejected and expired messages are published
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    # The x-arguments an AMQP queue.declare gave, kept to answer a redeclare that differs (406)
    amqp_arguments: dict[str, Any] | None = None


class DurableSpec(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """What a durable topic subscription takes: a topic (or wildcard) and a selector."""

    topic: str
    selector: str | None = None


class ExchangeSpec(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    type: ExchangeType
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = {}


class BindingSpec(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """A route from an exchange to a queue (or to another exchange)."""

    source: str
    destination: str
    destination_kind: Literal["queue", "exchange"] = "queue"
    routing_key: str = ""
    arguments: dict[str, Any] = {}

    def key(self) -> str:
        """The binding's name as a definition: everything that tells two bindings apart."""
        return msgspec.json.encode([self.source, self.destination_kind, self.destination, self.routing_key,
                                    sorted(self.arguments.items())]).decode()


# A vhost limit: a count from 0 (0 refuses everything, as RabbitMQ's 0); None (left out) is no limit.
VhostLimitValue = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None


class VhostSpec(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """A vhost made by command (``meshgate vhost add``): it exists on every node, with
    the same limits on each (``meshgate vhost limits`` redefines it with others).
    Left-out limits are not sent, so a vhost without limits is encoded as before; a
    node of an earlier release ignores a definition carrying limits (it forbids
    unknown fields: "not understood", logged) and keeps the version it had
    (docs/vhosts.md, "Limits")."""

    description: str = ""
    max_connections: VhostLimitValue = None
    max_queues: VhostLimitValue = None
    max_messages: VhostLimitValue = None
    # In a record that changed a live vhost (its limits): the (version, origin) of the
    # record that made it, its *incarnation*, which a change keeps and a deletion ends
    # (gateway.broker.vhosts). Left out of the record that makes a vhost, so a node of
    # an earlier release reads that one; it ignores the later ones, as those with limits.
    incarnation: tuple[int, str] | None = None


# A pattern's length cap: patterns come from an admin's command, and a longer one is no
# regular expression anyone means (a resource name is at most 255 bytes).
MAX_PATTERN_LENGTH = 1024
PermissionPattern = Annotated[str, msgspec.Meta(max_length=MAX_PATTERN_LENGTH)]


def compile_permission_pattern(pattern: str) -> re.Pattern[str]:
    """The compiled form of one configure/write/read pattern (RabbitMQ's rule: ``""``
    stands for ``"^$"``, which no name matches); ``re.error`` when invalid. The one
    rule for the configuration's patterns, the commands' and the node's map."""
    return re.compile(pattern or "^$")


class PermissionSpec(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """RabbitMQ's ``set_permissions -p VHOST USER CONF WRITE READ``, for the whole mesh:
    the three patterns of one user (or group: exactly one of the two) in one vhost.
    Checked as it is decoded (a record from a peer, a request): names by the one rule
    of names, patterns as the node compiles them; a ValueError (msgspec's
    ValidationError once decoded) says what is wrong."""

    vhost: str
    user: str | None = None
    group: str | None = None
    configure: PermissionPattern
    write: PermissionPattern
    read: PermissionPattern

    def __post_init__(self) -> None:
        if (self.user is None) == (self.group is None):
            raise ValueError("a permission names either a user or a group (exactly one of them)")
        check_name(self.vhost, "vhost name")
        if self.user is not None:
            check_name(self.user, "user name")
        if self.group is not None:
            check_name(self.group, "group name")
        for operation in ("configure", "write", "read"):
            try:
                compile_permission_pattern(getattr(self, operation))
            except re.error as error:
                raise ValueError(f"{operation}: not a valid regular expression: {error}") from None

    def key(self) -> str:
        """The permission's name as a definition: the vhost and whom it is about (a
        JSON array: no name can be mistaken for a role or another's)."""
        return permission_key(self.vhost, self.user, self.group)


def permission_key(vhost: str, user: str | None, group: str | None) -> str:
    """The definition name of the permission of ``user`` (or ``group``) in ``vhost``."""
    return msgspec.json.encode([vhost, user, group]).decode()


# How far ahead a trace may end: tracing is for finding something out, not a setting.
MAX_TRACE_S = 7 * 24 * 3600
TRACEABLE_KINDS = ("queue", "topic")


class TraceSpec(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Trace one message in ``round(1 / rate)`` sent to the destination the definition
    names, on every node with journeys on, until ``until``: required, so nobody forgets
    tracing on (the definition stays listed past it, traced no more)."""

    rate: Annotated[float, msgspec.Meta(gt=0, le=1)] = 1.0
    until: float  # epoch seconds
    by: Annotated[str, msgspec.Meta(max_length=200)] = ""  # who switched it on (shown)

    @property
    def every(self) -> int:
        """The tracer's counter: one message in this many (a rate of 0.01 is every 100th)."""
        return max(1, round(1 / self.rate))


def traced_destination(destination: str) -> tuple[str, str]:
    """The kind ("queue", "topic") and the name of ``/queue/NAME`` or ``/topic/NAME``, the
    destinations a tracer arms; ValueError saying why for anything else."""
    kind, _, name = destination.removeprefix("/").partition("/")
    problem = name_problem(name) if destination.startswith("/") and kind in TRACEABLE_KINDS else \
        "it is not /queue/NAME or /topic/NAME"
    if not problem and ("*" in name or ">" in name):  # a tracer matches the address a message is sent to
        problem = "it names one queue or topic, without wildcards (* >)"
    if problem:
        raise ValueError(f"cannot trace {quoted(destination[:80])}: {problem}")
    return kind, name


class Definition(msgspec.Struct, kw_only=True, omit_defaults=True):
    kind: DefinitionKind
    name: str  # the queue's name, the durable subscription's (client-id.subscription-name), a trace's destination
    version: int  # Lamport clock of the change
    origin: str  # the id of the node where the change was made
    changed_at: float  # wall clock of the change, seconds (shown; tombstones expire by it)
    queue: QueueSettings | None = None
    durable: DurableSpec | None = None
    exchange: ExchangeSpec | None = None
    binding: BindingSpec | None = None
    vhost: VhostSpec | None = None
    permission: PermissionSpec | None = None
    trace: TraceSpec | None = None

    @property
    def deleted(self) -> bool:
        return (self.queue is None and self.durable is None and self.exchange is None and self.binding is None
                and self.vhost is None and self.permission is None and self.trace is None)

    def wins_over(self, other: Definition | None) -> bool:
        return other is None or (self.version, self.origin) > (other.version, other.origin)
