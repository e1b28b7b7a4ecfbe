"""The ``[doctor]`` table (docs/doctor.md): how old something must be before the
stuck-message doctor reports it, when a ``diagnosis`` request does not say, and how
its sampler looks. The thresholds are management.doctor.Thresholds' fields, with its
defaults; a request's own thresholds (``meshgate doctor --waiting 5m``, the API's
``?waiting=``) win over them. ``sample_s`` and ``window_s`` are the sampler's
(management/doctor_node.py, management/doctor_history.py), with their defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshgate.config.schema import ConfigError, _describe, _key

MAX_THRESHOLD_S = 366 * 24 * 3600  # as a diagnosis request's own bound (model.requests_doctor.Seconds)
# Each sample walks the subscriptions, queues and durable subscriptions: more often than
# every second buys nothing a person reads; less often than hourly leaves ages that coarse.
MIN_SAMPLE_S, MAX_SAMPLE_S = 1, 3600
# The window keeps window_s / sample_s snapshots of the dead-letter counters: a day at most.
MAX_WINDOW_S = 24 * 3600


def _seconds(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, f"expected a number of seconds, got {_describe(value)}")
    return float(value)


def _threshold(value: Any, key: str) -> float:
    """Seconds, more than 0 (0 would make everything a finding) and at most a year."""
    seconds = _seconds(value, key)
    if not 0 < seconds <= MAX_THRESHOLD_S:  # (NaN fails it too)
        raise ConfigError(key, f"must be more than 0 and at most {MAX_THRESHOLD_S} seconds (366 days), got {value}")
    return seconds


def _sample_period(value: Any, key: str) -> float:
    seconds = _seconds(value, key)
    if not MIN_SAMPLE_S <= seconds <= MAX_SAMPLE_S:  # (NaN fails it too)
        raise ConfigError(key, f"must be from {MIN_SAMPLE_S} to {MAX_SAMPLE_S} seconds, got {value}")
    return seconds


def _growth_window(value: Any, key: str) -> float:
    seconds = _seconds(value, key)
    if not 0 < seconds <= MAX_WINDOW_S:  # (NaN fails it too)
        raise ConfigError(key, f"must be more than 0 and at most {MAX_WINDOW_S} seconds (a day), got {value}")
    return seconds


@dataclass(frozen=True)
class DoctorConfig:
    waiting_s: float = _key(60.0, _threshold)  # a backlog with no local consumer, while consumers wait elsewhere
    in_doubt_s: float = _key(60.0, _threshold)  # messages held for an absent node
    unacked_s: float = _key(300.0, _threshold)  # a consumer's oldest unacked delivery
    paused_s: float = _key(60.0, _threshold)  # a producer not read (flow control)
    durable_gone_s: float = _key(3600.0, _threshold)  # a durable subscription without its subscriber
    stalled_s: float = _key(60.0, _threshold)  # a backlog whose consumers all take no more
    sample_s: float = _key(10.0, _sample_period)  # how often the sampler looks (ages are short by up to this)
    window_s: float = _key(300.0, _growth_window)  # how far back dead-letter and expiry growth is judged

    def __post_init__(self) -> None:
        if self.window_s < self.sample_s:
            raise ConfigError("doctor.window_s", f"must be at least sample_s ({self.sample_s:g}): growth is "
                                                 f"judged between two samples, got {self.window_s:g}")
