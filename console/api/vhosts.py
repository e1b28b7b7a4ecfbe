"""The vhosts of the mesh: listed with what each holds (every node asked afresh),
made and deleted mesh-wide by an admin (docs/vhosts.md, "Creating and deleting
vhosts"), their limits set by an admin when a command made them. One vhost's answer
holds what it holds per node, the definition that made it, if a command did, and
that definition's limits (a configured vhost's are each node's [[vhosts.host]]
entry's: null here). Permissions are at vhosts/{name}/permissions (console.api.vhost_permissions)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from console.api.inputs import VhostDeleteParams, VhostInput, valid, valid_vhost
from console.api.parsers import ApiView
from console.api.permissions import Admin
from console.api.replies import LIST_PARAMS, action_response, ask, one_page, sorted_rows
from console.mesh import vhosts
from console.mesh.sources import mesh_view
from model.definitions import VhostSpec
from model.names import quoted
from model.requests import ALL, Definitions, VhostAdd, VhostDelete, VhostList, VhostSetLimits

_VHOST_SORTS = ("name", "origin", "queues", "messages", "connections", "node_count")
_PER_NODE = {"type": "object", "required": ["node", "node_name", "origin", "queues", "messages", "connections"],
             "properties": {"node": {"type": "string"}, "node_name": {"type": "string"},
                            "origin": {"type": "string", "enum": ["default", "config", "definition", "stored"]},
                            "queues": {"type": "integer"}, "messages": {"type": "integer"},
                            "connections": {"type": "integer"}}}
_VHOST_ROW = {"type": "object", "properties": {
    "name": {"type": "string"},
    "origin": {"type": "string", "description": "where the nodes have it from, comma-separated if they differ"},
    "queues": {"type": "integer"}, "messages": {"type": "integer"}, "connections": {"type": "integer"},
    "node_count": {"type": "integer", "description": "nodes that answered having it"},
    "nodes": {"type": "array", "items": _PER_NODE}}}
_VHOST_PAGE = {200: {"type": "object", "properties": {"items": {"type": "array", "items": _VHOST_ROW},
                                                      "failures": {"type": "array", "items": {"type": "object"}}}}}
_VHOST_DETAIL = {200: {"allOf": [_VHOST_ROW, {"type": "object", "properties": {
    "definition": {"type": ["object", "null"], "description": "the mesh-wide definition (vhost add), if any"},
    "limits": {"type": ["object", "null"], "description": "the definition's limits (null: a count not limited); "
                                                         "null for a vhost not made by command (each node's "
                                                         "[[vhosts.host]])"},
    "permissions": {"type": "null", "description": "always null: GET vhosts/{name}/permissions lists them"},
    "failures": {"type": "array", "items": {"type": "object"}}}}]}}
_DONE = {200: {"type": "object", "properties": {"result": {"$ref": "#/components/schemas/Done"},
                                                "failures": {"type": "array", "items": {"type": "object"}}}}}


LIMITS = ("max_connections", "max_queues", "max_messages")


class LimitField(serializers.IntegerField):
    def __init__(self, help_text: str) -> None:
        super().__init__(required=False, allow_null=True, min_value=0, max_value=2**31 - 1, help_text=help_text)


class VhostLimitsInput(serializers.Serializer):
    """New limits of a vhost made by command: a field left out is kept, null removes it."""

    max_connections = LimitField("client connections to it at once, per node")
    max_queues = LimitField("queues in it, per node")
    max_messages = LimitField("messages it holds before its producers wait, per node")

    def validate(self, attrs: dict) -> dict:
        unknown = set(self.initial_data) - set(LIMITS) if isinstance(self.initial_data, dict) else set()
        if unknown:
            raise serializers.ValidationError(f"unknown field(s): {', '.join(sorted(unknown))[:200]}")
        if not attrs:
            raise serializers.ValidationError(f"give one of {', '.join(LIMITS)}")
        return attrs


def _limits_of(spec: VhostSpec | None) -> dict | None:
    return None if spec is None else {field: getattr(spec, field) for field in LIMITS}


def _listed(request):
    """Every node's vhost rows, and the failures; or a Response if nobody answered."""
    reply, failed = ask(request, VhostList(node=ALL))
    if failed is not None:
        return None, failed
    return reply, None


class VhostListView(ApiView):
    def get_permissions(self):
        return [Admin()] if self.request.method == "POST" else super().get_permissions()

    @extend_schema(operation_id="vhosts_list", parameters=LIST_PARAMS, responses=_VHOST_PAGE)
    def get(self, request):
        reply, failed = _listed(request)
        if failed is not None:
            return failed
        rows = vhosts.vhost_rows(reply.result, mesh_view().names())
        response = one_page(self, request, sorted_rows(request, rows, _VHOST_SORTS, "name"), convert=lambda row: row)
        response.data["failures"] = _builtins_failures(reply)
        return response

    @extend_schema(request=VhostInput, responses=_DONE)
    def post(self, request):
        data = valid(VhostInput, request.data)
        return action_response(request, VhostAdd(name=data["name"],
                                                  spec=VhostSpec(description=data.get("description", ""))))


class VhostDetail(ApiView):
    def get_permissions(self):
        return [Admin()] if self.request.method == "DELETE" else super().get_permissions()

    @extend_schema(operation_id="vhost_retrieve", responses=_VHOST_DETAIL)
    def get(self, request, name):
        name = valid_vhost(name)
        reply, failed = _listed(request)
        if failed is not None:
            return failed
        rows = vhosts.vhost_rows([row for row in reply.result if row.name == name], mesh_view().names())
        if not rows:
            raise NotFound(f"no vhost {quoted(name)} on any node that answers")
        definitions, failed = ask(request, Definitions())
        if failed is not None:
            return failed
        definition = next((record for record in definitions.result if record.kind == "vhost"
                           and record.name == name and not record.deleted), None)
        return Response({**rows[0], "definition": None if definition is None else {
            "description": definition.vhost.description if definition.vhost else "",
            "origin": definition.origin, "origin_name": mesh_view().names().get(definition.origin),
            "version": definition.version, "changed_at": definition.changed_at},
            "limits": None if definition is None else _limits_of(definition.vhost), "permissions": None,
            "failures": _builtins_failures(reply)})

    @extend_schema(parameters=[VhostDeleteParams], responses=_DONE)
    def delete(self, request, name):
        name = valid_vhost(name)
        force = valid(VhostDeleteParams, request.query_params)["force"]
        return action_response(request, VhostDelete(name=name, force=force))


class VhostLimitsView(ApiView):
    def get_permissions(self):
        return [*super().get_permissions(), Admin()]

    @extend_schema(operation_id="vhost_limits_update", request=VhostLimitsInput, responses=_DONE)
    def put(self, request, name):
        name = valid_vhost(name)
        data = valid(VhostLimitsInput, request.data)
        return action_response(request, VhostSetLimits(name=name, **data))


def _builtins_failures(reply) -> list:
    return [{"code": f.code, "message": f.message, "node": f.node} for f in reply.failures]

