"""The ``[vhosts]`` table: the node's virtual hosts besides the default ``/``
(docs/vhosts.md), whether a STOMP ``host`` header naming none is refused, each
vhost's limits and who may use which vhost (``[[vhosts.permissions]]``,
meshgate/config/permissions.py).

    [vhosts]
    strict_stomp_host = false
    [[vhosts.host]]
    name = "team-a"
    max_connections = 100     # limits are optional; per node
    max_queues = 50
    max_messages = 100000     # held on this node; its producers wait at it
    [[vhosts.host]]
    name = "/"                # the default vhost: only to give it limits
    max_connections = 1000
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.broker.vhost_limits import VhostLimit
from meshgate.config.permissions import PermissionConfig, parse_permissions
from meshgate.config.schema import ConfigError, _array_of, _boolean, _integer, _key
from model.names import DEFAULT_VHOST, InvalidName, check_vhost_name


def _vhost_name(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a vhost name (a string), got {value!r}"[:300])
    try:
        return check_vhost_name(value)
    except InvalidName as error:
        raise ConfigError(key, str(error)) from None


@dataclass(frozen=True)
class VhostConfig:
    name: str = _key(parse=_vhost_name)
    max_connections: int | None = _key(None, _integer(0))
    max_queues: int | None = _key(None, _integer(0))
    max_messages: int | None = _key(None, _integer(1))

    @property
    def limit(self) -> VhostLimit:
        return VhostLimit(max_connections=self.max_connections, max_queues=self.max_queues,
                          max_messages=self.max_messages)


@dataclass(frozen=True)
class VhostsConfig:
    strict_stomp_host: bool = _key(False, _boolean)
    host: tuple[VhostConfig, ...] = _key((), _array_of(VhostConfig))
    permissions: tuple[PermissionConfig, ...] = _key((), parse_permissions)

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for index, vhost in enumerate(self.host):
            if vhost.name in seen:
                raise ConfigError(f"vhosts.host[{index}].name", f"{vhost.name!r}: given twice")
            if vhost.name == DEFAULT_VHOST and not vhost.limit.any:
                raise ConfigError(f"vhosts.host[{index}].name", f"{vhost.name!r}: the default vhost always exists; "
                                                                 "list it only to give it limits")
            seen.add(vhost.name)

    @property
    def names(self) -> tuple[str, ...]:
        """The configured vhosts besides ``/``."""
        return tuple(vhost.name for vhost in self.host if vhost.name != DEFAULT_VHOST)

    @property
    def limits(self) -> dict[str, VhostLimit]:
        """The limits of every vhost that has one (``/`` included)."""
        return {vhost.name: vhost.limit for vhost in self.host if vhost.limit.any}
