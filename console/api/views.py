"""The REST API: views read the mesh from the nodes' snapshots (console.mesh.view);
actions go to the nodes as management requests, in the signed-in user's name.
Definitions, vhosts, the doctor and journeys have modules of their own (console.api.definitions,
.vhosts, .diagnosis, .journeys)."""

from __future__ import annotations

import time

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from console.api.inputs import (
    BrowseInput,
    EventParams,
    HistoryParams,
    MoveInput,
    PurgeInput,
    SendInput,
    VhostParams,
    WhereParams,
    valid,
    valid_name,
)
from console.api.pagination import Pages
from console.api.parsers import ApiView
from console.api.permissions import Admin
from console.api.replies import (
    IN_VHOST,
    LIST_PARAMS,
    PAGE_PARAMS,
    VHOST_LIST_PARAMS,
    action_response,
    ask,
    builtins,
    one_page,
    sorted_rows,
    vhost_filter,
    vhost_of,
    whole_partial,
)
from console.api.schema import model_ref, reply_schema
from console.mesh import events as event_stream
from console.mesh import history, rollups
from console.mesh.sources import mesh_view, redis_client
from model.names import DEFAULT_VHOST, quoted
from model.requests import (
    ALL,
    Browse,
    CloseConnection,
    Connections,
    DeleteQueue,
    Move,
    Purge,
    Send,
)
from model.rollups import RESOLUTIONS

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
        return Response(builtins(mesh_view().overview()))


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
        body = builtins(status) if status is not None else {}
        body.update(running=rollups.is_running(status, now), age=rollups.age(status, now) if status else None,
                    stale_after=rollups.stale_after(status))
        return Response(body)


# -- nodes and links ------------------------------------------------------------------------------


class NodeList(ApiView):
    @extend_schema(operation_id="nodes_list", parameters=LIST_PARAMS, responses=model_ref("NodeRow", many=True))
    def get(self, request):
        rows = sorted_rows(request, mesh_view().nodes(),
                       ("name", "state", "messages", "queues", "consumers", "in_doubt", "age"), "name")
        return one_page(self, request, rows)


class NodeDetail(ApiView):
    @extend_schema(operation_id="node_retrieve", responses=model_ref("NodeDetail"))
    def get(self, request, node):
        view = mesh_view()
        row = next((r for r in view.nodes() if node in (r.id, r.name)), None)
        if row is None:
            raise NotFound(f"no node {quoted(node)} in the mesh")
        snapshot = view.snapshots({row.id}).get(row.id)
        detail = builtins(row)
        detail["links"] = builtins(snapshot.links) if snapshot else []
        detail["partial_queues"] = [whole_partial(partial) for partial in snapshot.queues] if snapshot else []
        detail["subscriptions"] = builtins(snapshot.subscriptions) if snapshot else []
        return Response(detail)


class LinkList(ApiView):
    @extend_schema(parameters=LIST_PARAMS, responses=model_ref("LinkRow", many=True))
    def get(self, request):
        rows = builtins(mesh_view().links())
        for row in rows:
            row["name"] = f"{row['a_name']}–{row['b_name']}"
        rows = sorted_rows(request, rows, ("name", "state", "in_flight", "backlog", "in_doubt", "rate"), "name")
        return one_page(self, request, rows, convert=lambda row: row)


# -- queues -----------------------------------------------------------------------------------------

_QUEUE_SORTS = ("name", "messages", "depth", "in_flight", "forwarding", "in_doubt", "consumers", "node_count",
                "rates.enqueue", "rates.ack", "rates.forward", "rates.redistribute")


class QueueList(ApiView):
    """Every vhost's queues, or one's (``?vhost=``), as the nodes' snapshots hold them."""

    @extend_schema(operation_id="queues_list", parameters=VHOST_LIST_PARAMS,
                   responses=model_ref("QueueRow", many=True))
    def get(self, request):
        vhost = vhost_filter(request)
        frame = mesh_view().frame
        rows = frame.queues if vhost is None else [row for row in frame.queues if row.vhost == vhost]
        rows = sorted_rows(request, rows, _QUEUE_SORTS, "name")
        paginator = Pages()
        shown = frame.with_where_of(paginator.paginate_queryset(rows, request, view=self))
        return paginator.get_paginated_response(builtins(shown))


class QueueHistory(ApiView):
    """One queue's messages per second over the last ``seconds``, summed over its nodes."""

    @extend_schema(parameters=[HistoryParams, VhostParams], responses=_HISTORY)
    def get(self, request, name):
        name = valid_name(name, "queue name")
        params = valid(HistoryParams, request.query_params)
        return Response(history.chart(params["seconds"], queue=name, vhost=vhost_of(request),
                                      resolution=params.get("resolution")))


class QueueDetail(ApiView):
    def get_permissions(self):
        return [Admin()] if self.request.method == "DELETE" else super().get_permissions()

    @extend_schema(operation_id="queue_retrieve", parameters=IN_VHOST, responses=model_ref("QueueDetail"))
    def get(self, request, name):
        name, vhost = valid_name(name, "queue name"), vhost_of(request)
        row = mesh_view().queue(name, vhost)
        if row is None:
            raise NotFound(f"no queue {quoted(name)} in vhost {quoted(vhost)} on any node that writes snapshots")
        data = builtins(row)
        for part, full in zip(data["nodes"], row.nodes, strict=True):
            part["partial"] = whole_partial(full.partial)
        return Response(data)

    @extend_schema(parameters=[WhereParams, VhostParams], responses=reply_schema("Done"))
    def delete(self, request, name):
        name = valid_name(name, "queue name")
        node = valid(WhereParams, request.query_params).get("node")
        return action_response(request, DeleteQueue(node=node or ALL, queue=name, vhost=vhost_of(request)))


class QueuePurge(ApiView):
    permission_classes = [Admin]

    @extend_schema(request=PurgeInput, parameters=IN_VHOST, responses=reply_schema("Done"))
    def post(self, request, name):
        name = valid_name(name, "queue name")
        data = valid(PurgeInput, request.data)
        return action_response(request, Purge(node=data.get("node", ALL), queue=name,
                                               vhost=vhost_of(request)))


class QueueMove(ApiView):
    permission_classes = [Admin]

    @extend_schema(request=MoveInput, parameters=IN_VHOST, responses=reply_schema("Done"))
    def post(self, request, name):
        name = valid_name(name, "queue name")
        data = valid(MoveInput, request.data)
        return action_response(request, Move(node=data.get("node", ALL), queue=name, to_queue=data.get("to_queue"),
                                              to_node=data.get("to_node"), count=data.get("count"),
                                              vhost=vhost_of(request)))


class QueueBrowse(ApiView):
    permission_classes = [Admin]

    @extend_schema(request=BrowseInput, parameters=IN_VHOST, responses=reply_schema("BrowsePage"))
    def post(self, request, name):
        name = valid_name(name, "queue name")
        data = valid(BrowseInput, request.data)
        return action_response(request, Browse(node=data.get("node", ALL), queue=name, offset=data["offset"],
                                                limit=data["limit"], preview=data["preview"], vhost=vhost_of(request)))


class QueueSend(ApiView):
    permission_classes = [Admin]

    @extend_schema(request=SendInput, parameters=IN_VHOST, responses=reply_schema("Done"))
    def post(self, request, name):
        name = valid_name(name, "queue name")
        data = valid(SendInput, request.data)
        return action_response(request, Send(node=data.get("node"), destination="/queue/" + name, body=data["body"],
                                              headers=dict(data["headers"]), persistent=data["persistent"],
                                              vhost=vhost_of(request)))



# -- connections and events ---------------------------------------------------------------------


class ConnectionList(ApiView):
    @extend_schema(parameters=VHOST_LIST_PARAMS, responses=model_ref("Connection", many=True))
    def get(self, request):
        vhost = vhost_filter(request)
        reply, failed = ask(request, Connections(node=ALL))
        if failed is not None:
            return failed
        names = mesh_view().names()
        rows = []
        for connection in builtins(reply.result):
            connection.setdefault("vhost", DEFAULT_VHOST)
            if vhost is not None and connection["vhost"] != vhost:
                continue
            connection["node_name"] = names.get(connection["node"], connection["node"][:8])
            connection["name"] = connection["id"]
            rows.append(connection)
        response = one_page(self, request, sorted_rows(request, rows, ("name", "node_name", "user", "since", "unacked"),
                                                "name"), convert=lambda row: row)
        response.data["failures"] = builtins(reply.failures)
        return response


class ConnectionDetail(ApiView):
    permission_classes = [Admin]

    @extend_schema(responses=reply_schema("Done"))
    def delete(self, request, connection):
        connection = valid_name(connection, "connection id")
        # A connection id is "<node name>-<n>": ask that node, or every node if it is none.
        owner = connection.rpartition("-")[0]
        node = owner if owner in mesh_view().names().values() else ALL
        return action_response(request, CloseConnection(node=node, connection=connection,
                                                         reason=f"closed by {request.user.get_username()} "
                                                                "from the console"))


class EventList(ApiView):
    @extend_schema(parameters=[*PAGE_PARAMS, EventParams], responses=model_ref("Event", many=True))
    def get(self, request):
        params = valid(EventParams, request.query_params)
        node = params.get("node")
        if node:
            node = next((row.id for row in mesh_view().nodes() if node in (row.id, row.name)), node)
        events = event_stream.recent(kinds=params.get("kind"), node=node, since=params.get("since"),
                                     text=params.get("q"))
        return one_page(self, request, events, convert=lambda event: event)
