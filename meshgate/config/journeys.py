"""The ``[journeys]`` table: whether this node records the journeys of traced messages
(docs/journeys.md), and how many records it keeps."""

from __future__ import annotations

from dataclasses import dataclass

from meshgate.config.schema import MiB, _boolean, _integer, _key, parse_size


@dataclass(frozen=True)
class JourneysConfig:
    enabled: bool = _key(False, _boolean)  # false: no tracer, no message is ever traced
    max_records: int = _key(200_000, _integer(100))  # the oldest go first past this many
    max_bytes: int = _key(64 * MiB, parse_size)  # approximately, records and their text
    max_age_s: int = _key(3600, _integer(10))  # older records go, swept every 10 s
