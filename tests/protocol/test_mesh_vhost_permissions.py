"""Vhost permissions by command over the mesh (docs/vhosts.md, "Permissions"): set
through management on one node, every node's map has them, each node's configuration
winning for what it names (the list says so, per node); cleared, they go everywhere;
a peer of link protocol 4 (the release before vhosts) gets them in a DEFINITIONS
frame of their own, so it keeps reading the frame of the kinds it knows."""

from __future__ import annotations

import msgspec

from gateway.auth import Principal
from gateway.permissions import VhostPermissions
from mesh.wire import FrameType
from model.definitions import PermissionSpec, QueueSettings
from model.requests import ALL, VhostPermissionsClear, VhostPermissionsList, VhostPermissionsSet
from tests.protocol.management_harness import ManagedNode, ManagementHarness
from tests.protocol.mesh_peer_support import ABSENT, RawPeer
from tests.unit.test_permissions import Entry

BOB = Principal("bob")
PASSWORD = "vhost-permissions-secret"


def with_permissions(node: ManagedNode, *config: Entry) -> VhostPermissions:
    """What meshgate.node wires: the node's map, following the definitions."""
    permissions = VhostPermissions(config, enabled=True)
    node.vhosts.follow_permissions(permissions)
    node.actions.vhosts = node.vhosts
    return permissions


def bobs(configure: str) -> VhostPermissionsSet:
    return VhostPermissionsSet(permission=PermissionSpec(vhost="/", user="bob", configure=configure, write="",
                                                         read=""))


def test_a_permission_set_on_one_node_holds_on_every_node_and_the_configuration_wins_where_it_names_it():
    mesh = ManagementHarness()
    a, b, c = mesh.node("a"), mesh.node("b"), mesh.node("c")
    on_a, on_b = with_permissions(a), with_permissions(b)
    on_c = with_permissions(c, Entry(vhost="/", user="bob", configure="^c-only$", write="", read=""))
    mesh.link(a, b)
    mesh.link(b, c)
    mesh.gossip(b)  # a knows of c: the list asks every node
    assert not on_a.enabled and not on_b.enabled and on_c.enabled
    reply = a.ask(bobs("^q$"))
    assert reply.ok and "NOW ON" in reply.result.detail, reply
    for permissions in (on_a, on_b):
        assert permissions.may_open(BOB, "/") and permissions.allowed(BOB, "/", "configure", "q")
    assert on_c.allowed(BOB, "/", "configure", "c-only") and not on_c.allowed(BOB, "/", "configure", "q")

    listed = a.ask(VhostPermissionsList(vhost="/", node=ALL))
    rows = sorted((row.node, row.source, row.in_force) for row in listed.result)
    assert rows == sorted([(a.id, "command", True), (b.id, "command", True), (c.id, "config", True),
                           (c.id, "command", False)]), rows
    refused = c.ask(bobs(".*"))  # asked where the configuration names bob in '/': conflict
    assert not refused.ok and refused.error.code == "conflict"

    cleared = b.ask(VhostPermissionsClear(vhost="/", user="bob"))
    assert cleared.ok, cleared
    assert not on_a.enabled and not on_b.enabled and on_c.enabled  # c keeps its configuration's entry
    events = [e for e in b.admin_events() if e.action == "vhost_permissions_clear"]
    assert events and events[0].ok and events[0].target == "permissions of user bob in vhost /"


def test_a_peer_of_protocol_4_gets_permission_records_in_a_frame_of_their_own():
    mesh = ManagementHarness(insecure_cluster=False, cluster_password=PASSWORD)
    node = mesh.node("b")
    with_permissions(node)
    node.broker.define_queue("orders", QueueSettings(max_length=1))
    assert node.ask(bobs(".*")).ok
    old = RawPeer(node)
    old.establish(PASSWORD, speaks=ABSENT)
    frames = old.of(FrameType.DEFINITIONS)
    assert old.link.protocol == 4 and len(frames) == 2, frames
    assert [record["kind"] for record in frames[0]] == ["queue"]  # what that release reads
    assert [record["kind"] for record in frames[1]] == ["permission"]  # what it drops, alone
    assert msgspec.convert(frames[1][0]["permission"], PermissionSpec).user == "bob"
