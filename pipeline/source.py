"""``redis_streams``: a Spark Python data source that reads Redis streams, batch
and streaming.

Offsets are entry ids, one per stream key, as JSON (``{"meshgate:events":
"1700000000000-3"}``): the last entry read, as XREAD takes it. Reads are
stateless XRANGEs between two offsets, paged, so any range can be read again
(Spark replays a micro-batch after a crash; nothing is consumed or deleted).
Large ranges are split into partitions of about ``entriesPerPartition`` entries,
cut at ids estimated from the stream's length and time span (counting exactly
would read every entry one more time).

Options (names are case-insensitive):

- ``url``: the Redis URL (default ``redis://127.0.0.1:6379/0``)
- ``streams``: stream keys, comma-separated (required)
- ``fields``: entry fields to give columns of their own (comma-separated); else one
  ``fields`` column, a map of every field
- ``startingOffsets``: ``earliest`` (default), ``latest``, an entry id, or a JSON
  object of key -> id; reading starts after the id
- ``endingOffsets`` (batch only): ``latest`` (default), an id or JSON; inclusive
- ``maxEntriesPerTrigger`` (streaming): entries per micro-batch at most, shared fairly
  between the streams and read in step: no stream's part of a micro-batch goes past
  the entry time (its id) where another stream's part stopped short of that stream's
  end, so that a small stream read to its end does not carry the event time (and a
  job's watermark) past what the others have delivered
- ``admission`` (streaming, with ``maxEntriesPerTrigger``): ``exact`` (default) counts
  the entries ahead in Redis, which reads each of them once more; ``estimate`` picks
  the batch's end time from the streams' lengths and the times of their ids, reading
  nothing: batches hold about the limit while the rate is steady (the last of a
  backlog up to 10% more, rather than leave a few for a batch of their own), and one
  that covers a burst holds more
- ``entriesPerPartition``: entries per Spark task, about (default 50,000)
- ``pageSize``: entries per XRANGE, and per Arrow batch (default 250: a page of
  the nodes' 4 KB snapshots is then a 1 MB reply; 1,000-entry pages cost Redis
  twice the CPU per entry)
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
import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow

NAME = "redis_streams"
DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_PAGE = 250  # entries per XRANGE: Redis's CPU per entry grows with the reply's size past ~1 MB
NOTHING = "0-0"  # the offset before a stream's first entry

# How many entries follow ARGV[1] up to ARGV[2] (inclusive, or "+"), at most
# ARGV[3], and the last one's id: only the count and one id leave Redis. Called a
# page at a time, so that Redis, which runs a script to its end, is never held long.
_PAGE_END = """
local page = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], ARGV[2], 'COUNT', ARGV[3])
if #page == 0 then return {0, false} end
return {#page, page[#page][1]}
"""
_SLACK = 0.1  # an estimated batch takes the rest when that is at most this much over the limit
_SCAN_PAGE = 200  # measured: a script handed 2,000 entries of 3.8 KB a call took twice as long per entry


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


class Options:
    """The options, read once: Spark passes a case-insensitive map."""

    def __init__(self, options: Mapping[str, str], streams: str | None = None) -> None:
        def get(name: str, default: str | None = None) -> str | None:
            value = options.get(name)
            return default if value is None else value

        streams = streams or get("streams")
        if not streams:
            raise ValueError("redis_streams: the 'streams' option is required (stream keys, comma-separated)")
        self.url = get("url", DEFAULT_URL)
        self.streams = [s.strip() for s in streams.split(",") if s.strip()]
        fields = get("fields")
        self.fields = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
        self.starting = get("startingOffsets", "earliest")
        self.ending = get("endingOffsets", "latest")
        self.max_entries = _positive(get("maxEntriesPerTrigger"), "maxEntriesPerTrigger")
        self.admission = (get("admission", "exact") or "exact").lower()
        if self.admission not in ("exact", "estimate"):
            raise ValueError(f"redis_streams: admission must be 'exact' or 'estimate', not {self.admission!r}")
        self.per_partition = _positive(get("entriesPerPartition", "50000"), "entriesPerPartition")
        self.page = _positive(get("pageSize", str(DEFAULT_PAGE)), "pageSize")
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


def later(a: str, b: str) -> str:
    return a if id_key(a) >= id_key(b) else b


def ranges(options: Options, start: dict[str, str], end: dict[str, str]) -> list[StreamRange]:
    found: list[StreamRange] = []
    with options.client() as client:
        for key in options.streams:
            after, until = start.get(key, NOTHING), end.get(key, NOTHING)
            if id_key(until) <= id_key(after):
                continue
            bounds = [after, *_cuts(client, key, after, until, options.per_partition), until]
            found.extend(StreamRange(key, a, b) for a, b in zip(bounds, bounds[1:], strict=False))
    return found


def _cuts(client: Any, key: str, after: str, until: str, per_partition: int) -> list[str]:
    """Ids that cut (after, until] into pieces of about ``per_partition`` entries,
    estimated from the stream's length and the times of its first and last entries:
    counting the entries exactly would read them all once more. A burst makes some
    pieces larger than others; every entry is still read once."""
    pipe = client.pipeline(transaction=False)
    pipe.xlen(key)
    pipe.xrange(key, "-", "+", count=1)
    pipe.xrevrange(key, "+", "-", count=1)
    length, oldest, newest = pipe.execute()
    if not length:
        return []
    first_ms, last_ms = id_key(oldest[0][0].decode())[0], id_key(newest[0][0].decode())[0]
    low, high = max(id_key(after)[0], first_ms), min(id_key(until)[0], last_ms)
    if high <= low:
        return []
    estimate = length * (high - low) / (last_ms - first_ms)  # last_ms > first_ms, as high > low
    pieces = min(math.ceil(estimate / per_partition), high - low)  # at most one cut a millisecond
    # "ms-0" ends a piece with the entries of ms's sequence 0; the next starts after it.
    return [f"{low + (high - low) * piece // pieces}-0" for piece in range(1, pieces)]


def pages(options: Options, part: InputPartition) -> Iterator[list]:
    """The partition's entries a page (``pageSize`` entries) at a time, as Redis
    sends them: ``[id, [field, value, …]]`` (redis-py's dict per entry cost more
    than the read itself)."""
    if not isinstance(part, StreamRange):
        return  # Spark's stand-in for "no partitions": nothing to read
    with options.client() as client:
        client.set_response_callback("XRANGE", _as_sent)
        cursor = part.after
        while True:
            page = client.xrange(part.stream, f"({cursor}", part.until, count=options.page)
            if not page:
                return
            yield page
            if len(page) < options.page:
                return
            cursor = page[-1][0].decode()


def _read(options: Options, part: InputPartition) -> Iterator[Any]:
    for page in pages(options, part):
        yield (_record_batch if options.arrow else _tuples)(options, part.stream, page)


def _as_sent(response: Any, **_: Any) -> Any:
    return response


def values(flats: list[list[bytes]], name: bytes) -> list[bytes | None]:
    """Field ``name``'s value in each entry (``flats``: field, value, field, value…),
    None where an entry lacks it. A stream's entries are written alike, so the
    position the field has in the first entry is tried first."""
    first = flats[0]
    at = next((i for i in range(0, len(first) - 1, 2) if first[i] == name), None)
    if at is None:
        return [find_value(flat, name) for flat in flats]
    return [flat[at + 1] if len(flat) > at + 1 and flat[at] == name else find_value(flat, name) for flat in flats]


def find_value(flat: list[bytes], name: bytes) -> bytes | None:
    for i in range(0, len(flat) - 1, 2):
        if flat[i] == name:
            return flat[i + 1]
    return None


def _rows(options: Options, part: InputPartition) -> Iterator[Any]:
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


def _record_batch(options: Options, stream: str, page: list) -> Any:
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
        pairs = [[(flat[i].decode("utf-8", "replace"), flat[i + 1].decode("utf-8", "replace"))
                  for i in range(0, len(flat) - 1, 2)] for _, flat in page]
        columns.append(pa.array(pairs, type=pa.map_(pa.string(), pa.string())))
        names.append("fields")
    else:
        flats = [flat for _, flat in page]
        for name in options.fields:
            columns.append(_text(values(flats, name.encode())))
            names.append(name)
    return pa.RecordBatch.from_arrays(columns, names=names)


def _tuples(options: Options, stream: str, page: list) -> Iterator[tuple]:
    import datetime

    def text(value: bytes | None) -> str | None:
        return None if value is None else value.decode("utf-8", "replace")

    utc = datetime.UTC
    for raw_id, flat in page:
        entry_id = raw_id.decode()
        time = datetime.datetime.fromtimestamp(id_key(entry_id)[0] / 1000, utc)
        if options.fields is None:
            yield stream, entry_id, time, {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
        else:
            yield (stream, entry_id, time, *(text(find_value(flat, name.encode())) for name in options.fields))


class RedisStreamsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return Options(self.options).schema()

    def reader(self, schema: Any) -> DataSourceReader:
        return BatchReader(Options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return StreamReader(Options(self.options))


class BatchReader(DataSourceReader):
    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> list[StreamRange]:
        with self.options.client() as client:
            start = self.options.offsets(self.options.starting, client)
            end = self.options.offsets(self.options.ending, client)
        return ranges(self.options, start, end)

    def read(self, partition: StreamRange) -> Iterator[Any]:
        return _rows(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options) -> None:
        self.options = options
        self.target: dict[str, str] | None = None  # availableNow: read up to here and no further
        self.positions: dict[str, tuple[str, int]] = {}  # stream -> (an id, entries added up to it)

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
                return {key: later(start.get(key, NOTHING),
                                    caps.get(key) or _last_id(client, key)) for key in self.options.streams}
            return self._limited(client, start, caps, max_rows)

    def _limited(self, client: Any, start: dict, caps: dict, max_rows: int) -> dict:
        infos = _infos(client, self.options.streams)
        ahead = None if caps else self._known_ahead(start, infos)
        if sum(info.length for info in infos.values()) <= max_rows or (ahead is not None and ahead <= max_rows):
            # Everything the streams hold fits, or what came since the last batch does: nothing to count.
            end = _at_ends(start, caps, infos)
            self._remember(end, infos, caps)
            return end
        if self.options.admission == "estimate":
            end = _estimated_end(client, start, caps, infos, max_rows)
            if end is not None:
                self._remember(end, infos, caps)
                return end

        scans = {key: _Scan(client, key, start.get(key, NOTHING), caps.get(key, "+"), max_rows)
                 for key in self.options.streams}
        shares = fair_shares({key: scan.found for key, scan in scans.items()}, max_rows)
        end = {key: scan.id_at(shares[key]) for key, scan in scans.items()}
        # Streams with entries left for later; one given no share (a limit below the number
        # of streams) sets no bound, else no stream might move at all.
        cut_short = [id_key(end[key])[0] for key, scan in scans.items()
                     if shares[key] and (shares[key] < scan.found or scan.found >= max_rows)]
        if cut_short:
            until_ms = min(cut_short)
            for key in end:
                if id_key(end[key])[0] > until_ms:
                    end[key] = _last_until(client, key, start.get(key, NOTHING), until_ms)
        self._remember(end, infos, caps)
        return end

    def _known_ahead(self, start: dict, infos: dict[str, _Info]) -> int | None:
        """How many entries follow ``start``, if this reader knows how many had been
        added up to it (it ended the last batch there): the streams' own count of
        entries ever added, minus that. None if not known."""
        ahead = 0
        for key, info in infos.items():
            known = self.positions.get(key)
            if info.added is None or known is None or known[0] != start.get(key, NOTHING):
                return None
            ahead += info.added - known[1]
        return ahead

    def _remember(self, end: dict, infos: dict[str, _Info], caps: dict) -> None:
        """Where an end is a stream's last entry, how many entries had been added up to
        it (as of the same XINFO): the next batch, starting there, need not count."""
        self.positions = {key: (end[key], info.added) for key, info in infos.items()
                          if not caps and info.added is not None and end.get(key) == info.last_id}

    def partitions(self, start: dict, end: dict) -> list[StreamRange]:
        return ranges(self.options, start, end)

    def read(self, partition: StreamRange) -> Iterator[Any]:
        return _rows(self.options, partition)

    def commit(self, end: dict) -> None:
        if not self.options.progress_key or not end:
            return
        with self.options.client() as client:
            client.hset(self.options.progress_key, mapping=end)


class _Info(NamedTuple):
    length: int
    first_id: str
    last_id: str
    added: int | None  # entries ever added (Redis 7)


def _infos(client: Any, keys: list[str]) -> dict[str, _Info]:
    """XINFO STREAM of each stream (a stream not there yet: empty)."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.xinfo_stream(key)
    found = {}
    for key, info in zip(keys, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(info, Exception):
            found[key] = _Info(0, NOTHING, NOTHING, None)
            continue
        last = info.get("last-generated-id") or NOTHING
        first = (info.get("first-entry") or (NOTHING,))[0]
        found[key] = _Info(int(info.get("length", 0)), first.decode() if isinstance(first, bytes) else str(first),
                           last.decode() if isinstance(last, bytes) else str(last), info.get("entries-added"))
    return found


def _at_ends(start: dict, caps: dict, infos: dict[str, _Info]) -> dict[str, str]:
    """Each stream's last entry (or its cap, availableNow's), never before its start."""
    return {key: later(start.get(key, NOTHING), caps.get(key) or info.last_id) for key, info in infos.items()}


def _estimated_end(client: Any, start: dict, caps: dict, infos: dict[str, _Info], max_rows: int) -> dict | None:
    """The end of a batch of about ``max_rows`` entries, with no entry read: one entry
    time for every stream (so they stay in step), the latest at which the entries
    ahead, taken as spread evenly between each stream's start and its last entry
    (the stream's length times the share of its time span that is ahead), add up to
    no more than ``max_rows``. None when the estimate would not move any stream
    (everything ahead stamped within a millisecond or two): counting decides then."""
    spans = []  # (from ms, to ms, entries ahead)
    ends = _at_ends(start, caps, infos)
    for key, info in infos.items():
        after, last = start.get(key, NOTHING), ends[key]
        if not info.length or id_key(last) <= id_key(after):
            continue
        first_ms, after_ms, last_ms = id_key(info.first_id)[0], id_key(after)[0], id_key(last)[0]
        span = id_key(info.last_id)[0] - first_ms
        begin = max(after_ms, first_ms)
        ahead = info.length if not span else info.length * max(last_ms - begin, 0) / span
        spans.append((begin, last_ms, ahead))
    if not spans:
        return None
    if sum(ahead for _, _, ahead in spans) <= max_rows * (1 + _SLACK):  # no batch of a few left for last
        return ends

    def ahead_until(ms: int) -> float:
        return sum(ahead if ms >= to else ahead * max(ms - begin, 0) / (to - begin) for begin, to, ahead in spans)

    low, high = min(begin for begin, _, _ in spans), max(to for _, to, _ in spans)
    while low < high:  # the latest ms with at most max_rows ahead
        middle = (low + high + 1) // 2
        if ahead_until(middle) <= max_rows:
            low = middle
        else:
            high = middle - 1
    end = {}
    for key, last in ends.items():
        after = start.get(key, NOTHING)
        end[key] = last if id_key(last)[0] <= low else later(after, _last_until(client, key, after, low))
    return end if any(end[key] != start.get(key, NOTHING) for key in end) else None


def _last_until(client: Any, key: str, after: str, until_ms: int) -> str:
    """The id of the last entry after ``after`` stamped ``until_ms`` or earlier
    (``after`` when there is none)."""
    found = client.xrevrange(key, str(until_ms), f"({after}", count=1)
    return found[0][0].decode() if found else after


class _Scan:
    """How many entries follow ``after`` up to ``until``, at most ``count`` (``found``),
    counted a page at a time in Redis; the page ends are kept, so that the id of any
    entry among them (``id_at``) is found again by scanning at most a page."""

    def __init__(self, client: Any, key: str, after: str, until: str, count: int) -> None:
        self.client, self.key, self.until = client, key, until
        self.marks = [(0, after)]  # (entries counted, the id of the last of them)
        self.found = self._count(after, count)[0]

    def _count(self, after: str, count: int, mark: bool = True) -> tuple[int, str]:
        page_end = self.client.register_script(_PAGE_END)
        found, last = 0, after
        while found < count:
            size = min(count - found, _SCAN_PAGE)
            counted, page_last = page_end(keys=[self.key], args=[last, self.until, size])
            if not counted:
                break
            found, last = found + int(counted), page_last.decode()
            if mark:
                self.marks.append((found, last))
            if counted < size:
                break
        return found, last

    def id_at(self, position: int) -> str:
        """The id of the ``position``-th entry after ``after`` (``after`` for 0)."""
        counted, last = max((mark for mark in self.marks if mark[0] <= position), key=lambda mark: mark[0])
        return last if counted == position else self._count(last, position - counted, mark=False)[1]


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
