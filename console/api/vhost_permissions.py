"""A vhost's permissions (docs/vhosts.md, "Permissions"), as RabbitMQ's HTTP API has
them (``GET/PUT/DELETE /api/permissions/{vhost}/{user}``): listed per node with where
each comes from (every node asked afresh), set and cleared mesh-wide by an admin.

    GET    vhosts/{name}/permissions                   every node's entries for the vhost
    PUT    vhosts/{name}/permissions/{user}            {configure, write, read}
    DELETE vhosts/{name}/permissions/{user}
    PUT    vhosts/{name}/permissions/group/{group}     the same for a group
    DELETE vhosts/{name}/permissions/group/{group}

A group is addressed under ``group/`` (so a user whose name begins with ``group/``
is reached through the CLI). The first permission set turns vhost permissions on:
the answer's detail says so, loudly."""

from __future__ import annotations

import re

from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from console.api.inputs import _Body, valid, valid_name, valid_vhost
from console.api.parsers import ApiView
from console.api.permissions import Admin
from console.api.replies import action_response, ask, one_page
from console.mesh.sources import mesh_view
from model.definitions import MAX_PATTERN_LENGTH, PermissionSpec, compile_permission_pattern
from model.requests import ALL, VhostPermissionsClear, VhostPermissionsList, VhostPermissionsSet

_ROW = {"type": "object", "required": ["node", "vhost", "configure", "write", "read", "source"], "properties": {
    "node": {"type": "string"}, "node_name": {"type": ["string", "null"]}, "vhost": {"type": "string"},
    "user": {"type": ["string", "null"]}, "group": {"type": ["string", "null"]},
    "configure": {"type": "string"}, "write": {"type": "string"}, "read": {"type": "string"},
    "source": {"type": "string", "enum": ["config", "command"]},
    "in_force": {"type": "boolean", "description": "false: a command's entry the node's configuration overrides"},
    "map_active": {"type": "boolean", "description": "whether the node checks vhost permissions at all"}}}
_PAGE = {200: {"type": "object", "properties": {"items": {"type": "array", "items": _ROW},
                                                "failures": {"type": "array", "items": {"type": "object"}}}}}
_DONE = {200: {"type": "object", "properties": {"result": {"$ref": "#/components/schemas/Done"},
                                                "failures": {"type": "array", "items": {"type": "object"}}}}}


class PatternField(serializers.CharField):
    """A configure/write/read pattern: a regular expression as the nodes compile it
    ("" grants nothing, ".*" everything)."""

    def __init__(self, help_text: str) -> None:
        super().__init__(allow_blank=True, trim_whitespace=False, max_length=MAX_PATTERN_LENGTH, help_text=help_text)

    def to_internal_value(self, data) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        try:
            compile_permission_pattern(data)
        except re.error as error:
            raise serializers.ValidationError(f"not a valid regular expression: {error}") from None
        return super().to_internal_value(data)


class PermissionInput(_Body):
    """All three patterns, as RabbitMQ's set_permissions takes them."""

    configure = PatternField("queues and exchanges it may declare and delete")
    write = PatternField("exchanges it may publish to, queues it may bind")
    read = PatternField("queues it may consume from, exchanges it may bind from")


class VhostPermissionList(ApiView):
    @extend_schema(operation_id="vhost_permissions_list", responses=_PAGE)
    def get(self, request, name):
        name = valid_vhost(name)
        reply, failed = ask(request, VhostPermissionsList(vhost=name, node=ALL))
        if failed is not None:
            return failed
        names = mesh_view().names()
        rows = [{"node": row.node, "node_name": names.get(row.node), "vhost": row.vhost, "user": row.user,
                 "group": row.group, "configure": row.configure, "write": row.write, "read": row.read,
                 "source": row.source, "in_force": row.in_force, "map_active": row.map_active}
                for row in sorted(reply.result, key=lambda r: (r.user or "", r.group or "", r.source, r.node))]
        response = one_page(self, request, rows, convert=lambda row: row)
        response.data["failures"] = [{"code": f.code, "message": f.message, "node": f.node} for f in reply.failures]
        return response


class _OnePermission(ApiView):
    """PUT sets, DELETE clears the permissions of one user or group (admin)."""

    def get_permissions(self):
        return [*super().get_permissions(), Admin()]

    def _put(self, request, vhost: str, user: str | None, group: str | None):
        data = valid(PermissionInput, request.data)
        spec = PermissionSpec(vhost=vhost, user=user, group=group, **data)  # each part checked already
        return action_response(request, VhostPermissionsSet(permission=spec))


class UserPermission(_OnePermission):
    @extend_schema(operation_id="vhost_user_permission_update", request=PermissionInput, responses=_DONE)
    def put(self, request, name, user):
        return self._put(request, valid_vhost(name), valid_name(user, "user name"), None)

    @extend_schema(operation_id="vhost_user_permission_destroy", responses=_DONE)
    def delete(self, request, name, user):
        return action_response(request, VhostPermissionsClear(vhost=valid_vhost(name),
                                                              user=valid_name(user, "user name")))


class GroupPermission(_OnePermission):
    @extend_schema(operation_id="vhost_group_permission_update", request=PermissionInput, responses=_DONE)
    def put(self, request, name, group):
        return self._put(request, valid_vhost(name), None, valid_name(group, "group name"))

    @extend_schema(operation_id="vhost_group_permission_destroy", responses=_DONE)
    def delete(self, request, name, group):
        return action_response(request, VhostPermissionsClear(vhost=valid_vhost(name),
                                                              group=valid_name(group, "group name")))
