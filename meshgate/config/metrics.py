"""The ``[metrics]`` table: where the node writes its snapshots and events."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from meshgate.config.schema import ConfigError, _integer, _key, _string


def _redis_url(value: Any, key: str) -> str:
    url = _string()(value, key)
    if not re.match(r"(redis|rediss|unix)://", url):
        raise ConfigError(key, f'expected a Redis URL such as "redis://127.0.0.1:6379/0" or '
                               f'"unix:///path/redis.sock", got {url!r}')
    return url


@dataclass(frozen=True)
class MetricsConfig:
    redis_url: str | None = _key(None, _redis_url)  # None: metrics off
    interval_ms: int = _key(1000, _integer(100))
    stream_prefix: str = _key("meshgate", _string(r"[A-Za-z0-9._:-]+", "use letters, digits, '.', '_', ':' and '-'"))
    maxlen: int = _key(100_000, _integer(1000))  # events kept (approximately)
    snapshot_retention_s: int = _key(900, _integer(60))  # seconds of snapshots kept (approximately)
    buffer: int = _key(10_000, _integer(10))  # entries kept in memory while Redis is unreachable
