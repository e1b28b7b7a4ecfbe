"""The executors' half of a micro-batch, in plain Python: decode the stream entries
with msgspec and reduce each Arrow batch of them to a few partial rows — per
stream (entries, malformed, late, newest time and id), per node start (its first
snapshot), per event window, node and kind (a count), and per partial queue,
node start and 10-second window (the first and last counters, the deepest depth,
the latest gauges). Spark then merges the partial rows of all batches
(``transform``): a few thousand rows a batch instead of one per partial queue
per snapshot, and no JSON parsing in the JVM.

Decoding uses the model's own field names, types and defaults (a projection of
``model.mesh.Snapshot`` to what the rollups use); an entry that does not decode
to it is malformed."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
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


def reduce_batch(columns: dict[str, list], snapshots: str, events: str, applied: dict[str, tuple[int, int]],
                 watermark: float) -> list[dict]:
    """The partial rows of one batch of entries (``columns``: the source's ``stream``,
    ``id``, ``node``, ``kind``, ``data`` as lists), each with ``part`` one of
    summary / boot / event / queue. Entries at or before ``applied[stream]`` are
    skipped (already applied); ``late``: their window closed before ``watermark``."""
    summary: dict[str, dict] = {}
    boots: dict[tuple, int] = {}
    counted: dict[tuple, int] = {}
    queues: dict[tuple, dict] = {}
    for stream, entry_id, node, kind, data in zip(columns["stream"], columns["id"], columns["node"],
                                                   columns["kind"], columns["data"], strict=True):
        position = id_key(entry_id)
        after = applied.get(stream)
        if after is not None and position <= after:
            continue
        totals = summary.get(stream)
        if totals is None:
            totals = summary[stream] = {"part": "summary", "stream": stream, "entries": 0, "malformed": 0,
                                        "late_count": 0, "max_time": None, "last_ms": 0, "last_seq": 0}
        totals["entries"] += 1
        if position > (totals["last_ms"], totals["last_seq"]):
            totals["last_ms"], totals["last_seq"] = position
        snapshot = event = None
        try:
            if stream == snapshots and data is not None:
                snapshot = _snapshot(data)
            elif stream == events and data is not None and kind is not None and node is not None:
                event = _event(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        if snapshot is None and event is None:
            totals["malformed"] += 1
            continue
        time = snapshot.taken_at if snapshot is not None else event.time
        window = math.floor(time / WINDOW_SECONDS) * WINDOW_SECONDS
        late = window + WINDOW_SECONDS <= watermark
        totals["late_count"] += late
        capped = min(time, position[0] / 1000.0)  # a node's fast clock cannot push the watermark
        if totals["max_time"] is None or capped > totals["max_time"]:
            totals["max_time"] = capped
        if event is not None:
            if not late:
                key = (window, node, kind)
                counted[key] = counted.get(key, 0) + 1
            continue
        boot_key = (snapshot.node.id, snapshot.node.started_at)
        seq = snapshot.seq
        if boots.get(boot_key, seq + 1) > seq:
            boots[boot_key] = seq
        for partial in snapshot.queues:
            _add(queues, (*boot_key, partial.name, window), seq, time, late, partial)
    rows = list(summary.values())
    rows.extend({"part": "boot", "node": node, "boot": boot, "first_seq": seq} for (node, boot), seq in boots.items())
    rows.extend({"part": "event", "window": window, "node": node, "kind": kind, "count": count}
                for (window, node, kind), count in counted.items())
    rows.extend(_row(key, group) for key, group in queues.items())
    return rows


def _counters(partial: Any) -> dict:
    values = {name: getattr(partial, name) for name in COUNTERS}
    values["latency"] = partial.latency
    values["latency_sum_ms"] = partial.latency_sum_ms
    return values


def _add(queues: dict, key: tuple, seq: int, time: float, late: bool, partial: Any) -> None:
    """Keep the first and last snapshot's partial queue of the group (turned into
    rows once, in ``_row``), the deepest depth and whether any was late."""
    group = queues.get(key)
    if group is None:
        queues[key] = [seq, partial, seq, partial, time, late, partial.depth]
        return
    if seq < group[0]:
        group[0], group[1] = seq, partial
    if seq > group[2]:
        group[2], group[3], group[4] = seq, partial, time
    if late:
        group[5] = True
    if partial.depth > group[6]:
        group[6] = partial.depth


def _row(key: tuple, group: list) -> dict:
    node, boot, name, window = key
    first_seq, first, last_seq, last, time, late, depth_max = group
    return {"part": "queue", "node": node, "boot": boot, "queue": name, "window": window,
            "first_seq": first_seq, "first": _counters(first), "last_seq": last_seq, "last": _counters(last),
            "late": late, "depth_max": depth_max,
            "now": {"depth": last.depth, "consumers": last.consumers, "in_flight": last.in_flight, "at": time}}


def reduce_arrow(batches: Iterator[Any], snapshots: str, events: str, applied: dict[str, str],
                 watermark: float, schema: Any) -> Iterator[Any]:
    """``mapInArrow``'s function: each Arrow batch of entries to a batch of partial rows."""
    import pyarrow as pa

    after = {stream: id_key(entry_id) for stream, entry_id in applied.items()}
    for batch in batches:
        columns = {name: batch.column(name).to_pylist() for name in ("stream", "id", "node", "kind", "data")}
        rows = reduce_batch(columns, snapshots, events, after, watermark)
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=schema)
