"""The ``[doctor]`` table: how old something must be before the stuck-message doctor
reports it (docs/doctor.md), when a ``diagnosis`` request does not say. The keys are
management.doctor.Thresholds' fields, with its defaults; a request's own thresholds
(``meshgate doctor --waiting 5m``, the API's ``?waiting=``) win over them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshgate.config.schema import ConfigError, _describe, _key

MAX_THRESHOLD_S = 366 * 24 * 3600  # as a diagnosis request's own bound (model.requests_doctor.Seconds)


def _threshold(value: Any, key: str) -> float:
    """Seconds, more than 0 (0 would make everything a finding) and at most a year."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"expected a number of seconds, got {_describe(value)}")
    if not 0 < value <= MAX_THRESHOLD_S:  # (NaN fails it too)
        raise ConfigError(key, f"must be more than 0 and at most {MAX_THRESHOLD_S} seconds (366 days), got {value}")
    return float(value)


@dataclass(frozen=True)
class DoctorConfig:
    waiting_s: float = _key(60.0, _threshold)  # a backlog with no local consumer, while consumers wait elsewhere
    in_doubt_s: float = _key(60.0, _threshold)  # messages held for an absent node
    unacked_s: float = _key(300.0, _threshold)  # a consumer's oldest unacked delivery
    paused_s: float = _key(60.0, _threshold)  # a producer not read (flow control)
    durable_gone_s: float = _key(3600.0, _threshold)  # a durable subscription without its subscriber
    stalled_s: float = _key(60.0, _threshold)  # a backlog whose consumers all take no more
