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
    # What a message's received record keeps for search (journey_search): its body's first
    # bytes (0: no body search) and its headers, names and values cut to this much in all.
    body_preview: int = _key(256, _integer(0))
    max_header_bytes: int = _key(2048, _integer(0))
