"""Management requests and their replies.

A request is a JSON object tagged by ``action``. ``node`` says where it applies:
a node id (or a unique prefix of one), a node name, ``"*"`` for every node of the
mesh, or nothing for the node that was asked. Any node routes a request to the
node it names over the mesh links; requests for every node gather one answer per
node and list the nodes that did not answer in ``failures``.

Actions that change something need the ``admin`` permission on the management
address (``ADMIN_ACTIONS``); the others need ``write`` on it, as any SEND does.

Requests about queues and definitions name a ``vhost`` (default ``/``); a vhost
the node does not have is a ``bad_request`` "no vhost 'X'".

What every request has is model.request_base.Request; the doctor's and the journeys'
requests are in model.requests_doctor; all are listed here (AnyRequest)."""

from __future__ import annotations

from typing import Annotated, Any, cast

import msgspec

from model.definitions import (
    Definition,
    DefinitionKind,
    PermissionSpec,
    QueueSettings,
    VhostLimitValue,
    VhostSpec,
    permission_key,
)
from model.diagnosis import DiagnosisReport, NodeFactSheet
from model.events import AnyEvent
from model.journey_requests import DefineTrace, JourneySearch, JourneySteps, TraceNext
from model.journeys import JourneyStep, JourneySummary
from model.mesh import SCHEMA_VERSION, ClusterView, Connection, Link, NodeSummary, PartialQueue, TopicSubscription
from model.names import DEFAULT_VHOST
from model.request_base import ALL as ALL  # (re-exported: where model.requests users find it)
from model.request_base import Request
from model.requests_doctor import ApplyRemedy, Diagnosis, NodeFacts
from model.results import BrowsePage, Done, PermissionRow, TlsReload, VhostRow

MANAGEMENT_ADDRESS = "meshgate.management"  # /queue/meshgate.management
# Offsets and counts: the largest whole number JSON clients (JavaScript) hold exactly.
MAX_WHOLE_NUMBER = 2 ** 53 - 1


# -- views ------------------------------------------------------------------------------


class Nodes(Request, kw_only=True, tag="nodes"):
    """Every node of the mesh (``node`` is ignored): asked afresh, or with ``fresh``
    false, as the asked node's gossiped view holds them (at once, with their age)."""

    fresh: bool = True


class Summary(Request, kw_only=True, tag="summary"):
    """One node's own summary (what the ``nodes`` answer holds per node)."""


class Queues(Request, kw_only=True, tag="queues"):
    name: str | None = None  # only this queue
    vhost: str = DEFAULT_VHOST


class Links(Request, kw_only=True, tag="links"):
    pass


class Connections(Request, kw_only=True, tag="connections"):
    pass


class Subscriptions(Request, kw_only=True, tag="subscriptions"):
    pass


class Events(Request, kw_only=True, tag="events"):
    since: float = 0.0  # epoch seconds: only events after this
    kinds: list[str] = []  # only these kinds (model.events.KINDS)
    limit: int = 100  # the newest this-many per node


# -- actions (admin) --------------------------------------------------------------------


class Browse(Request, kw_only=True, tag="browse"):
    queue: str
    offset: Annotated[int, msgspec.Meta(ge=0, le=MAX_WHOLE_NUMBER)] = 0
    limit: int = 50
    preview: int = 256  # body bytes shown per message
    vhost: str = DEFAULT_VHOST


class Purge(Request, kw_only=True, tag="purge"):
    """Drop the messages waiting in the queue (not those delivered and unacked, nor in doubt)."""

    queue: str
    vhost: str = DEFAULT_VHOST


class DeleteQueue(Request, kw_only=True, tag="delete_queue"):
    """Drop the queue and what waits in it; refused while it has local consumers,
    unless ``cancel_consumers`` (AMQP's queue.delete on another node): then its AMQP
    consumers hear basic.cancel, and STOMP subscribers keep the queue, emptied."""

    queue: str
    vhost: str = DEFAULT_VHOST
    cancel_consumers: bool = False


class Pull(Request, kw_only=True, tag="pull"):
    """Move up to ``count`` waiting messages of the queue to the linked node ``to_node``,
    where an AMQP basic.get found none (issue 26): as ``move`` to a node, with custody,
    leaving at least half of what waits here for this node's own consumers and gets."""

    queue: str
    to_node: str
    count: int = 1000
    vhost: str = DEFAULT_VHOST


class Move(Request, kw_only=True, tag="move"):
    """Move waiting messages to another queue on the same node (``to_queue``), or to
    the same queue on a linked node (``to_node``), with custody as for any forward."""

    queue: str
    to_queue: str | None = None
    to_node: str | None = None
    count: int | None = None  # None: every waiting message
    vhost: str = DEFAULT_VHOST  # to_queue is of the same vhost


class Redistribute(Request, kw_only=True, tag="redistribute"):
    """End the redistribution delay (mesh.redistribution_delay_ms, or ``-1``: never)
    that holds the queue's backlog on this node: it follows the consumers on other
    nodes now. Refused (``conflict``, saying why) while the queue has consumers here,
    when no other node has consumers of it, or when nothing holds it."""

    queue: str
    vhost: str = DEFAULT_VHOST


class Send(Request, kw_only=True, tag="send"):
    """Send a test message, as a client connected to the node would."""

    destination: str  # "/queue/NAME" or "/topic/NAME"
    body: str = ""
    headers: dict[str, str] = {}
    persistent: bool = False
    vhost: str = DEFAULT_VHOST


class CloseConnection(Request, kw_only=True, tag="close_connection"):
    connection: str  # a connection id (the ``connections`` answer lists them)
    reason: str = "closed by an administrator"


class Forget(Request, kw_only=True, tag="forget"):
    """Tell the mesh a crashed node is gone for good (``meshgate forget``)."""

    forget: str  # the node id to forget


class ScaleDownNode(Request, kw_only=True, tag="scale_down"):
    """The node hands every message to another node, leaves the mesh and stops."""


class HaFailback(Request, kw_only=True, tag="ha_failback"):
    """A replicated pair's serving member hands the node over to its in-sync backup and
    rejoins as that one's backup (``meshgate ha failback``, docs/ha.md#failback)."""


class ReloadTls(Request, kw_only=True, tag="reload_tls"):
    """Re-read every certificate, key and CA file of the node's TLS listeners and
    diallers (as SIGHUP does): new handshakes use them, established connections stay."""


class Definitions(Request, kw_only=True, tag="definitions"):
    """The mesh-wide definitions (queue settings, durable subscriptions) as the node
    holds them, deletions included; every node holds the same once links carried them.
    ``/``'s hold the vhosts made by command (kind "vhost"); another vhost's are its
    own, held by every node too (docs/vhosts.md, "Across the mesh")."""

    vhost: str = DEFAULT_VHOST


class DefineQueue(Request, kw_only=True, tag="define_queue"):
    """Set a queue's settings on every node of the mesh (the asked node makes the
    change; links carry it to every node, and to nodes away now when they return)."""

    queue: str
    settings: QueueSettings = msgspec.field(default_factory=QueueSettings)
    vhost: str = DEFAULT_VHOST


class DeleteDefinition(Request, kw_only=True, tag="delete_definition"):
    """Delete a definition on every node: a queue's settings (and the queue, with
    what waits in it, where no consumer holds it), or a durable subscription (with
    what waits for it on every node)."""

    kind: DefinitionKind
    name: str
    vhost: str = DEFAULT_VHOST


# -- vhosts -----------------------------------------------------------------------------


class VhostAdd(Request, kw_only=True, tag="vhost_add"):
    """Make a vhost on every node of the mesh (a definition of kind "vhost": nodes
    away now get it when they return), with the limits its spec has. Adding one that
    exists changes nothing (vhost_limits changes its limits)."""

    name: str
    spec: VhostSpec = msgspec.field(default_factory=VhostSpec)


class VhostSetLimits(Request, kw_only=True, tag="vhost_limits"):
    """Give a vhost made by command new limits on every node (it is redefined: its
    definition's other fields stay). A limit left out keeps its value, None removes
    it. Only a vhost made by command has them so: a configured one's are its
    ``[[vhosts.host]]`` entry's."""

    name: str
    max_connections: VhostLimitValue | msgspec.UnsetType = msgspec.UNSET
    max_queues: VhostLimitValue | msgspec.UnsetType = msgspec.UNSET
    max_messages: VhostLimitValue | msgspec.UnsetType = msgspec.UNSET


class VhostDelete(Request, kw_only=True, tag="vhost_delete"):
    """Delete a vhost on every node: its clients are disconnected, its queues and
    messages go. Refused while it holds messages on any node that answers, unless
    ``force``; a vhost of a node's configuration is deleted there by editing it."""

    name: str
    force: bool = False


class VhostList(Request, kw_only=True, tag="vhost_list"):
    """The node's vhosts with what each holds there (``node: "*"``: every node's)."""


class VhostPermissionsSet(Request, kw_only=True, tag="vhost_permissions_set"):
    """RabbitMQ's ``set_permissions``, for the whole mesh: give a user (or group) its
    configure, write and read patterns in a vhost (a definition of kind "permission":
    nodes away now get it when they return). The first permission made so turns vhost
    permissions on where they were off: a user without an entry for a vhost may no
    longer open it (docs/vhosts.md, "Permissions")."""

    permission: PermissionSpec


class VhostPermissionsClear(Request, kw_only=True, tag="vhost_permissions_clear"):
    """RabbitMQ's ``clear_permissions``, for the whole mesh: delete the permission made
    by command of a user (or group: exactly one of the two) in a vhost."""

    vhost: str
    user: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        if (self.user is None) == (self.group is None):
            raise ValueError("name either a user or a group (exactly one of them)")

    def key(self) -> str:
        return permission_key(self.vhost, self.user, self.group)


class VhostPermissionsList(Request, kw_only=True, tag="vhost_permissions_list"):
    """RabbitMQ's ``list_permissions``: the node's vhost permissions (``node: "*"``:
    every node's), of one vhost or all, each with where it comes from."""

    vhost: str | None = None


AnyRequest = (Nodes | Summary | Queues | Links | Connections | Subscriptions | Events | Browse | Purge | DeleteQueue
              | Pull | Move | Redistribute | Send | CloseConnection | Forget | ScaleDownNode | Definitions | DefineQueue
              | DeleteDefinition | HaFailback | ReloadTls | VhostAdd | VhostSetLimits | VhostDelete | VhostList
              | VhostPermissionsSet | VhostPermissionsClear | VhostPermissionsList
              | NodeFacts | Diagnosis | ApplyRemedy | JourneySteps | TraceNext | DefineTrace | JourneySearch)
ADMIN_ACTIONS = frozenset({"browse", "purge", "delete_queue", "move", "redistribute", "send", "close_connection",
                           "forget", "scale_down", "define_queue", "delete_definition", "ha_failback", "reload_tls",
                           "vhost_add", "vhost_limits", "vhost_delete", "vhost_permissions_set",
                           "vhost_permissions_clear",
                           "apply_remedy", "journey_steps", "trace_next", "define_trace", "journey_search"})
# Actions whose answer is one value, not a list gathered over nodes.
SINGLE_ANSWER = frozenset({"nodes", "summary", "forget", "define_queue", "delete_definition", "ha_failback",
                           "vhost_add", "vhost_limits", "vhost_delete", "vhost_permissions_set",
                           "vhost_permissions_clear", "diagnosis", "define_trace"})


RESULT_TYPES: dict[str, Any] = {
    "nodes": ClusterView,
    "summary": NodeSummary,
    "queues": list[PartialQueue],
    "links": list[Link],
    "connections": list[Connection],
    "subscriptions": list[TopicSubscription],
    "events": list[AnyEvent],
    "browse": list[BrowsePage],
    "purge": list[Done],
    "delete_queue": list[Done],
    "pull": list[Done],
    "move": list[Done],
    "redistribute": list[Done],
    "send": list[Done],
    "close_connection": list[Done],
    "forget": Done,
    "scale_down": list[Done],
    "definitions": list[Definition],
    "define_queue": Done,
    "delete_definition": Done,
    "ha_failback": Done,
    "reload_tls": list[TlsReload],
    "vhost_add": Done,
    "vhost_limits": Done,
    "vhost_delete": Done,
    "vhost_list": list[VhostRow],
    "vhost_permissions_set": Done,
    "vhost_permissions_clear": Done,
    "vhost_permissions_list": list[PermissionRow],
    "node_facts": list[NodeFactSheet],
    "diagnosis": DiagnosisReport,
    "apply_remedy": Any,  # the reply is the remedy's own: its action (move, forget, …) types its result
    "journey_steps": list[JourneyStep],
    "trace_next": list[Done],
    "define_trace": Done,
    "journey_search": list[JourneySummary],
}

# Why a request failed: the REST API maps these to HTTP statuses.
ERROR_CODES = {
    "bad_request": 400,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "unreachable": 503,
}


class Failure(msgspec.Struct, kw_only=True):
    code: str  # one of ERROR_CODES
    message: str
    node: str | None = None  # the node it concerns, if one


class Reply(msgspec.Struct, kw_only=True):
    schema_version: int = SCHEMA_VERSION
    action: str = ""
    ok: bool = True
    error: Failure | None = None  # the request as a whole failed
    result: Any = None  # RESULT_TYPES[action]
    failures: list[Failure] = []  # nodes that did not answer: the result covers the others


class ManagementError(Exception):
    """A request that cannot be done; ``code`` is one of ERROR_CODES."""

    def __init__(self, code: str, message: str, node: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.node = node

    def failure(self) -> Failure:
        return Failure(code=self.code, message=str(self), node=self.node)


_request_decoder = msgspec.json.Decoder(AnyRequest)


def action_of(request: Request) -> str:
    """The request's ``action``: the tag its class sets."""
    return cast(str, request.__struct_config__.tag)


def decode_request(data: bytes | str) -> Request:
    """A request from JSON; ManagementError("bad_request") naming what is wrong."""
    try:
        return _request_decoder.decode(data)
    except msgspec.ValidationError as error:
        text = str(error)
        if text.endswith("at `$.action`") or "missing required field `action`" in text:
            text = f"{text}; the action is one of {', '.join(sorted(RESULT_TYPES))}"
        raise ManagementError("bad_request", f"invalid request: {text}") from None
    except msgspec.DecodeError as error:
        raise ManagementError("bad_request", f"the request is not JSON: {error}") from None


def decode_reply(data: bytes | str) -> Reply:
    """A reply with its result typed by its action."""
    reply = msgspec.json.decode(data, type=Reply)
    result_type = RESULT_TYPES.get(reply.action)
    if reply.result is not None and result_type is not None:
        reply.result = msgspec.convert(reply.result, result_type)
    return reply
