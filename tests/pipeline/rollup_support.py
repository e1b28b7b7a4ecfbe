"""Reading rollups back and comparing them with what the traffic did."""

from __future__ import annotations

import msgspec
from traffic import COUNTER_NAMES, Expected

from model import latency
from model.rollups import (
    CLUSTER_FIELD,
    ClusterWindow,
    PipelineStatus,
    QueueWindow,
    queue_field,
    split_queue_key,
    status_key,
    window_key,
)

RESOLUTION_NAMES = {10: "10s", 60: "1m"}


def cluster(client, seconds: int, start: float, prefix: str = "meshgate") -> ClusterWindow | None:
    raw = client.hget(window_key(prefix, RESOLUTION_NAMES[seconds], start), CLUSTER_FIELD)
    return msgspec.json.decode(raw, type=ClusterWindow) if raw else None


def queue(client, seconds: int, start: float, name: str, prefix: str = "meshgate") -> QueueWindow | None:
    """The window of queue ``name`` (a ``queue_key``: a vhost's queue names its vhost)."""
    vhost, queue_name = split_queue_key(name)
    raw = client.hget(window_key(prefix, RESOLUTION_NAMES[seconds], start), queue_field(queue_name, vhost))
    window = msgspec.json.decode(raw, type=QueueWindow) if raw else None
    assert window is None or (window.vhost, window.queue) == (vhost, queue_name), window
    return window


def status(client, prefix: str = "meshgate") -> PipelineStatus:
    raw = client.get(status_key(prefix))
    assert raw, "the pipeline wrote no status"
    return msgspec.json.decode(raw, type=PipelineStatus)


def mismatches(client, expected: Expected, prefix: str = "meshgate") -> list[str]:
    """Every difference between the rollups in Redis and ``expected`` (empty: they agree)."""
    problems = []
    windows = {(s, w, q) for (s, w, q, _) in expected.counts} | {(s, w, q) for (s, w, q, _) in expected.depth_last}
    for seconds, start, name in sorted(windows):
        stored = queue(client, seconds, start, name, prefix)
        where = f"{RESOLUTION_NAMES[seconds]} window {start:.0f} queue {name}"
        if stored is None:
            problems.append(f"{where}: no rollup")
            continue
        for (s, w, q, node), counts in expected.counts.items():
            if (s, w, q) != (seconds, start, name):
                continue
            partial = stored.nodes.get(node)
            for counter in COUNTER_NAMES:
                got = getattr(partial, counter) if partial else 0
                if got != counts[counter]:
                    problems.append(f"{where} node {node}: {counter} {got}, expected {counts[counter]}")
        for counter in COUNTER_NAMES:
            want = expected.queue_total(seconds, start, name, counter)
            if getattr(stored.total, counter) != want:
                problems.append(f"{where}: total {counter} {getattr(stored.total, counter)}, expected {want}")
        for (s, w, q, node), (_, depth) in expected.depth_last.items():
            if (s, w, q) == (seconds, start, name):
                partial = stored.nodes.get(node)
                if partial is None or partial.depth_last != depth:
                    problems.append(f"{where} node {node}: depth_last {partial and partial.depth_last}, "
                                    f"expected {depth}")
                if partial is None or partial.depth_max != expected.depth_max[(s, w, q, node)]:
                    problems.append(f"{where} node {node}: depth_max {partial and partial.depth_max}, "
                                    f"expected {expected.depth_max[(s, w, q, node)]}")
        histogram = expected.latency.get((seconds, start, name), latency.empty_histogram())
        if latency.padded(stored.total.latency) != histogram:
            problems.append(f"{where}: latency {stored.total.latency}, expected {latency.trimmed(histogram)}")
        for quantile, got in ((0.5, stored.total.p50_ms), (0.95, stored.total.p95_ms), (0.99, stored.total.p99_ms)):
            want = latency.percentile_ms(histogram, quantile)
            if got != want:
                problems.append(f"{where}: p{int(quantile * 100)} {got} ms, expected {want}")
    for (seconds, start, kind), count in sorted(expected.events.items()):
        stored = cluster(client, seconds, start, prefix)
        got = stored.events.get(kind, 0) if stored else 0
        if got != count:
            problems.append(f"{RESOLUTION_NAMES[seconds]} window {start:.0f}: {got} {kind} events, expected {count}")
    return problems


def assert_rollups_agree(client, expected: Expected) -> None:
    """The rollups in Redis are what the traffic did, or the assertion lists every difference."""
    problems = mismatches(client, expected)
    assert problems == [], "\n".join(problems)
