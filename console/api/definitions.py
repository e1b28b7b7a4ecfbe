"""The mesh-wide definitions in the API: queue settings, durable subscriptions, AMQP
exchanges and bindings, traced destinations, and vhosts made by command, listed for
every vhost or one (``?vhost=``), a queue's settings set or deleted, a durable
subscription deleted, a destination's tracing read, switched on or off."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import SAFE_METHODS
from rest_framework.response import Response

from console.api.inputs import QueueSettingsInput, TraceInput, valid, valid_name
from console.api.parsers import ApiView
from console.api.permissions import Admin
from console.api.replies import (
    IN_VHOST,
    VHOST_LIST_PARAMS,
    action_response,
    ask,
    ask_each,
    builtins,
    one_page,
    sorted_rows,
    vhost_filter,
    vhost_of,
)
from console.api.schema import model_ref
from console.mesh.sources import mesh_view
from model.definitions import DURABLE_SUBSCRIPTION, TRACE, QueueSettings, traced_destination
from model.names import DEFAULT_VHOST, quoted
from model.requests import DefineQueue, DefineTrace, Definitions, DeleteDefinition


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

    @extend_schema(parameters=VHOST_LIST_PARAMS, responses=model_ref("DefinitionRow", many=True))
    def get(self, request):
        vhost = vhost_filter(request)
        records: list = []
        failures: list = []
        if vhost in (None, DEFAULT_VHOST):
            reply, failed = ask(request, Definitions())
            if failed is not None:
                return failed
            records = [(DEFAULT_VHOST, record) for record in reply.result]
        if vhost != DEFAULT_VHOST:  # another vhost's definitions are the asked node's (docs/vhosts.md)
            others, failures = ask_each(request, vhost, lambda name: Definitions(vhost=name))
            records += others
        view = mesh_view()
        names = view.names()
        parts = _durable_parts(view) if any(r.kind == DURABLE_SUBSCRIPTION and v == DEFAULT_VHOST
                                            for v, r in records) else {}
        rows = []
        for record_vhost, record in records:
            row = builtins(record)
            row["in_vhost"] = record_vhost  # "vhost" is a vhost definition's own spec
            row["deleted"] = record.deleted
            row["origin_name"] = names.get(record.origin)
            if record.kind == DURABLE_SUBSCRIPTION:
                held = sorted(parts.get(record.name, ()), key=lambda part: names.get(part.node, part.node))
                row["subscribers"] = [{"node": part.node, "node_name": names.get(part.node, part.node[:8]),
                                       "connection": part.connection} for part in held if part.active]
                row["waiting"] = sum(part.depth for part in held)
            rows.append(row)
        rows = sorted_rows(request, rows, ("name", "kind", "version", "changed_at"), "name")
        response = one_page(self, request, rows, convert=lambda row: row)
        response.data["failures"] = failures
        return response


_ONE_DONE = {200: {"type": "object", "properties": {"result": {"$ref": "#/components/schemas/Done"},
                                                    "failures": {"type": "array", "items": {"type": "object"}}}}}


class QueueDefinition(ApiView):
    permission_classes = [Admin]

    @extend_schema(request=QueueSettingsInput, parameters=IN_VHOST, responses=_ONE_DONE)
    def put(self, request, name):
        name = valid_name(name, "queue name")
        data = valid(QueueSettingsInput, request.data)
        return action_response(request, DefineQueue(queue=name, settings=QueueSettings(**data),
                                                             vhost=vhost_of(request)))

    @extend_schema(parameters=IN_VHOST, responses=_ONE_DONE)
    def delete(self, request, name):
        return action_response(request, DeleteDefinition(kind="queue", name=valid_name(name, "queue name"),
                                                          vhost=vhost_of(request)))


class DurableDefinition(ApiView):
    permission_classes = [Admin]

    @extend_schema(parameters=IN_VHOST, responses=_ONE_DONE)
    def delete(self, request, name):
        name = valid_name(name, "durable subscription name")
        return action_response(request, DeleteDefinition(kind="durable", name=name, vhost=vhost_of(request)))


def _traced(destination: str) -> str:
    """``/queue/NAME`` or ``/topic/NAME`` from the URL's ``queue/NAME`` (or ``topic/NAME``), else a 400."""
    destination = "/" + destination.removeprefix("/")
    try:
        traced_destination(destination)
    except ValueError as error:
        raise ValidationError(str(error)) from None
    return destination


class TraceDefinition(ApiView):
    """A destination traced on every node for a while (docs/journeys.md, "Tracing a
    destination for a while"): GET its definition (any user), PUT switches it on or
    changes it, DELETE switches it off (admin)."""

    def get_permissions(self):
        permissions = super().get_permissions()
        return permissions if self.request.method in SAFE_METHODS else [*permissions, Admin()]

    @extend_schema(parameters=IN_VHOST, responses=model_ref("Definition"))
    def get(self, request, destination):
        destination = _traced(destination)
        vhost = vhost_of(request)
        reply, failed = ask(request, Definitions(vhost=vhost))
        if failed is not None:
            return failed
        record = next((r for r in reply.result if (r.kind, r.name) == (TRACE, destination) and not r.deleted), None)
        if record is None:
            raise NotFound(f"{quoted(destination)} is not traced by a definition in vhost {quoted(vhost)}")
        return Response(builtins(record))

    @extend_schema(request=TraceInput, parameters=IN_VHOST, responses=_ONE_DONE)
    def put(self, request, destination):
        destination = _traced(destination)
        data = valid(TraceInput, request.data)
        return action_response(request, DefineTrace(destination=destination, vhost=vhost_of(request), **data))

    @extend_schema(parameters=IN_VHOST, responses=_ONE_DONE)
    def delete(self, request, destination):
        return action_response(request, DeleteDefinition(kind=TRACE, name=_traced(destination),
                                                         vhost=vhost_of(request)))
