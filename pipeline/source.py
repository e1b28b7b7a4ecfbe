"""``redis_streams``: a Spark Python data source that reads Redis streams, batch
and streaming.

Offsets are entry ids, one per stream key, as JSON (``{"meshgate:events":
"1700000000000-3"}``): the last entry read, as XREAD takes it. Reads are
stateless XRANGEs between two offsets, paged, so any range can be read again
(Spark replays a micro-batch after a crash; nothing is consumed or deleted).
Large ranges are split into partitions of about ``entriesPerPartition`` entries,
cut at entry ids Redis finds with a script (the entries stay in Redis).

Options (names are case-insensitive):

- ``url``: the Redis URL (default ``redis://127.0.0.1:6379/0``)
- ``streams``: stream keys, comma-separated (required)
- ``fields``: entry fields to give columns of their own (comma-separated); else one
  ``fields`` column, a map of every field
- ``startingOffsets``: ``earliest`` (default), ``latest``, an entry id, or a JSON
  object of key -> id; reading starts after the id
- ``endingOffsets`` (batch only): ``latest`` (default), an id or JSON; inclusive
- ``maxEntriesPerTrigger`` (streaming): entries per micro-batch at most, shared fairly
  between the streams
- ``entriesPerPartition``: entries per Spark task (default 50,000)
- ``pageSize``: entries per XRANGE (default 5,000)
- ``progressKey`` (streaming): a hash where ``commit()`` records the last id read of each
  stream, for whoever watches the job's progress
- ``arrow``: ``true`` (default) yields Arrow record batches, ``false`` tuples

Rows: ``stream``, ``id``, ``time`` (the entry's id time: when Redis added it),
then the ``fields`` columns (strings; null when the entry lacks the field), or
the ``fields`` map. Bytes that are not UTF-8 are replaced (U+FFFD), never fatal.

Readers are pickled to Spark's Python workers: Redis clients are made inside each
method, never kept."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow

NAME = "redis_streams"
DEFAULT_URL = "redis://127.0.0.1:6379/0"
NOTHING = "0-0"  # the offset before a stream's first entry

# The count of entries after ARGV[1] up to ARGV[2] (inclusive, or "+"), at most
# ARGV[3], and the id of the last of them: only the count and one id leave Redis.
_NTH = """
local cursor, last, count, limit = '(' .. ARGV[1], false, 0, tonumber(ARGV[3])
while count < limit do
  local page = redis.call('XRANGE', KEYS[1], cursor, ARGV[2], 'COUNT', math.min(limit - count, 10000))
  if #page == 0 then break end
  count = count + #page
  last = page[#page][1]
  cursor = '(' .. last
end
return {count, last}
"""
# The ids that cut (ARGV[1], ARGV[2]] into pieces of ARGV[3] entries.
_CUTS = """
local cursor, cuts, step = '(' .. ARGV[1], {}, tonumber(ARGV[3])
while true do
  local page = redis.call('XRANGE', KEYS[1], cursor, ARGV[2], 'COUNT', step)
  if #page < step then break end
  local last = page[#page][1]
  if last == ARGV[2] then break end
  cuts[#cuts + 1] = last
  cursor = '(' .. last
end
return cuts
"""


def register(spark: Any) -> None:
    spark.dataSource.register(RedisStreamsDataSource)


def id_key(entry_id: str) -> tuple[int, int]:
    """An entry id as a tuple that orders like Redis orders ids."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class StreamRange(InputPartition):
    """Entries of ``stream`` after ``after`` up to ``until`` (inclusive)."""

    def __init__(self, stream: str, after: str, until: str) -> None:
        super().__init__((stream, after, until))
        self.stream, self.after, self.until = stream, after, until


class _Options:
    """The options, read once: Spark passes a case-insensitive map."""

    def __init__(self, options: Mapping[str, str]) -> None:
        def get(name: str, default: str | None = None) -> str | None:
            value = options.get(name)
            return default if value is None else value

        streams = get("streams")
        if not streams:
            raise ValueError("redis_streams: the 'streams' option is required (stream keys, comma-separated)")
        self.url = get("url", DEFAULT_URL)
        self.streams = [s.strip() for s in streams.split(",") if s.strip()]
        fields = get("fields")
        self.fields = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
        self.starting = get("startingOffsets", "earliest")
        self.ending = get("endingOffsets", "latest")
        self.max_entries = _positive(get("maxEntriesPerTrigger"), "maxEntriesPerTrigger")
        self.per_partition = _positive(get("entriesPerPartition", "50000"), "entriesPerPartition")
        self.page = _positive(get("pageSize", "5000"), "pageSize")
        self.progress_key = get("progressKey")
        self.arrow = (get("arrow", "true") or "true").lower() != "false"

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=30)

    def schema(self) -> str:
        columns = "stream string, id string, time timestamp"
        if self.fields is None:
            return columns + ", fields map<string, string>"
        return columns + "".join(f", `{name}` string" for name in self.fields)

    def offsets(self, spec: str, client: Any) -> dict[str, str]:
        """Offsets from ``earliest`` / ``latest`` / an id / JSON."""
        if spec == "earliest":
            return dict.fromkeys(self.streams, NOTHING)
        if spec == "latest":
            return {key: _last_id(client, key) for key in self.streams}
        if spec.lstrip().startswith("{"):
            given = json.loads(spec)
            return {key: str(given.get(key, NOTHING)) for key in self.streams}
        id_key(spec)  # a bad id fails here, with the option's value in the error
        return dict.fromkeys(self.streams, spec)


def _positive(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    number = int(value)
    if number <= 0:
        raise ValueError(f"redis_streams: {name} must be positive, not {value!r}")
    return number


def _last_id(client: Any, key: str) -> str:
    newest = client.xrevrange(key, "+", "-", count=1)
    return newest[0][0].decode() if newest else NOTHING


def _later(a: str, b: str) -> str:
    return a if id_key(a) >= id_key(b) else b


def _ranges(options: _Options, start: dict[str, str], end: dict[str, str]) -> list[StreamRange]:
    ranges: list[StreamRange] = []
    with options.client() as client:
        cut = client.register_script(_CUTS)
        for key in options.streams:
            after, until = start.get(key, NOTHING), end.get(key, NOTHING)
            if id_key(until) <= id_key(after):
                continue
            cuts = [c.decode() for c in cut(keys=[key], args=[after, until, options.per_partition])]
            bounds = [after, *cuts, until]
            ranges.extend(StreamRange(key, a, b) for a, b in zip(bounds, bounds[1:], strict=False))
    return ranges


def _read(options: _Options, part: InputPartition) -> Iterator[Any]:
    if not isinstance(part, StreamRange):
        return  # Spark's stand-in for "no partitions": nothing to read
    with options.client() as client:
        cursor = part.after
        while True:
            page = client.xrange(part.stream, f"({cursor}", part.until, count=options.page)
            if not page:
                return
            yield (_record_batch if options.arrow else _tuples)(options, part.stream, page)
            if len(page) < options.page:
                return
            cursor = page[-1][0].decode()


def _rows(options: _Options, part: InputPartition) -> Iterator[Any]:
    """What a reader's ``read`` yields: Arrow record batches, or the tuples one by one."""
    if options.arrow:
        yield from _read(options, part)
    else:
        for rows in _read(options, part):
            yield from rows


def _text(values: list[bytes | None]) -> Any:
    import pyarrow as pa

    try:
        return pa.array(values, type=pa.string())  # validates UTF-8 as it copies: 7x a binary array's cast
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in values], type=pa.string())


def _record_batch(options: _Options, stream: str, page: list) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = _text([entry_id for entry_id, _ in page])
    millis = pc.cast(pc.list_element(pc.split_pattern(ids, "-", max_splits=1), 0), pa.int64())
    columns = [
        pa.array([stream] * len(page), type=pa.string()), ids,
        pc.cast(pc.multiply(millis, 1000), pa.timestamp("us", tz="UTC")),
    ]
    names = ["stream", "id", "time"]
    if options.fields is None:
        pairs = [[(k.decode("utf-8", "replace"), v.decode("utf-8", "replace")) for k, v in fields.items()]
                 for _, fields in page]
        columns.append(pa.array(pairs, type=pa.map_(pa.string(), pa.string())))
        names.append("fields")
    else:
        for name in options.fields:
            wanted = name.encode()
            columns.append(_text([fields.get(wanted) for _, fields in page]))
            names.append(name)
    return pa.RecordBatch.from_arrays(columns, names=names)


def _tuples(options: _Options, stream: str, page: list) -> Iterator[tuple]:
    import datetime

    def text(value: bytes | None) -> str | None:
        return None if value is None else value.decode("utf-8", "replace")

    utc = datetime.UTC
    for raw_id, fields in page:
        entry_id = raw_id.decode()
        time = datetime.datetime.fromtimestamp(id_key(entry_id)[0] / 1000, utc)
        if options.fields is None:
            yield stream, entry_id, time, {text(k): text(v) for k, v in fields.items()}
        else:
            yield (stream, entry_id, time, *(text(fields.get(name.encode())) for name in options.fields))


class RedisStreamsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return _Options(self.options).schema()

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(self.options)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader(self.options)


class _BatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = _Options(options)

    def partitions(self) -> list[StreamRange]:
        with self.options.client() as client:
            start = self.options.offsets(self.options.starting, client)
            end = self.options.offsets(self.options.ending, client)
        return _ranges(self.options, start, end)

    def read(self, partition: StreamRange) -> Iterator[Any]:
        return _rows(self.options, partition)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = _Options(options)
        self.target: dict[str, str] | None = None  # availableNow: read up to here and no further

    def initialOffset(self) -> dict:
        with self.options.client() as client:
            return self.options.offsets(self.options.starting, client)

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        return ReadMaxRows(self.options.max_entries) if self.options.max_entries else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with self.options.client() as client:
            self.target = self.options.offsets("latest", client)

    def latestOffset(self, start: dict, limit: Any) -> dict:
        with self.options.client() as client:
            caps = self.target or {}
            max_rows = getattr(limit, "max_rows", None)
            if max_rows is None:
                return {key: _later(start.get(key, NOTHING),
                                    caps.get(key) or _last_id(client, key)) for key in self.options.streams}
            return self._limited(client, start, caps, max_rows)

    def _limited(self, client: Any, start: dict, caps: dict, max_rows: int) -> dict:
        nth = client.register_script(_NTH)

        def ahead(key: str, count: int) -> tuple[int, str]:
            after = start.get(key, NOTHING)
            found, last = nth(keys=[key], args=[after, caps.get(key, "+"), count])
            return int(found), last.decode() if last else after

        available = {key: ahead(key, max_rows) for key in self.options.streams}
        shares = fair_shares({key: count for key, (count, _) in available.items()}, max_rows)
        end = {}
        for key, (count, last) in available.items():
            share = shares[key]
            end[key] = last if share == count else ahead(key, share)[1] if share else start.get(key, NOTHING)
        return end

    def partitions(self, start: dict, end: dict) -> list[StreamRange]:
        return _ranges(self.options, start, end)

    def read(self, partition: StreamRange) -> Iterator[Any]:
        return _rows(self.options, partition)

    def commit(self, end: dict) -> None:
        if not self.options.progress_key or not end:
            return
        with self.options.client() as client:
            client.hset(self.options.progress_key, mapping=end)


def fair_shares(available: dict[str, int], limit: int) -> dict[str, int]:
    """Split ``limit`` entries between streams: each gets an equal share, and what a
    stream with fewer entries leaves goes to the others."""
    shares = dict.fromkeys(available, 0)
    left = limit
    waiting = sorted(available, key=available.__getitem__)
    while waiting and left > 0:
        share = left // len(waiting)
        key = waiting[0]
        if available[key] <= share or share == 0:
            take = min(available[key], max(share, 1), left)
            shares[key] = take
            left -= take
            waiting.pop(0)
            continue
        for key in waiting:
            shares[key] = share
        left -= share * len(waiting)
        for key in waiting[:left]:
            shares[key] += 1
        break
    return shares
