"""meshgate.config.permissions: [[vhosts.permissions]] entries, read from real TOML."""

from __future__ import annotations

import textwrap
import tomllib
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.auth import Principal
from gateway.permissions import VhostPermissions
from meshgate.config import ConfigError
from meshgate.config.permissions import PermissionConfig, check_principals, parse_permissions

KEY = "vhosts.permissions"


def entries(toml: str) -> Any:
    """What the TOML parser makes of ``[[vhosts.permissions]]`` tables."""
    return tomllib.loads(textwrap.dedent(toml))["vhosts"]["permissions"]


def parsed(toml: str) -> tuple[PermissionConfig, ...]:
    return parse_permissions(entries(toml), KEY)


def refused(value: Any) -> str:
    with pytest.raises(ConfigError) as info:
        parse_permissions(value if not isinstance(value, str) else entries(value), KEY)
    return str(info.value)


VALID = """
    [[vhosts.permissions]]
    user = "alice"
    vhost = "team-a"
    configure = '^team-a\\.'
    write = ".*"
    read = ""

    [[vhosts.permissions]]
    group = "auditors"
    vhost = "/"
    configure = "^$"
    write = "^$"
    read = ".*"
"""


def test_entries_are_read_as_written() -> None:
    alice, auditors = parsed(VALID)
    assert alice == PermissionConfig(user="alice", vhost="team-a", configure="^team-a\\.", write=".*", read="")
    assert auditors.group == "auditors" and auditors.user is None and auditors.vhost == "/"
    with pytest.raises(AttributeError):
        alice.vhost = "other"  # type: ignore[misc]


def test_parsed_entries_drive_the_permission_map() -> None:
    perms = VhostPermissions(parsed(VALID), enabled=True)
    alice = Principal("alice", frozenset({"team-a"}))
    assert perms.allowed(alice, "team-a", "configure", "team-a.orders")
    assert not perms.allowed(alice, "team-a", "read", "team-a.orders")  # "" grants nothing
    assert perms.may_open(Principal("dora", frozenset({"auditors"})), "/")


def test_no_entries_is_an_empty_tuple() -> None:
    assert parse_permissions([], KEY) == ()


def test_an_invalid_pattern_is_refused_naming_its_key() -> None:
    message = refused(VALID.replace('write = ".*"', 'write = "orders("'))
    assert message.startswith("vhosts.permissions[0].write: not a valid regular expression: missing ),")


@pytest.mark.parametrize("operation", ["configure", "write", "read"])
def test_every_pattern_is_required(operation: str) -> None:
    raw = entries(VALID)
    del raw[1][operation]
    message = refused(raw)
    assert message.startswith(f"vhosts.permissions[1].{operation}: required key is missing: give all three")


def test_a_pattern_must_be_a_string() -> None:
    assert refused(VALID.replace('read = ".*"', "read = 5")).startswith(
        "vhosts.permissions[1].read: expected a regular expression")


def test_an_entry_names_a_user_or_a_group_not_both_nor_neither() -> None:
    raw = entries(VALID)
    del raw[0]["user"]
    assert refused(raw).startswith('vhosts.permissions[0]: names nobody: give user = "NAME" or group = "NAME"')
    raw = entries(VALID)
    raw[1]["user"] = "bob"
    assert refused(raw).startswith("vhosts.permissions[1].group: give either user or group, not both")
    raw = entries(VALID)
    raw[0]["user"] = ""
    assert refused(raw) == "vhosts.permissions[0].user: must not be empty"


def test_the_vhost_is_required_and_must_be_a_valid_name() -> None:
    raw = entries(VALID)
    del raw[0]["vhost"]
    assert refused(raw) == "vhosts.permissions[0].vhost: required key is missing"
    for bad, why in (("", "it is empty"), ("team\na", "U+000A"), ("x" * 256, "at most 255 bytes")):
        raw = entries(VALID)
        raw[0]["vhost"] = bad
        message = refused(raw)
        assert message.startswith("vhosts.permissions[0].vhost: invalid vhost name") and why in message
        assert len(message) < 300  # the hostile name is quoted cut short
    raw[0]["vhost"] = ["team-a"]
    assert refused(raw).startswith("vhosts.permissions[0].vhost: expected a vhost name")


def test_a_second_entry_for_the_same_user_and_vhost_is_refused() -> None:
    twice = VALID + """
    [[vhosts.permissions]]
    user = "alice"
    vhost = "team-a"
    configure = ""
    write = ""
    read = ".*"
    """
    assert refused(twice).startswith("vhosts.permissions[2]: a second entry for user 'alice' in vhost 'team-a' "
                                     "(the first is vhosts.permissions[0])")
    elsewhere = twice.replace('vhost = "team-a"\n    configure = ""', 'vhost = "team-b"\n    configure = ""')
    assert len(parsed(elsewhere)) == 3


def test_unknown_keys_and_wrong_shapes_are_refused() -> None:
    assert refused(VALID.replace('read = ""', 'read = ""\n    raed = ".*"')).startswith(
        "vhosts.permissions[0].raed: unknown key (known keys: user, group, vhost, configure, write, read)")
    assert refused({"user": "alice"}).startswith(
        "vhosts.permissions: expected an array of tables ([[vhosts.permissions]])")
    assert refused(["alice"]).startswith("vhosts.permissions[0]: expected a table")


# --- against [security.users] -----------------------------------------------


def users(**groups: list[str]) -> dict[str, SimpleNamespace]:
    return {name: SimpleNamespace(groups=frozenset(member_of)) for name, member_of in groups.items()}


def test_entries_name_configured_users_and_groups() -> None:
    check_principals(parsed(VALID), users(alice=[], dora=["auditors"]), KEY)
    check_principals((), {}, KEY)


def test_entries_without_users_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^vhosts\.permissions: needs users: add \[security\.users\.<name>\]"):
        check_principals(parsed(VALID), {}, KEY)


def test_an_unknown_user_or_group_is_refused_naming_its_key() -> None:
    with pytest.raises(ConfigError) as info:
        check_principals(parsed(VALID), users(alicia=["auditors"]), KEY)
    assert str(info.value) == "vhosts.permissions[0].user: no such user 'alice' in [security.users]"
    with pytest.raises(ConfigError) as info:
        check_principals(parsed(VALID), users(alice=["auditor"]), KEY)
    assert str(info.value) == "vhosts.permissions[1].group: no user of [security.users] is in group 'auditors'"
