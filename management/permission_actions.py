"""Vhost permissions by command, for the whole mesh (RabbitMQ's ``set_permissions``,
``clear_permissions``, ``list_permissions``; docs/vhosts.md, "Permissions"): one
handler per action, mixed into management.actions.LocalActions.

The asked node makes the definition (kind "permission" in "/"'s definitions) and the
links carry it to every node, as for vhosts and their limits. The configuration is
authoritative: for a user (or group) and vhost the asked node's
``[[vhosts.permissions]]`` names, setting or clearing by command is refused
(``conflict``); on a node whose configuration alone names it, the command's entry is
ignored (``vhost_permissions_list`` shows it so)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from model.definitions import PERMISSION, PermissionSpec
from model.names import InvalidName, check_name, quoted
from model.requests import Done, ManagementError, PermissionRow, VhostPermissionsClear

if TYPE_CHECKING:
    from gateway.broker.vhosts import VirtualHosts
    from gateway.permissions import VhostPermissions

# Said in the answer that turned the map on, and in the docs: RabbitMQ's rule bites here.
TURNED_ON = ("VHOST PERMISSIONS ARE NOW ON on this node: a user without an entry for a vhost can no longer open "
             "it, '/' included (give '/' entries to the users meshgate commands and the console log in as)")


def _who(user: str | None, group: str | None) -> str:
    return f"user {quoted(user)}" if user is not None else f"group {quoted(group or '')}"


class PermissionActions:
    """What LocalActions gives these handlers (declared for the type checker)."""

    node_id: str
    vhosts: VirtualHosts | None

    def _permissions(self) -> tuple[VirtualHosts, VhostPermissions]:
        vhosts = self.vhosts
        if vhosts is None or vhosts.permissions is None:
            raise ManagementError("conflict", "this node serves the default vhost alone, without a vhost "
                                              "permissions map", self.node_id)
        return vhosts, vhosts.permissions

    def _did(self, action: str, target: str, detail: str) -> Done:
        return Done(node=self.node_id, action=action, target=target, detail=detail)

    def _checked(self, vhosts: VirtualHosts, permissions: VhostPermissions, vhost: str, user: str | None,
                 group: str | None) -> None:
        """bad_request for a name the rule refuses or a vhost this node lacks; conflict
        when the node's configuration names that user (or group) in that vhost."""
        try:
            check_name(vhost, "vhost name")
            if user is not None:
                check_name(user, "user name")
            if group is not None:
                check_name(group, "group name")
        except InvalidName as error:
            raise ManagementError("bad_request", str(error)) from None
        if vhosts.get(vhost) is None:
            raise ManagementError("bad_request", f"no vhost {quoted(vhost)} (meshgate vhost list shows the vhosts; "
                                                 "meshgate vhost add makes one)", self.node_id)
        if permissions.configures(vhost, user, group):
            raise ManagementError("conflict", f"the permissions of {_who(user, group)} in vhost {quoted(vhost)} are "
                                              "in this node's configuration ([[vhosts.permissions]]), which stands: "
                                              "change them there", self.node_id)

    def vhost_permissions_set(self, spec: PermissionSpec) -> Done:
        vhosts, permissions = self._permissions()
        self._checked(vhosts, permissions, spec.vhost, spec.user, spec.group)
        target = f"{_who(spec.user, spec.group)} in vhost {quoted(spec.vhost)}"
        current = vhosts.default.definitions.get(PERMISSION, spec.key())
        if current is not None and current.permission == spec:
            return self._did("vhost_permissions_set", target, "unchanged")
        was_on = permissions.enabled
        record = vhosts.set_permission(spec)
        detail = (f"version {record.version}, for every node: configure {spec.configure!r} write {spec.write!r} "
                  f"read {spec.read!r}")
        if permissions.enabled and not was_on:
            detail += f". {TURNED_ON}"
        elif not permissions.authenticates:
            detail += ". This node lets clients in without users (anonymous): no permission applies on it"
        return self._did("vhost_permissions_set", target, detail)

    def vhost_permissions_clear(self, request: VhostPermissionsClear) -> Done:
        vhosts, permissions = self._permissions()
        self._checked(vhosts, permissions, request.vhost, request.user, request.group)
        target = f"{_who(request.user, request.group)} in vhost {quoted(request.vhost)}"
        current = vhosts.default.definitions.get(PERMISSION, request.key())
        if current is None or current.deleted:
            raise ManagementError("not_found", f"no permissions of {target} made by command (meshgate vhost "
                                               f"permissions {request.vhost} lists them)", self.node_id)
        record = vhosts.clear_permission(request.key())
        detail = f"version {record.version}, for every node"
        if permissions.enabled:
            detail += ": its next connections to the vhost are refused unless another entry names it"
        return self._did("vhost_permissions_clear", target, detail)

    def vhost_permissions_list(self, vhost: str | None) -> list[PermissionRow]:
        if self.vhosts is None or self.vhosts.permissions is None:
            return []
        if vhost is not None and self.vhosts.get(vhost) is None:
            raise ManagementError("not_found", f"no vhost {quoted(vhost)} on this node", self.node_id)
        permissions = self.vhosts.permissions
        return [PermissionRow(node=self.node_id, vhost=entry.vhost, user=entry.user, group=entry.group,
                              configure=entry.configure, write=entry.write, read=entry.read, source=source,
                              in_force=in_force, map_active=permissions.enabled)
                for entry, source, in_force in permissions.entries() if vhost is None or entry.vhost == vhost]
