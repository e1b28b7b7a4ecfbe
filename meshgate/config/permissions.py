"""``[[vhosts.permissions]]``: RabbitMQ's configure/write/read regular expressions
per user (or group) and vhost (docs/vhosts.md, gateway/permissions.py).

    [[vhosts.permissions]]
    user = "alice"            # or: group = "team-a"
    vhost = "team-a"
    configure = '^team-a\\.'   # TOML literal string: the backslash stays
    write = ".*"
    read = ".*"

All three patterns are required, as RabbitMQ's ``set_permissions`` takes all three:
a forgotten one must neither grant everything nor silently grant nothing.  ``""``
grants nothing (RabbitMQ reads it as ``"^$"``).  ``[vhosts]`` calls
:func:`parse_permissions`; :func:`check_principals` then checks the users and
groups named against ``[security.users]``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.permissions import OPERATIONS, compile_permission_pattern
from meshgate.config.schema import ConfigError, _describe, _key, _string, _table
from model.names import InvalidName, check_vhost_name, quoted

__all__ = ["PermissionConfig", "check_principals", "parse_permissions"]


def _vhost(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a vhost name (a string), got {_describe(value)[:100]}")
    try:
        return check_vhost_name(value)
    except InvalidName as error:
        raise ConfigError(key, str(error)) from None


def _regex(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f'expected a regular expression (a string such as ".*" or "^$"), '
                               f"got {_describe(value)[:100]}")
    try:
        compile_permission_pattern(value)
    except re.error as error:
        raise ConfigError(key, f"not a valid regular expression: {error}") from None
    return value


@dataclass(frozen=True, kw_only=True)
class PermissionConfig:
    """One entry; exactly one of ``user`` and ``group`` is set."""

    user: str | None = _key(None, _string())
    group: str | None = _key(None, _string())
    vhost: str = _key(parse=_vhost)
    configure: str = _key(parse=_regex)
    write: str = _key(parse=_regex)
    read: str = _key(parse=_regex)

    @property
    def principal(self) -> str:
        """``user "alice"`` or ``group "ops"``, for messages."""
        return f"user {self.user!r}" if self.user is not None else f"group {self.group!r}"


_ALL_THREE = 'give all three patterns, as RabbitMQ does ("" grants nothing, ".*" everything)'


def parse_permissions(value: Any, key: str) -> tuple[PermissionConfig, ...]:
    """The entries of the array of tables at ``key`` (``vhosts.permissions``)."""
    if not isinstance(value, list):
        raise ConfigError(key, f"expected an array of tables ([[{key}]]), got {_describe(value)[:100]}")
    entries: list[PermissionConfig] = []
    first_of: dict[tuple[str | None, str | None, str], str] = {}
    for index, raw in enumerate(value):
        prefix = f"{key}[{index}]"
        try:
            entry = _table(PermissionConfig)(raw, prefix)
        except ConfigError as error:
            if error.problem == "required key is missing" and error.key.rpartition(".")[2] in OPERATIONS:
                raise ConfigError(error.key, f"{error.problem}: {_ALL_THREE}") from None
            raise
        if entry.user is None and entry.group is None:
            raise ConfigError(prefix, 'names nobody: give user = "NAME" or group = "NAME"')
        if entry.user is not None and entry.group is not None:
            raise ConfigError(f"{prefix}.group", "give either user or group, not both (make two entries)")
        # RabbitMQ keeps one set of patterns per user and vhost; two would leave the reader
        # guessing which one counts (here: both, as a union).
        who = (entry.user, entry.group, entry.vhost)
        if who in first_of:
            raise ConfigError(prefix, f"a second entry for {entry.principal} in vhost {quoted(entry.vhost)} "
                                      f"(the first is {first_of[who]}); merge them into one")
        first_of[who] = prefix
        entries.append(entry)
    return tuple(entries)


class _User(Protocol):
    @property
    def groups(self) -> frozenset[str]: ...


def check_principals(entries: tuple[PermissionConfig, ...], users: Mapping[str, _User], key: str) -> None:
    """Refuse entries without ``[security.users]`` (every client would be the same
    anonymous principal) and entries naming a user or group no user has: a typo
    there would lock the intended people out without a word."""
    if entries and not users:
        raise ConfigError(key, "needs users: add [security.users.<name>] tables")
    groups = frozenset().union(*(user.groups for user in users.values()))
    for index, entry in enumerate(entries):
        if entry.user is not None and entry.user not in users:
            raise ConfigError(f"{key}[{index}].user", f"no such user {entry.user!r} in [security.users]")
        if entry.group is not None and entry.group not in groups:
            raise ConfigError(f"{key}[{index}].group", f"no user of [security.users] is in group {entry.group!r}")

