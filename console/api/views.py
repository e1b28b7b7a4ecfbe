"""The REST API: views read the mesh from the nodes' snapshots (console.mesh.view);
actions go to the nodes as management requests, in the signed-in user's name."""

from __future__ import annotations

import re
import time

import msgspec
from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from console.api.errors import MeshUnavailable, failure_response
from console.api.inputs import (
    BrowseInput,
    EventParams,
    HistoryParams,
    ListParams,
    MoveInput,
    PurgeInput,
    QueueSettingsInput,
    SendInput,
    WhereParams,
    valid,
    valid_name,
)
from console.api.pagination import Pages
from console.api.parsers import ApiView
from console.api.permissions import Admin
from console.api.schema import model_ref, reply_schema
from console.mesh import events as event_stream
from console.mesh import history, rollups
from console.mesh.actions import Unavailable
from console.mesh.sources import management, mesh_view, redis_client
from model.definitions import DURABLE_SUBSCRIPTION, QueueSettings
from model.mesh import PartialQueue
from model.names import quoted
from model.requests import (
    ALL,
    Browse,
    CloseConnection,
    Connections,
    DefineQueue,
    Definitions,
    DeleteDefinition,
    DeleteQueue,
    Move,
    Purge,
    Request,
    Send,
)
from model.rollups import RESOLUTIONS

_builtins = msgspec.to_builtins
# Snapshots leave a partial queue's default fields out; the API answers them whole.
_PARTIAL_DEFAULTS = {f.encode_name: f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
                     for f in msgspec.structs.fields(PartialQueue) if f.required is False}


def _whole(partial) -> dict:
    return {**_PARTIAL_DEFAULTS, **_builtins(partial)}
_DIGITS = re.compile(r"(\d+)")
_PAGE_PARAMS = [
    OpenApiParameter("page", int, description="1, 2, …"),
    OpenApiParameter("page_size", int, description="items per page, at most 500 (default 100)"),
]
_LIST_PARAMS = [*_PAGE_PARAMS, ListParams]


def _page(view: ApiView, request, items: list, convert=_builtins) -> Response:
    """One page of ``items``; only the page is turned into JSON-ready values."""
    paginator = Pages()
    page = paginator.paginate_queryset(items, request, view=view)
    return paginator.get_paginated_response([convert(item) for item in page])


def _value(row, field: str):
    for part in field.split("."):
        row = row.get(part) if isinstance(row, dict) else getattr(row, part, None)
    return row


def _sorted(request, rows: list, allowed: tuple[str, ...], default: str) -> list:
    """Rows (dicts or structs) filtered by ``?name=`` and sorted by ``?sort=`` (``sort_reverse``)."""
    params = valid(ListParams, request.query_params, sorts=allowed)
    name = params.get("name")
    if name:
        rows = [row for row in rows if name.lower() in str(_value(row, "name") or "").lower()]
    field = params.get("sort", default)
    reverse = params["sort_reverse"]

    def key(row):
        value = _value(row, field)
        if isinstance(value, str):  # "node1-10" after "node1-9"
            return (False, [(0, int(part), "") if part.isdecimal() and len(part) < 1000 else (1, 0, part)
                            for part in _DIGITS.split(value)])  # '²' is a digit to isdigit(), not to int()
        return (value is None, value if value is not None else 0)

    return sorted(rows, key=key, reverse=reverse)


def _ask(request, mesh_request: Request):
    """Send a management request for the signed-in user; a Response if it failed as a whole."""
    mesh_request.on_behalf_of = request.user.get_username()
    try:
        reply = management().ask(mesh_request)
    except Unavailable as error:
        raise MeshUnavailable(str(error)) from None
    if not reply.ok:
        return None, failure_response(reply.error)
    return reply, None


def _action_response(request, mesh_request: Request) -> Response:
    reply, failed = _ask(request, mesh_request)
    if failed is not None:
        return failed
    return Response({"result": _builtins(reply.result), "failures": _builtins(reply.failures)})


# -- health and overview ----------------------------------------------------------------------


class Health(ApiView):
    """200 when every known node is up and no link is down, else 503 with the reasons."""

    permission_classes: list = []
    authentication_classes: list = []

    @extend_schema(responses={200: {"type": "object"}, 503: {"type": "object"}})
    def get(self, request):
        frame = mesh_view().frame
        reasons = [f"node {row.name} is {row.state}" for row in frame.nodes if row.state not in ("up", "leaving")]
        reasons += [f"link {row.a_name}–{row.b_name} is down" for row in frame.links if row.state == "down"]
        if not frame.nodes:
            reasons.append("no node has written a snapshot lately")
        if reasons:
            return Response({"status": "failed", "reasons": reasons}, status=503)
        return Response({"status": "ok"})


class OverviewView(ApiView):
    @extend_schema(responses=model_ref("Overview"))
    def get(self, request):
        return Response(_builtins(mesh_view().overview()))


_HISTORY_POINT = {"type": "object", "required": ["t", "enqueue", "ack", "forward", "redistribute"], "properties": {
    "t": {"type": "number", "description": "epoch seconds (from rollups: the window's start)"},
    **{rate: {"type": "number", "description": "messages per second"} for rate in history.RATES},
    "dead_lettered": {"type": "number", "description": "per second (rollups only)"},
    "expired": {"type": "number", "description": "per second (rollups only)"},
    "depth_last": {"type": "integer", "description": "waiting at the window's last snapshot (rollups only)"},
    "depth_max": {"type": "integer", "description": "the most waiting at a snapshot in the window (rollups only)"},
    "consumers": {"type": "integer", "description": "at the window's last snapshot (rollups only)"},
    **{p: {"type": ["number", "null"], "description": "latency percentile, ms; null without acks (rollups only)"}
       for p in rollups.PERCENTILES},
    "partial": {"type": "boolean", "description": "the window is still open (rollups only)"}}}
_HISTORY = {200: {"type": "object", "required": ["source", "resolution", "points"], "properties": {
    "source": {"type": "string", "enum": ["pipeline", "snapshots"]},
    "resolution": {"type": ["string", "null"], "enum": [*RESOLUTIONS, None]},
    "points": {"type": "array", "items": _HISTORY_POINT}}}}


class OverviewHistory(ApiView):
    """Messages per second over the last ``seconds``, summed over the mesh: from the
    pipeline's rollups when it runs, else from the snapshots."""

    @extend_schema(parameters=[HistoryParams], responses=_HISTORY)
    def get(self, request):
        params = valid(HistoryParams, request.query_params)
        return Response(history.chart(params["seconds"], resolution=params.get("resolution")))


class PipelineView(ApiView):
    """The metrics pipeline's status, whether it runs, and how old its last batch is."""

    @extend_schema(operation_id="pipeline_retrieve", responses=model_ref("Pipeline"))
    def get(self, request):
        status = rollups.read_status(redis_client(), settings.MESHGATE["STREAM_PREFIX"])
        now = time.time()
        body = _builtins(status) if status is not None else {}
        body.update(running=rollups.is_running(status, now), age=rollups.age(status, now) if status else None,
                    stale_after=rollups.stale_after(status))
        return Response(body)


# -- nodes and links ------------------------------------------------------------------------------


class NodeList(ApiView):
    @extend_schema(operation_id="nodes_list", parameters=_LIST_PARAMS, responses=model_ref("NodeRow", many=True))
    def get(self, request):
        rows = _sorted(request, mesh_view().nodes(),
                       ("name", "state", "messages", "queues", "consumers", "in_doubt", "age"), "name")
        return _page(self, request, rows)


class NodeDetail(ApiView):
    @extend_schema(operation_id="node_retrieve", responses=model_ref("NodeDetail"))
    def get(self, request, node):
        view = mesh_view()
        row = next((r for r in view.nodes() if node in (r.id, r.name)), None)
        if row is None:
            raise NotFound(f"no node {quoted(node)} in the mesh")
        snapshot = view.snapshots({row.id}).get(row.id)
        detail = _builtins(row)
        detail["links"] = _builtins(snapshot.links) if snapshot else []
        detail["partial_queues"] = [_whole(partial) for partial in snapshot.queues] if snapshot else []
        detail["subscriptions"] = _builtins(snapshot.subscriptions) if snapshot else []
        return Response(detail)


class LinkList(ApiView):
    @extend_schema(parameters=_LIST_PARAMS, responses=model_ref("LinkRow", many=True))
    def get(self, request):
        rows = _builtins(mesh_view().links())
        for row in rows:
            row["name"] = f"{row['a_name']}–{row['b_name']}"
        rows = _sorted(request, rows, ("name", "state", "in_flight", "backlog", "in_doubt", "rate"), "name")
        return _page(self, request, rows, convert=lambda row: row)


# -- queues -----------------------------------------------------------------------------------------

_QUEUE_SORTS = ("name", "messages", "depth", "in_flight", "forwarding", "in_doubt", "consumers", "node_count",
                "rates.enqueue", "rates.ack", "rates.forward", "rates.redistribute")


class QueueList(ApiView):
    @extend_schema(operation_id="queues_list", parameters=_LIST_PARAMS, responses=model_ref("QueueRow", many=True))
    def get(self, request):
        frame = mesh_view().frame
        rows = _sorted(request, frame.queues, _QUEUE_SORTS, "name")
        paginator = Pages()
        page = frame.with_where_of(paginator.paginate_queryset(rows, request, view=self))
        return paginator.get_paginated_response(_builtins(page))


class QueueHistory(ApiView):
    """One queue's messages per second over the last ``seconds``, summed over its nodes."""

    @extend_schema(parameters=[HistoryParams], responses=_HISTORY)
    def get(self, request, name):
        name = valid_name(name, "queue name")
        params = valid(HistoryParams, request.query_params)
        return Response(history.chart(params["seconds"], queue=name, resolution=params.get("resolution")))


class QueueDetail(ApiView):
    def get_permissions(self):
        return [Admin()] if self.request.method == "DELETE" else super().get_permissions()

    @extend_schema(operation_id="queue_retrieve", responses=model_ref("QueueDetail"))
    def get(self, request, name):
        row = mesh_view().queue(valid_name(name, "queue name"))
        if row is None:
            raise NotFound(f"no queue {name!r} on any node that writes snapshots")
        data = _builtins(row)
        for part, whole in zip(data["nodes"], row.nodes, strict=True):
            part["partial"] = _whole(whole.partial)
        return Response(data)

    @extend_schema(parameters=[WhereParams], responses=reply_schema("Done"))
    def delete(self, request, name):
        name = valid_name(name, "queue name")
        node = valid(WhereParams, request.query_params).get("node")
        return _action_response(request, DeleteQueue(node=node or ALL, queue=name))


class QueuePurge(ApiView):
    permission_classes = [Admin]

    @extend_schema(request=PurgeInput, responses=reply_schema("Done"))
    def post(self, request, name):
        name = valid_name(name, "queue name")
        data = valid(PurgeInput, request.data)
        return _action_response(request, Purge(node=data.get("node", ALL), queue=name))


class QueueMove(ApiView):
    permission_classes = [Admin]

    @extend_schema(request=MoveInput, responses=reply_schema("Done"))
    def post(self, request, name):
        name = valid_name(name, "queue name")
        data = valid(MoveInput, request.data)
        return _action_response(request, Move(node=data.get("node", ALL), queue=name, to_queue=data.get("to_queue"),
                                              to_node=data.get("to_node"), count=data.get("count")))


class QueueBrowse(ApiView):
    permission_classes = [Admin]

    @extend_schema(request=BrowseInput, responses=reply_schema("BrowsePage"))
    def post(self, request, name):
        name = valid_name(name, "queue name")
        data = valid(BrowseInput, request.data)
        return _action_response(request, Browse(node=data.get("node", ALL), queue=name, offset=data["offset"],
                                                limit=data["limit"], preview=data["preview"]))


class QueueSend(ApiView):
    permission_classes = [Admin]

    @extend_schema(request=SendInput, responses=reply_schema("Done"))
    def post(self, request, name):
        name = valid_name(name, "queue name")
        data = valid(SendInput, request.data)
        return _action_response(request, Send(node=data.get("node"), destination="/queue/" + name, body=data["body"],
                                              headers=dict(data["headers"]), persistent=data["persistent"]))


# -- mesh-wide definitions -----------------------------------------------------------------------


def _durable_parts(view) -> dict[str, list]:
    """The durable subscriptions' parts on the nodes that are up, by name, from their
    latest snapshots (the asked node's definitions do not say who is connected)."""
    up = {row.id for row in view.nodes() if row.state in ("up", "leaving")}
    parts: dict[str, list] = {}
    for snapshot in view.snapshots(up).values():
        for subscription in snapshot.subscriptions:
            if subscription.durable:
                parts.setdefault(subscription.name, []).append(subscription)
    return parts


class DefinitionList(ApiView):
    """Queue settings, durable subscriptions, AMQP exchanges and bindings, as every node
    holds them (deletions are listed, ``deleted: true``, until they expire). Besides the
    records: ``origin_name``, and for a durable subscription ``subscribers`` (where one
    is attached, per the nodes' latest snapshots) and ``waiting`` (its messages on every
    node)."""

    @extend_schema(parameters=_LIST_PARAMS, responses=model_ref("DefinitionRow", many=True))
    def get(self, request):
        reply, failed = _ask(request, Definitions())
        if failed is not None:
            return failed
        view = mesh_view()
        names = view.names()
        parts = _durable_parts(view) if any(r.kind == DURABLE_SUBSCRIPTION for r in reply.result) else {}
        rows = []
        for record in reply.result:
            row = _builtins(record)
            row["deleted"] = record.deleted
            row["origin_name"] = names.get(record.origin)
            if record.kind == DURABLE_SUBSCRIPTION:
                held = sorted(parts.get(record.name, ()), key=lambda part: names.get(part.node, part.node))
                row["subscribers"] = [{"node": part.node, "node_name": names.get(part.node, part.node[:8]),
                                       "connection": part.connection} for part in held if part.active]
                row["waiting"] = sum(part.depth for part in held)
            rows.append(row)
        return _page(self, request, _sorted(request, rows, ("name", "kind", "version", "changed_at"), "name"),
                     convert=lambda row: row)


_ONE_DONE = {200: {"type": "object", "properties": {"result": {"$ref": "#/components/schemas/Done"},
                                                    "failures": {"type": "array", "items": {"type": "object"}}}}}


class QueueDefinition(ApiView):
    permission_classes = [Admin]

    @extend_schema(request=QueueSettingsInput, responses=_ONE_DONE)
    def put(self, request, name):
        name = valid_name(name, "queue name")
        data = valid(QueueSettingsInput, request.data)
        return _action_response(request, DefineQueue(queue=name, settings=QueueSettings(**data)))

    @extend_schema(responses=_ONE_DONE)
    def delete(self, request, name):
        return _action_response(request, DeleteDefinition(kind="queue", name=valid_name(name, "queue name")))


class DurableDefinition(ApiView):
    permission_classes = [Admin]

    @extend_schema(responses=_ONE_DONE)
    def delete(self, request, name):
        name = valid_name(name, "durable subscription name")
        return _action_response(request, DeleteDefinition(kind="durable", name=name))


# -- connections and events ---------------------------------------------------------------------


class ConnectionList(ApiView):
    @extend_schema(parameters=_LIST_PARAMS, responses=model_ref("Connection", many=True))
    def get(self, request):
        reply, failed = _ask(request, Connections(node=ALL))
        if failed is not None:
            return failed
        names = mesh_view().names()
        rows = []
        for connection in _builtins(reply.result):
            connection["node_name"] = names.get(connection["node"], connection["node"][:8])
            connection["name"] = connection["id"]
            rows.append(connection)
        response = _page(self, request, _sorted(request, rows, ("name", "node_name", "user", "since", "unacked"),
                                                "name"), convert=lambda row: row)
        response.data["failures"] = _builtins(reply.failures)
        return response


class ConnectionDetail(ApiView):
    permission_classes = [Admin]

    @extend_schema(responses=reply_schema("Done"))
    def delete(self, request, connection):
        connection = valid_name(connection, "connection id")
        # A connection id is "<node name>-<n>": ask that node, or every node if it is none.
        owner = connection.rpartition("-")[0]
        node = owner if owner in mesh_view().names().values() else ALL
        return _action_response(request, CloseConnection(node=node, connection=connection,
                                                         reason=f"closed by {request.user.get_username()} "
                                                                "from the console"))


class EventList(ApiView):
    @extend_schema(parameters=[*_PAGE_PARAMS, EventParams], responses=model_ref("Event", many=True))
    def get(self, request):
        params = valid(EventParams, request.query_params)
        node = params.get("node")
        if node:
            node = next((row.id for row in mesh_view().nodes() if node in (row.id, row.name)), node)
        events = event_stream.recent(kinds=params.get("kind"), node=node, since=params.get("since"),
                                     text=params.get("q"))
        return _page(self, request, events, convert=lambda event: event)
