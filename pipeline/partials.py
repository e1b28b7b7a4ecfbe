"""``meshgate_partials``: the nodes' snapshots and events streams, read as the
rollups' partial rows (``pipeline.decode``) — the job's input.

It is ``redis_streams`` with the decoding and reduction moved into the read:
each task pages through its range of entries, decodes them with msgspec and
reduces the whole range to one row per partial queue, node start and window
(and per event window, node and kind), so the entries themselves never cross
into the JVM and back (four times the work of reading them). Offsets, partitions,
admission control and ``commit`` are ``redis_streams``'s.

Options: ``prefix`` (default ``meshgate``; the streams are ``<prefix>:snapshots``
and ``<prefix>:events``), ``packed`` (``true``: each task gives one row, its
partial rows as one LZ4-compressed Arrow IPC stream in a binary column ``packed``:
the JVM moves the bytes instead of converting every nested row twice, on its way in and out;
``transform.unpacked`` reads them), and ``redis_streams``'s ``url``, ``startingOffsets``,
``endingOffsets``, ``maxEntriesPerTrigger``, ``admission``, ``entriesPerPartition``,
``pageSize`` and ``progressKey``.

A streaming read starts no earlier than the offsets the rollups in Redis record
as applied (``<prefix>:rollups:status``): a checkpoint older than the rollups
(restored from a backup, say) never counts entries twice."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from pipeline import gc_paused
from pipeline.decode import partials_schema, reduce_entries
from pipeline.source import (
    NOTHING,
    BatchReader,
    Options,
    RedisStreamsDataSource,
    StreamRange,
    StreamReader,
    find_value,
    later,
    pages,
    ranges,
    values,
)

NAME = "meshgate_partials"
_ROWS_PER_BATCH = 10_000  # partial rows per Arrow batch handed to Spark


def register(spark: Any) -> None:
    spark.dataSource.register(MeshPartialsDataSource)


class _Streams:
    """The prefix and the two streams it names."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.prefix = options.get("prefix") or "meshgate"
        self.snapshots, self.events = f"{self.prefix}:snapshots", f"{self.prefix}:events"
        self.options = Options(options, streams=f"{self.snapshots},{self.events}")
        self.packed = (options.get("packed") or "false").lower() == "true"


class MeshPartialsDataSource(RedisStreamsDataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> Any:
        return packed_schema() if _Streams(self.options).packed else partials_schema()

    def reader(self, schema: Any) -> DataSourceReader:
        return _PartialsReader(_Streams(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _PartialsStreamReader(_Streams(self.options))


class _ReadsPartials:
    """What both readers change of ``redis_streams``'s: each partition read as partial rows."""

    def __init__(self, streams: _Streams) -> None:
        super().__init__(streams.options)
        self.streams = streams

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return partial_rows(self.streams, partition)


class _PartialsReader(_ReadsPartials, BatchReader):
    pass


class _PartialsStreamReader(_ReadsPartials, StreamReader):
    def __init__(self, streams: _Streams) -> None:
        super().__init__(streams)
        self.planned = False

    def partitions(self, start: dict, end: dict) -> list[StreamRange]:
        """From ``start``, or from what the rollups record as applied where that is
        later. A query's first batch starts from what they record wherever they
        record something: the job applies a batch after Spark may have committed it
        (``job.RollupBatches``), so a process that died in between left entries that
        Spark counts as done and the rollups do not."""
        applied = _applied(self.streams)
        first, self.planned = not self.planned, True
        start = {key: applied[key] if first and key in applied else later(start.get(key, NOTHING),
                                                                           applied.get(key, NOTHING))
                 for key in self.options.streams}
        return ranges(self.options, start, end)


def _applied(streams: _Streams) -> dict[str, str]:
    import msgspec

    from model.rollups import PipelineStatus, status_key

    with streams.options.client() as client:
        raw = client.get(status_key(streams.prefix))
    return dict(msgspec.json.decode(raw, type=PipelineStatus).offsets) if raw else {}


def packed_schema() -> Any:
    from pyspark.sql.types import BinaryType, StructField, StructType

    return StructType([StructField("packed", BinaryType())])


def partial_rows(streams: _Streams, part: InputPartition) -> Iterator[Any]:
    """The partial rows of a partition's entries, as Arrow record batches (or, packed,
    one row holding them as an Arrow IPC stream)."""
    if not isinstance(part, StreamRange):
        return
    entries = chain.from_iterable(_entries(streams, part.stream, page) for page in pages(streams.options, part))
    with gc_paused():
        batches = list(reduce_entries(entries, streams.snapshots, streams.events).record_batches(_ROWS_PER_BATCH))
    if streams.packed:
        yield _packed(batches)
    else:
        yield from batches


def _packed(batches: list[Any]) -> Any:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    if batches:
        # Compressed: the JVM copies the blob a few times on its way to the driver (its CPU
        # per 100,000 entries 0.9 -> 0.5 s); LZ4 costs the task far less than that.
        options = pa.ipc.IpcWriteOptions(compression="lz4")
        with pa.ipc.new_stream(sink, batches[0].schema, options=options) as writer:
            for batch in batches:
                writer.write_batch(batch)
    data = sink.getvalue()
    offsets = pa.array([0, data.size], type=pa.int32()).buffers()[1]
    blob = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data])  # the bytes, not a copy
    return pa.RecordBatch.from_arrays([blob], names=["packed"])


def _entries(streams: _Streams, stream: str, page: list) -> Iterator[tuple]:
    """A page of raw entries as ``reduce_entries`` takes them. A snapshot says whose
    it is in its data, and, written by a node of this version, in its fields too
    (the head: ``boot``, ``seq``, ``at``, ``queues``); events need their ``node``
    and ``kind`` fields."""
    flats = [flat for _, flat in page]
    ids = [entry_id.decode() for entry_id, _ in page]
    heads = kinds = repeat(None)
    if stream == streams.events:
        nodes, kinds = _texts(values(flats, b"node")), _texts(values(flats, b"kind"))
    elif b"boot" in flats[0][::2]:  # a page of a node of this version (else none of it has a head)
        node, boot, seq, at, queues, data = _columns(flats, _HEAD)
        return zip(repeat(stream), ids, _texts(node), kinds, data, zip(boot, seq, at, queues, strict=True),
                   strict=False)
    else:
        nodes = repeat(None)
    return zip(repeat(stream), ids, nodes, kinds, values(flats, b"data"), heads, strict=False)


_HEAD = (b"node", b"boot", b"seq", b"at", b"queues", b"data")


def _columns(flats: list[list[bytes]], names: tuple[bytes, ...]) -> tuple[tuple, ...]:
    """The values of the fields ``names`` as columns. The entries a node writes have
    one layout: theirs are taken by position, in C, once an entry shows that layout."""
    layout = flats[0][::2]
    if not all(name in layout for name in names):
        return tuple(tuple(values(flats, name)) for name in names)
    pick = itemgetter(*(2 * layout.index(name) + 1 for name in names))
    width = len(flats[0])
    rows = [pick(flat) if len(flat) == width and flat[::2] == layout
            else tuple(find_value(flat, name) for name in names) for flat in flats]
    return tuple(zip(*rows, strict=True))


def _texts(raw: list[bytes | None]) -> list[str | None]:
    return [None if value is None else value.decode("utf-8", "replace") for value in raw]
