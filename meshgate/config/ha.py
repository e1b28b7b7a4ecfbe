"""The ``[ha]`` table: high availability on a shared store (docs/ha.md)."""

from __future__ import annotations

from dataclasses import dataclass

from meshgate.config.schema import ConfigError, _choice, _integer, _key

HA_MODES = ("none", "shared-store")


@dataclass(frozen=True)
class HaConfig:
    # none: a second process on a held data dir refuses to start.
    # shared-store: it waits as the standby and takes over when the lock is released.
    mode: str = _key("none", _choice(*HA_MODES))
    poll_interval_ms: int = _key(100, _integer(10))  # how often a standby tries the lock
    lease_interval_ms: int = _key(1000, _integer(100))  # lease renewal and epoch check by the holder

    def __post_init__(self) -> None:
        if self.lease_interval_ms > 60_000:
            raise ConfigError("ha.lease_interval_ms",
                              f"must be at most 60000, or a replaced node would serve on for minutes; "
                              f"got {self.lease_interval_ms}")

    @property
    def shared_store(self) -> bool:
        return self.mode == "shared-store"
