"""The executors' half of a micro-batch, in plain Python: decode the stream entries
with msgspec and reduce each page of them to partial rows — per stream and window
(entries, malformed, newest time and id), per node start (its first snapshot),
per event window, node and kind (a count), and per partial queue, node start and
10-second window (the first and last counters, the deepest depth, the latest
gauges). ``pipeline.partials`` runs this inside the data source's read, so the
entries never cross into the JVM; Spark merges the partial rows of all pages
(``transform``).

Decoding uses the model's own field names, types and defaults (a projection of
``model.mesh.Snapshot`` to what the rollups use); an entry that does not decode
to it is malformed."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import msgspec
from msgspec import inspect

from model.mesh import PartialQueue
from model.rollups import COUNTERS
from pipeline.source import id_key

WINDOW_SECONDS = 10  # the finest resolution; coarser windows are sums of these
GAUGES = ("depth", "in_flight", "consumers")


def _projection(name: str, source: type[msgspec.Struct], names: Iterable[str], required: set[str]) -> type:
    """A Struct of ``source``'s fields ``names`` with their types and defaults;
    those in ``required`` without a default."""
    import typing

    hints = typing.get_type_hints(source)
    fields: list[tuple] = []
    for field in inspect.type_info(source).fields:
        if field.encode_name not in names:
            continue
        annotation = hints[field.name]
        if field.encode_name in required or (field.default is inspect.NODEFAULT
                                             and field.default_factory is inspect.NODEFAULT):
            fields.append((field.encode_name, annotation))
        elif field.default_factory is not inspect.NODEFAULT:
            fields.append((field.encode_name, annotation, msgspec.field(default_factory=field.default_factory)))
        else:
            fields.append((field.encode_name, annotation, field.default))
    return msgspec.defstruct(name, fields, kw_only=True)


_QUEUE_FIELDS = ("name", *GAUGES, *COUNTERS, "latency", "latency_sum_ms")
_Queue = _projection("_Queue", PartialQueue, _QUEUE_FIELDS, {"name"})


class _NodeRef(msgspec.Struct):
    id: str
    started_at: float


class _Snapshot(msgspec.Struct):
    seq: int
    taken_at: float
    node: _NodeRef
    queues: list[_Queue] = []


class _Event(msgspec.Struct):
    time: float


_snapshot = msgspec.json.Decoder(_Snapshot).decode
_event = msgspec.json.Decoder(_Event).decode


def partials_schema() -> Any:
    """The rows ``reduce_entries`` gives, as Spark sees them: a ``StructType``, which
    (unlike a DDL string) a Python worker can turn into Arrow without a JVM."""
    from pyspark.sql.types import ArrayType, DoubleType, LongType, StringType, StructField, StructType

    def struct(*fields: tuple[str, Any]) -> StructType:
        return StructType([StructField(name, kind) for name, kind in fields])

    counters = struct(*((name, LongType()) for name in COUNTERS), ("latency", ArrayType(LongType())),
                      ("latency_sum_ms", DoubleType()))
    now = struct(("depth", LongType()), ("consumers", LongType()), ("in_flight", LongType()), ("at", DoubleType()))
    return struct(
        ("part", StringType()), ("stream", StringType()), ("entries", LongType()), ("malformed", LongType()),
        ("max_time", DoubleType()), ("last_ms", LongType()), ("last_seq", LongType()), ("node", StringType()),
        ("boot", DoubleType()), ("queue", StringType()), ("window", LongType()), ("first_seq", LongType()),
        ("first", counters), ("last", counters), ("depth_max", LongType()),
        ("now", now), ("kind", StringType()), ("count", LongType()),
    )


def reduce_entries(entries: Iterable[tuple], snapshots: str, events: str) -> list[dict]:
    """The partial rows of some entries (``stream``, ``id``, ``node``, ``kind``,
    ``data`` tuples: str, or None where the entry lacks the field; ``data`` str
    or bytes), each with ``part`` one
    of summary / boot / event / queue. Whether a window is late is for the driver
    to say: it alone knows the watermark, and every row carries its window."""
    summary: dict[tuple, dict] = {}
    boots: dict[tuple, int] = {}
    counted: dict[tuple, int] = {}
    queues: dict[tuple, dict] = {}
    for stream, entry_id, node, kind, data in entries:
        position = id_key(entry_id)
        snapshot = event = None
        try:
            if stream == snapshots and data is not None:
                snapshot = _snapshot(data)
            elif stream == events and data is not None and kind is not None and node is not None:
                event = _event(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        if snapshot is None and event is None:
            _count(summary, stream, None, position, None)["malformed"] += 1
            continue
        time = snapshot.taken_at if snapshot is not None else event.time
        window = math.floor(time / WINDOW_SECONDS) * WINDOW_SECONDS
        _count(summary, stream, window, position, min(time, position[0] / 1000.0))  # a fast clock is capped
        if event is not None:
            counted[(window, node, kind)] = counted.get((window, node, kind), 0) + 1
            continue
        boot_key = (snapshot.node.id, snapshot.node.started_at)
        seq = snapshot.seq
        if boots.get(boot_key, seq + 1) > seq:
            boots[boot_key] = seq
        for partial in snapshot.queues:
            _add(queues, (*boot_key, partial.name, window), seq, time, partial)
    rows = list(summary.values())
    rows.extend({"part": "boot", "node": node, "boot": boot, "first_seq": seq} for (node, boot), seq in boots.items())
    rows.extend({"part": "event", "window": window, "node": node, "kind": kind, "count": count}
                for (window, node, kind), count in counted.items())
    rows.extend(_row(key, group) for key, group in queues.items())
    return rows


def _count(summary: dict, stream: str, window: int | None, position: tuple[int, int], time: float | None) -> dict:
    """The entry counted in its stream's and window's summary row (window None: malformed)."""
    totals = summary.get((stream, window))
    if totals is None:
        totals = summary[(stream, window)] = {"part": "summary", "stream": stream, "window": window, "entries": 0,
                                              "malformed": 0, "max_time": None, "last_ms": 0, "last_seq": 0}
    totals["entries"] += 1
    if position > (totals["last_ms"], totals["last_seq"]):
        totals["last_ms"], totals["last_seq"] = position
    if time is not None and (totals["max_time"] is None or time > totals["max_time"]):
        totals["max_time"] = time
    return totals


def _counters(partial: Any) -> dict:
    values = {name: getattr(partial, name) for name in COUNTERS}
    values["latency"] = partial.latency
    values["latency_sum_ms"] = partial.latency_sum_ms
    return values


def _add(queues: dict, key: tuple, seq: int, time: float, partial: Any) -> None:
    """Keep the first and last snapshot's partial queue of the group (turned into
    rows once, in ``_row``) and the deepest depth."""
    group = queues.get(key)
    if group is None:
        queues[key] = [seq, partial, seq, partial, time, partial.depth]
        return
    if seq < group[0]:
        group[0], group[1] = seq, partial
    if seq > group[2]:
        group[2], group[3], group[4] = seq, partial, time
    if partial.depth > group[5]:
        group[5] = partial.depth


def _row(key: tuple, group: list) -> dict:
    node, boot, name, window = key
    first_seq, first, last_seq, last, time, depth_max = group
    return {"part": "queue", "node": node, "boot": boot, "queue": name, "window": window,
            "first_seq": first_seq, "first": _counters(first), "last_seq": last_seq, "last": _counters(last),
            "depth_max": depth_max,
            "now": {"depth": last.depth, "consumers": last.consumers, "in_flight": last.in_flight, "at": time}}
