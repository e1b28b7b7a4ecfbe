"""The ``[vhosts]`` table: the node's virtual hosts besides the default ``/``
(docs/vhosts.md), and whether a STOMP ``host`` header naming none is refused.

    [vhosts]
    strict_stomp_host = false
    [[vhosts.host]]
    name = "team-a"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshgate.config.schema import ConfigError, _array_of, _boolean, _key
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


@dataclass(frozen=True)
class VhostsConfig:
    strict_stomp_host: bool = _key(False, _boolean)
    host: tuple[VhostConfig, ...] = _key((), _array_of(VhostConfig))

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for index, vhost in enumerate(self.host):
            if vhost.name in seen or vhost.name == DEFAULT_VHOST:
                why = "the default vhost always exists" if vhost.name == DEFAULT_VHOST else "given twice"
                raise ConfigError(f"vhosts.host[{index}].name", f"{vhost.name!r}: {why}")
            seen.add(vhost.name)

    @property
    def names(self) -> tuple[str, ...]:
        """The configured vhosts besides ``/``."""
        return tuple(vhost.name for vhost in self.host)
