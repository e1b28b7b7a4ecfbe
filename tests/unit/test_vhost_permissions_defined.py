"""Vhost permissions made by command (definitions of kind "permission"): every node's
map holds the configuration's entries and the commands' (gateway.permissions
VhostPermissions.define, fed by gateway.broker.vhosts), the configuration winning for
a user (or group) and vhost it names; the first command entry turns the map on; a
vhost's go with it; a hostile spec is refused as it is decoded; the management
actions answer bad input with bad_request (docs/vhosts.md, "Permissions")."""

from __future__ import annotations

import logging

import msgspec
import pytest

from gateway.auth import Authorizer, Principal
from gateway.broker.vhosts import VirtualHosts
from gateway.permissions import AccessControl, VhostPermissions
from gateway.store.memory import MemoryStore
from management.actions import LocalActions
from management.permission_actions import TURNED_ON
from mesh.definitions import _frames
from model.definitions import KINDS_BEFORE_VHOSTS, PERMISSION, Definition, PermissionSpec, QueueSettings, VhostSpec
from model.requests import ManagementError, VhostPermissionsClear
from tests.unit.test_permissions import Entry

BOB = Principal("bob", frozenset({"readers"}))
ALICE = Principal("alice", frozenset({"ops"}))


def spec(vhost: str = "team-a", user: str | None = "bob", group: str | None = None, configure: str = ".*",
         write: str = ".*", read: str = ".*") -> PermissionSpec:
    return PermissionSpec(vhost=vhost, user=user, group=group, configure=configure, write=write, read=read)


def node(config: tuple[Entry, ...] = (), *, enabled: bool = True) -> tuple[VirtualHosts, VhostPermissions]:
    vhosts = VirtualHosts(MemoryStore(), ["team-a"])
    vhosts.recover()
    permissions = VhostPermissions(config, enabled=enabled)
    vhosts.follow_permissions(permissions)
    return vhosts, permissions


def test_the_first_command_entry_turns_the_map_on_and_a_cleared_one_turns_it_off_again():
    vhosts, permissions = node()
    access = AccessControl(Authorizer((), enabled=False), permissions)
    assert not permissions.enabled and not access.enabled and permissions.may_open(ALICE, "/")
    vhosts.set_permission(spec(configure="^b\\.", write="", read=""))
    assert permissions.enabled and access.enabled  # AccessControl follows (read on every publish)
    assert permissions.may_open(BOB, "team-a") and not permissions.may_open(ALICE, "team-a")
    assert not permissions.may_open(BOB, "/")  # RabbitMQ's rule: '/' needs its entries too
    assert permissions.allowed(BOB, "team-a", "configure", "b.q") and not permissions.allowed(BOB, "team-a", "write",
                                                                                               "amq.default")
    vhosts.set_permission(spec(configure="^b\\.", write=".*", read=""))  # changed: the cached answer goes
    assert permissions.allowed(BOB, "team-a", "write", "amq.default")
    vhosts.clear_permission(spec().key())
    assert not permissions.enabled and not access.enabled and permissions.may_open(ALICE, "team-a")


def test_the_configuration_wins_for_what_it_names_and_a_command_adds_the_others(caplog):
    configured = Entry(vhost="team-a", user="bob", configure="^cfg$", write="", read="")
    vhosts, permissions = node((configured,))
    with caplog.at_level(logging.WARNING, logger="gateway.broker.vhosts"):
        vhosts.set_permission(spec(configure=".*"))  # bob in team-a: the configuration's stands
        vhosts.set_permission(spec(configure="^cmd$"))  # a second version: logged once, not again
        vhosts.set_permission(spec(user=None, group="ops", configure="^ops$"))
    ignored = [r for r in caplog.records if "ignored on this node" in r.getMessage()]
    assert len(ignored) == 1 and "'bob'" in ignored[0].getMessage()
    assert permissions.allowed(BOB, "team-a", "configure", "cfg")
    assert not permissions.allowed(BOB, "team-a", "configure", "cmd")
    assert permissions.allowed(ALICE, "team-a", "configure", "ops")  # a group the configuration leaves out
    listed = [(entry.user, entry.group, source, in_force) for entry, source, in_force in permissions.entries()]
    assert listed == [("bob", None, "config", True), ("bob", None, "command", False), (None, "ops", "command", True)]


def test_command_entries_are_read_at_start_and_do_nothing_on_a_node_without_users():
    vhosts = VirtualHosts(MemoryStore(), ["team-a"])
    vhosts.recover()
    vhosts.set_permission(spec())  # before the map is made: recovery applies definitions first
    permissions = VhostPermissions((), enabled=True)
    vhosts.follow_permissions(permissions)
    assert permissions.enabled and not permissions.may_open(ALICE, "team-a")
    anonymous = VhostPermissions((), enabled=False)
    vhosts.follow_permissions(anonymous)
    assert not anonymous.enabled and anonymous.may_open(ALICE, "team-a")


def test_a_deleted_vhost_takes_its_command_permissions_with_it():
    vhosts, permissions = node()
    vhosts.define("team-c", VhostSpec())
    vhosts.set_permission(spec(vhost="team-c"))
    vhosts.set_permission(spec(vhost="/"))
    vhosts.undefine("team-c")
    record = vhosts.default.definitions.get(PERMISSION, spec(vhost="team-c").key())
    assert record is not None and record.deleted  # a tombstone: a node away learns of it
    assert [entry.vhost for entry, _, _ in permissions.entries()] == ["/"]


@pytest.mark.parametrize("bad", [
    {"vhost": "team-a", "configure": "", "write": "", "read": ""},  # nobody
    {"vhost": "team-a", "user": "bob", "group": "ops", "configure": "", "write": "", "read": ""},  # both
    {"vhost": "team-a", "user": "bob", "configure": "(", "write": "", "read": ""},
    {"vhost": "team-a", "user": "bob", "configure": "", "write": "[a-", "read": ""},
    {"vhost": "team-a", "user": "bob", "configure": "", "write": "", "read": "a{2,1}"},
    {"vhost": "team\x07a", "user": "bob", "configure": "", "write": "", "read": ""},
    {"vhost": "team-a", "user": "b\nob", "configure": "", "write": "", "read": ""},
    {"vhost": "team-a", "group": "x" * 256, "configure": "", "write": "", "read": ""},
    {"vhost": "", "user": "bob", "configure": "", "write": "", "read": ""},
    {"vhost": "team-a", "user": "bob", "configure": "a" * 1025, "write": "", "read": ""},
    {"vhost": "team-a", "user": "bob", "configure": "", "write": ""},  # all three, as rabbitmqctl
    {"vhost": "team-a", "user": "bob", "configure": "", "write": "", "read": "", "tag": "x"},
    {"vhost": "team-a", "user": 7, "configure": "", "write": "", "read": ""},
])
def test_a_hostile_spec_is_refused_as_it_is_decoded(bad):
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(bad, PermissionSpec)
    record = {"kind": "permission", "name": "x", "version": 1, "origin": "n", "changed_at": 0.0, "permission": bad}
    with pytest.raises(msgspec.ValidationError):  # a record from a peer: mesh.definitions skips it, logged
        msgspec.convert(record, Definition)


def test_the_key_is_a_json_array_no_name_can_forge():
    assert spec(user="bob").key() == '["team-a","bob",null]'
    assert spec(user=None, group="bob").key() == '["team-a",null,"bob"]'
    assert spec(vhost='a","b', user="c").key() != spec(vhost="a", user='b","c').key()


def test_permission_records_travel_in_the_frame_a_node_before_vhosts_drops_alone():
    queue = Definition(kind="queue", name="orders", version=1, origin="n", changed_at=0.0, queue=QueueSettings())
    permission = Definition(kind=PERMISSION, name=spec().key(), version=2, origin="n", changed_at=0.0,
                            permission=spec())
    vhost = Definition(kind="vhost", name="team-a", version=3, origin="n", changed_at=0.0, vhost=VhostSpec())
    known, newer = _frames([queue, permission, vhost])
    # What that release reads: a kind it does not know makes it drop the whole frame.
    assert sorted(KINDS_BEFORE_VHOSTS) == ["binding", "durable", "exchange", "queue"]
    assert [r["kind"] for r in msgspec.json.decode(known)] == ["queue"]
    assert sorted(r["kind"] for r in msgspec.json.decode(newer)) == ["permission", "vhost"]
    assert _frames([queue, permission])[1] == msgspec.json.encode([permission])  # without any vhost record too


def actions(config: tuple[Entry, ...] = ()) -> tuple[LocalActions, VirtualHosts, VhostPermissions]:
    vhosts, permissions = node(config)
    return LocalActions(node_id="n1", broker=vhosts.default, mesh=None, clock=None, vhosts=vhosts), vhosts, permissions


def test_management_sets_lists_and_clears_saying_loudly_that_the_map_turned_on():
    local, _, permissions = actions((Entry(vhost="/", user="admin", configure=".*", write=".*", read=".*"),))
    done = local.vhost_permissions_set(spec(vhost="team-a"))
    assert TURNED_ON not in done.detail and "version" in done.detail  # the configuration had turned it on
    assert local.vhost_permissions_set(spec(vhost="team-a")).detail == "unchanged"
    rows = local.vhost_permissions_list("team-a")
    assert [(r.user, r.source, r.in_force, r.map_active) for r in rows] == [("bob", "command", True, True)]
    assert len(local.vhost_permissions_list(None)) == 2
    local.vhost_permissions_clear(VhostPermissionsClear(vhost="team-a", user="bob"))
    assert local.vhost_permissions_list("team-a") == []
    fresh, _, _ = actions()
    assert TURNED_ON in fresh.vhost_permissions_set(spec(vhost="/", user="admin")).detail


@pytest.mark.parametrize(("call", "code"), [
    (lambda a: a.vhost_permissions_set(spec(vhost="nowhere")), "bad_request"),
    (lambda a: a.vhost_permissions_set(spec(vhost="team-a", user="carol")), "conflict"),  # the configuration's
    (lambda a: a.vhost_permissions_clear(VhostPermissionsClear(vhost="team-a", user="bob")), "not_found"),
    (lambda a: a.vhost_permissions_clear(VhostPermissionsClear(vhost="team-a", user="carol")), "conflict"),
    (lambda a: a.vhost_permissions_clear(VhostPermissionsClear(vhost="team\x07", user="bob")), "bad_request"),
    (lambda a: a.vhost_permissions_clear(VhostPermissionsClear(vhost="team-a", group="x" * 300)), "bad_request"),
    (lambda a: a.vhost_permissions_list("nowhere"), "not_found"),
    (lambda a: a.delete_definition("permission", spec(user="dave").key()), "bad_request"),
])
def test_management_refuses_bad_input_with_a_clear_code(call, code):
    local, vhosts, _ = actions((Entry(vhost="team-a", user="carol", configure="", write="", read=""),))
    vhosts.set_permission(spec(vhost="team-a", user="dave"))  # so that delete_definition finds a record
    with pytest.raises(ManagementError) as raised:
        call(local)
    assert raised.value.code == code, raised.value
