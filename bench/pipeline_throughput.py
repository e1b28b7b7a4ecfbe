"""The metrics pipeline's throughput and freshness on this machine, beside the
physical limit (what Redis itself serves of the same entries).

Snapshots as nodes write them (the model's ``Snapshot``: the node, 3 links and
--queues partial queues with counters and latency histograms, ~4 KB of JSON) and
events (--event-share of the entries), written into a redis-server of its own;
then, on one ``local[2]`` Spark session:

1. **XRANGE**: redis-py reading the backlog paged like the reader (its default
   ``pageSize``), one connection, and two at once (one per stream half): the limit.
2. **batch reader**: ``spark.read.format("redis_streams")`` over the backlog, a
   ``count()`` with ``arrow`` true and false (target ≥ 100,000/s); and the job's
   own input, ``meshgate_partials`` (decoding and reducing as it reads), merged
   (``transform.merged``) and collected to the driver as the job does.
3. **streaming job, backlog**: the job (``pipeline.job.start_query``,
   ``availableNow``, warmed up on a small backlog first) applying the whole backlog
   to fresh rollups: entries/s from the ``PipelineStatus``, over the whole run and
   in steady state (the batches after the first over their triggers' time, each
   trigger holding Spark's work on its batch and the wait for the batch before's
   rollups: what a job that runs for days sustains), and where each micro-batch's time went
   (Spark's progress; the driver's ``Rollups.apply`` and its Redis transaction,
   timed by wrapping them). Target ≥ 50,000/s.
4. **streaming job, live**: a producer process XADDing at each --rates rate (the
   --nodes nodes, snapshot interval nodes/rate) while the job runs at a 1 s
   trigger: whether it keeps up (the lag, in entries and seconds, at the end and
   at its worst). A prober process meanwhile writes a snapshot of its own node
   every ~1 s and polls its 10-second rollup until it shows it: freshness, from
   XADD to the rollup in Redis, p50 / p95 (target p95 ≤ 2 s).

    .venv/bin/python bench/pipeline_throughput.py [--entries 200000] [--nodes 100]
        [--queues 10] [--event-share 0.05] [--repeat 3] [--rates 100,25000,50000]
        [--seconds 30] [--skip xrange,batch,backlog,live]
    .venv/bin/python bench/pipeline_throughput.py --quick     # ~2 minutes: 30,000 entries, 10 s runs

Prints a markdown table for docs/performance.md. Needs redis-server (Debian) and
the pipeline extra (pyspark, pyarrow; Java 17+). Everything — Redis, Spark's JVM,
its Python workers, the driver and the producer — shares this machine's cores."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from meshgate.redis_server import RedisServer  # noqa: E402
from metrics.reporter import snapshot_fields  # noqa: E402
from model import latency  # noqa: E402
from model.events import ConsumerAttached, DeadLetter, LinkUp  # noqa: E402
from model.mesh import SCHEMA_VERSION, WINDOW_S, Addresses, Link, Node, PartialQueue, Snapshot  # noqa: E402
from model.rollups import PipelineStatus, QueueWindow, queue_field, status_key, window_key  # noqa: E402
from pipeline.source import DEFAULT_PAGE  # noqa: E402

PAGE = DEFAULT_PAGE  # the limit measured with the readers' own page

# -- traffic --------------------------------------------------------------------------------------


def resp(*args: bytes) -> bytes:
    """One Redis command in the wire protocol."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Wire:
    """A bare pipelining Redis connection for the writers: commands out in chunks,
    replies counted (and errors raised), so that writing costs the producer a few µs
    an entry, not redis-py's ~15."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def call(self, commands: list[bytes]) -> None:
        self.sock.sendall(b"".join(commands))
        pending, position = len(commands), 0
        while pending:
            end = self.buffer.find(b"\r\n", position)
            if end < 0:
                self.buffer = self.buffer[position:] + self.sock.recv(1 << 20)
                position = 0
                continue
            kind = self.buffer[position:position + 1]
            if kind == b"-":
                raise RuntimeError(self.buffer[position:end].decode())
            if kind == b"$":
                size = int(self.buffer[position + 1:end])
                if size >= 0:
                    if len(self.buffer) < end + 2 + size + 2:
                        self.buffer = self.buffer[position:] + self.sock.recv(1 << 20)
                        position = 0
                        continue
                    end += size + 2
            position = end + 2
            pending -= 1
        self.buffer = self.buffer[position:]

    def close(self) -> None:
        self.sock.close()


class Traffic:
    """``nodes`` nodes, each with ``queues`` partial queues whose counters,
    depths and latency histograms move as a node's would; ``entries(t)`` gives the
    XADD commands of one snapshot round at time ``t`` (every node once), with
    events for about ``event_share`` of the entries."""

    def __init__(self, prefix: str, nodes: int, queues: int, event_share: float, started: float,
                 seed: int = 1, moving: int | None = None, name: str = "node") -> None:
        self.random = random.Random(seed)
        self.snapshots_key = f"{prefix}:snapshots".encode()
        self.events_key = f"{prefix}:events".encode()
        self.event_share = event_share
        self.moving = moving  # partial queues changing per snapshot (None: all)
        self.encode = msgspec.json.Encoder().encode
        self.nodes: list[Snapshot] = []
        ids = [str(uuid.UUID(int=self.random.getrandbits(128))) for _ in range(nodes)]
        for index, node_id in enumerate(ids):
            peers = [ids[(index + step) % nodes] for step in (1, -1, 7) if nodes > 1]
            links = [Link(node=node_id, peer=peer, peer_name=f"{name}{ids.index(peer):03d}", direction="duplex",
                          dialled=True, state="up", since=started) for peer in dict.fromkeys(peers)]
            partials = [PartialQueue(node=node_id, name=f"queue.{q:02d}", depth=self.random.randint(0, 50),
                                     in_flight=0, consumers=self.random.randint(0, 3)) for q in range(queues)]
            node = Node(id=node_id, name=f"{name}{index:03d}", version="bench", started_at=started,
                        last_seen=started, addresses=Addresses(stomp=f"10.0.0.{index % 250}:61613",
                                                               link=f"10.0.0.{index % 250}:61700"))
            self.nodes.append(Snapshot(seq=0, taken_at=started, node=node, links=links, queues=partials))
        self.published = 0  # messages sent by clients, as the rollups should count them

    def snapshot(self, snapshot: Snapshot, t: float) -> bytes:
        rng = self.random
        snapshot.seq += 1
        new_window = t // WINDOW_S != snapshot.taken_at // WINDOW_S
        snapshot.taken_at = snapshot.node.last_seen = t
        if new_window:  # as a node does: the window's deepest depth starts afresh
            for partial in snapshot.queues:
                partial.window_depth_max = partial.depth
        partials = snapshot.queues if self.moving is None else rng.sample(snapshot.queues, self.moving)
        for partial in partials:
            sent = rng.randint(0, 40)
            partial.enqueued += sent
            self.published += sent
            done = min(partial.depth + sent, rng.randint(0, 45))
            partial.acked += done
            partial.depth += sent - done
            partial.in_flight = rng.randint(0, 5)
            if done:
                histogram = latency.padded(partial.latency)
                micros = rng.choice((800, 3000, 12_000, 90_000))
                histogram[latency.bucket_of(micros)] += done
                partial.latency = latency.trimmed(histogram)
                partial.latency_sum_ms += done * micros / 1000
            partial.window_depth_max = max(partial.window_depth_max, partial.depth)
        fields = snapshot_fields(snapshot, self.encode(snapshot))
        return resp(b"XADD", self.snapshots_key, b"*",
                    *(part if isinstance(part, bytes) else str(part).encode() for pair in fields.items()
                      for part in pair))

    def event(self, snapshot: Snapshot, t: float) -> bytes:
        node = snapshot.node.id
        kind = self.random.randrange(3)
        if kind == 0:
            event = LinkUp(time=t, node=node, peer="p", peer_name="p", dialled=True)
        elif kind == 1:
            event = DeadLetter(time=t, node=node, queue="queue.00", reason="expired", dead_letter_queue="DLQ",
                               count=1)
        else:
            event = ConsumerAttached(time=t, node=node, destination="/queue/queue.01", connection="c1",
                                     consumers=2)
        return resp(b"XADD", self.events_key, b"*", b"node", node.encode(), b"kind",
                    event.__struct_config__.tag.encode(), b"schema", b"%d" % SCHEMA_VERSION, b"data",
                    self.encode(event))

    def entries(self, t: float, nodes: list[Snapshot] | None = None) -> list[bytes]:
        commands = []
        for snapshot in self.nodes if nodes is None else nodes:
            commands.append(self.snapshot(snapshot, t))
            if self.random.random() < self.event_share / (1 - self.event_share):
                commands.append(self.event(snapshot, t + 0.01))
        return commands


def fill_backlog(host: str, port: int, prefix: str, entries: int, nodes: int, queues: int,
                 event_share: float) -> tuple[int, int, float, Traffic]:
    """``entries`` entries: one snapshot of every node a second (of event time,
    ending a minute ago), and events. Returns (entries, bytes, seconds of event time, traffic)."""
    rounds = max(1, round(entries * (1 - event_share) / nodes))
    base = float(int(time.time()) - rounds - 60)
    traffic = Traffic(prefix, nodes, queues, event_share, started=base - 1)
    wire = Wire(host, port)
    written = size = 0
    for tick in range(rounds):
        commands = traffic.entries(base + tick + 0.25)
        wire.call(commands)
        written += len(commands)
        size += sum(map(len, commands))
    wire.close()
    return written, size, float(rounds), traffic


# -- 1. XRANGE: the physical limit ---------------------------------------------------------------


def xrange_all(url: str, stream: str, after: str = "-", until: str = "+") -> int:
    client = redis.Redis.from_url(url)
    count, cursor = 0, after
    while True:
        page = client.xrange(stream, cursor, until, count=PAGE)
        count += len(page)
        if len(page) < PAGE:
            break
        cursor = "(" + page[-1][0].decode()
    client.close()
    return count


def _xrange_worker(url: str, stream: str, after: str, until: str, queue: Any) -> None:
    queue.put(xrange_all(url, stream, after, until))


def xrange_rate(url: str, streams: list[str], repeat: int) -> tuple[float, float]:
    """Entries/s reading every stream through, one connection; and with the entries
    split in two halves read by two processes at once (as local[2]'s two tasks do)."""
    client = redis.Redis.from_url(url)
    total = sum(client.xlen(s) for s in streams)
    # The halves: the snapshots stream cut at its middle entry; events go with the first half.
    big = max(streams, key=client.xlen)
    middle = client.xrange(big, "-", "+", count=client.xlen(big) // 2)[-1][0].decode()
    client.close()
    one, two = [], []
    context = multiprocessing.get_context("spawn")
    for _ in range(repeat):
        began = time.perf_counter()
        assert sum(xrange_all(url, s) for s in streams) == total
        one.append(total / (time.perf_counter() - began))
        queue = context.Queue()
        halves = [(big, "-", middle), (big, "(" + middle, "+")] + [(s, "-", "+") for s in streams if s != big]
        workers = [context.Process(target=_xrange_worker, args=(url, *half, queue)) for half in halves]
        began = time.perf_counter()
        for worker in workers:
            worker.start()
        counted = sum(queue.get() for _ in workers)
        elapsed = time.perf_counter() - began
        for worker in workers:
            worker.join()
        assert counted == total
        two.append(total / elapsed)
    return max(one), max(two)


# -- 2. the batch reader -------------------------------------------------------------------------


def batch_reader(spark: Any, url: str, prefix: str, arrow: bool, full: bool) -> int:
    from pipeline import transform

    if not full:
        return (spark.read.format("redis_streams").option("url", url)
                .option("streams", f"{prefix}:snapshots,{prefix}:events").option("fields", "node,kind,data")
                .option("arrow", "true" if arrow else "false").load()).count()
    parts = (spark.read.format("meshgate_partials").option("url", url).option("prefix", prefix)
             .option("packed", "true").load())
    return transform.collect(transform.unpacked(parts.toArrow()), 0.0).entries


def batch_rates(spark: Any, url: str, prefix: str, total: int, repeat: int) -> dict[tuple[str, bool], float]:
    batch_reader(spark, url, prefix, True, False)  # warm up: the Python workers, the JIT
    rates: dict[tuple[str, bool], list[float]] = {}
    for _ in range(repeat):
        for mode, arrow in (("count", True), ("count", False), ("parse", True)):
            began = time.perf_counter()
            counted = batch_reader(spark, url, prefix, arrow, mode == "parse")
            elapsed = time.perf_counter() - began
            assert counted == total, (mode, arrow, counted, total)
            rates.setdefault((mode, arrow), []).append(total / elapsed)
    return {key: statistics.median(values) for key, values in rates.items()}


# -- 3. the streaming job ------------------------------------------------------------------------


class Timings:
    """Seconds spent per micro-batch (by id) in the foreachBatch function (the Spark
    jobs: the rollups are applied on another thread, overlapping the next batch's),
    in the driver's Rollups.apply and in its Redis transaction (Rollups._write)."""

    def __init__(self) -> None:
        self.by_id: dict[int, dict[str, float]] = {}

    @property
    def batches(self) -> list[dict[str, float]]:
        return [self.by_id[key] for key in sorted(self.by_id)]

    def instrument(self, batches: Any) -> None:
        rollups = batches.rollups
        apply, write = rollups.apply, rollups._write
        applying: dict[str, int] = {}
        by_id = self.by_id

        def timed_apply(pipeline: str, batch: int, *args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            applying["id"] = batch
            timings = by_id.setdefault(batch, {"id": batch})
            try:
                applied = apply(pipeline, batch, *args, **kwargs)
                timings["entries"] = applied.batch_entries
                return applied
            finally:
                timings["apply"] = time.perf_counter() - began

        def timed_write(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return write(*args, **kwargs)
            finally:
                by_id.setdefault(applying["id"], {})["write"] = time.perf_counter() - began

        rollups.apply, rollups._write = timed_apply, timed_write
        call = batches.__class__.__call__

        class Timed(batches.__class__):
            def __call__(self, entries: Any, batch: int) -> None:
                began = time.perf_counter()
                call(self, entries, batch)
                by_id.setdefault(batch, {"id": batch})["batch"] = time.perf_counter() - began

        batches.__class__ = Timed


def job(spark: Any, url: str, prefix: str, checkpoint: str, available_now: bool, max_entries: int = 200_000
        ) -> tuple[Any, Timings, Any]:
    from pipeline.job import JobOptions, RollupBatches, start_query

    options = JobOptions(redis_url=url, prefix=prefix, checkpoint=checkpoint, trigger_s=1.0,
                         available_now=available_now, max_entries=max_entries)
    batches = RollupBatches(spark, options)
    timings = Timings()
    timings.instrument(batches)
    return start_query(spark, options, batches), timings, batches


def status(client: redis.Redis, prefix: str) -> PipelineStatus | None:
    raw = client.get(status_key(prefix))
    return msgspec.json.decode(raw, type=PipelineStatus) if raw else None


def published(client: redis.Redis, prefix: str) -> int:
    """Messages published, summed over the 1-minute windows' cluster totals."""
    total = 0
    for start in client.zrange(f"{prefix}:rollup:1m:index", 0, -1):
        raw = client.hget(f"{prefix}:rollup:1m:{int(start)}", "cluster")
        total += msgspec.json.decode(raw)["total"].get("published", 0)
    return total


def backlog_run(spark: Any, url: str, prefix: str, work: Path, total: int, batch_entries: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    query, timings, batches = job(spark, url, prefix, str(work / f"checkpoint-{prefix}"), available_now=True,
                                  max_entries=batch_entries)
    began = time.perf_counter()
    query.awaitTermination()
    batches.close()  # the last batch's rollups are written
    ended = time.perf_counter()
    applied = status(client, prefix)
    progress = [p for p in query.recentProgress if p.numInputRows]
    client.close()
    assert applied is not None and applied.entries == total, (applied, total)
    # Steady state: the batches after the first over their triggers' time. The triggers
    # follow each other, and trigger k holds Spark's work on batch k and the wait for batch
    # k-1's rollups: every batch's work once (the query's start and its first batch, paid
    # once by a job that runs for days, left out).
    entries = {t["id"]: t.get("entries", 0) for t in timings.batches}  # (Spark's rows: one per task, packed)
    later = [p for p in progress if p.batchId >= 1]
    steady = (sum(entries.get(p.batchId, 0) for p in later) / (sum(p.durationMs["triggerExecution"] for p in later)
                                                               / 1000) if later else None)
    return {"seconds": ended - began, "entries": applied.entries, "rate": applied.entries / (ended - began),
            "steady": steady, "progress": progress, "timings": timings.batches, "status": applied}


# -- 4. live: a producer at a fixed rate, a prober -----------------------------------------------


def produce(host: str, port: int, prefix: str, rate: float, seconds: float, nodes: int, queues: int,
            event_share: float, counter: Any, cpu: Any) -> None:
    """XADD ``rate`` entries a second for ``seconds``, in 10 ms steps; each node's
    snapshot interval is nodes / rate."""
    traffic = Traffic(prefix, nodes, queues, event_share, started=time.time(), seed=2, moving=3)
    wire = Wire(host, port)
    began = time.monotonic()
    sent, turn = 0, 0
    while (now := time.monotonic()) < began + seconds:
        # At most 50 ms worth at a time: a producer that cannot keep the rate stops at
        # ``seconds`` (and says how much it made) instead of catching up past it.
        due = min(int((now - began) * rate * (1 - event_share)) - sent, max(1, int(rate * (1 - event_share) / 20)))
        if due > 0:
            chosen = [traffic.nodes[(turn + i) % nodes] for i in range(due)]
            turn = (turn + due) % nodes
            commands = traffic.entries(time.time(), chosen)
            wire.call(commands)
            sent += due
            with counter.get_lock():
                counter.value += len(commands)
        time.sleep(max(0.0, 0.01 - (time.monotonic() - now)))
    wire.close()
    cpu.value = sum(os.times()[:2])


def probe(host: str, port: int, prefix: str, seconds: float, counter: Any, results: Any) -> None:
    """Every 0.5–1.5 s (not in step with the trigger), a snapshot of node "probe",
    then HGET its 10-second queue rollup every 5 ms until it holds that snapshot."""
    traffic = Traffic(prefix, 1, 1, 0.0, started=time.time(), seed=3, name="probe")
    snapshot = traffic.nodes[0]
    snapshot.queues[0].name = "probe"
    snapshot.queues[0].consumers = 1
    client, wire = redis.Redis(host=host, port=port), Wire(host, port)
    rng = random.Random(4)
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        time.sleep(rng.uniform(0.5, 1.5))
        t = time.time()
        wire.call([traffic.snapshot(snapshot, t)])
        with counter.get_lock():
            counter.value += 1
        key, field = window_key(prefix, "10s", int(t // 10) * 10), queue_field("probe")
        while time.monotonic() < ends + 30:
            raw = client.hget(key, field)
            if raw:
                partial = msgspec.json.decode(raw, type=QueueWindow).nodes.get(snapshot.node.id)
                if partial is not None and partial.at >= t:
                    results.put(time.time() - t)
                    break
            time.sleep(0.005)
    client.close()
    wire.close()
    results.put(None)


def live_run(spark: Any, host: str, port: int, prefix: str, work: Path, rate: float, seconds: float, nodes: int,
             queues: int, event_share: float) -> dict[str, Any]:
    url = f"redis://{host}:{port}/0"
    client = redis.Redis.from_url(url)
    context = multiprocessing.get_context("spawn")
    counter, cpu, results = context.Value("q", 0), context.Value("d", 0.0), context.Queue()
    producer = context.Process(target=produce, args=(host, port, prefix, rate, seconds, nodes, queues,
                                                     event_share, counter, cpu))
    prober = context.Process(target=probe, args=(host, port, prefix, seconds, counter, results))
    # One entry first, so the query is planned and running before the clock starts.
    traffic = Traffic(prefix, 1, 1, 0.0, started=time.time(), seed=5, name="warm")
    Wire(host, port).call(traffic.entries(time.time()))
    query, timings, batches = job(spark, url, prefix, str(work / f"checkpoint-{prefix}"), available_now=False)
    while status(client, prefix) is None:
        time.sleep(0.1)
    before = status(client, prefix).entries
    skip = len(timings.batches)
    producer.start()
    prober.start()
    began = time.monotonic()
    samples = []  # (seconds since start, produced, applied)
    while producer.is_alive() or time.monotonic() - began < 1:
        time.sleep(1.0)
        applied = status(client, prefix).entries - before
        samples.append((time.monotonic() - began, counter.value, applied))
    producer.join()
    produced = counter.value
    drained = None
    while time.monotonic() - began < seconds + 60:
        if status(client, prefix).entries - before >= produced:
            drained = time.monotonic() - began - seconds
            break
        time.sleep(0.05)
    prober.join()
    fresh = [value for value in iter(results.get, None)]
    query.stop()
    batches.close()
    client.close()
    tail = [s for s in samples if s[0] >= min(5.0, seconds / 3)]  # after the first seconds' start-up
    applied_rate = ((tail[-1][2] - tail[0][2]) / (tail[-1][0] - tail[0][0])) if len(tail) > 1 else 0.0
    lags = [(p - a) / max(rate, 1) for _, p, a in tail]  # seconds of production not yet applied
    applied_batches = timings.batches[skip:]
    return {"rate": rate, "produced": produced, "seconds": seconds, "applied_rate": applied_rate,
            "lag_end": lags[-1] if lags else 0.0, "lag_max": max(lags, default=0.0), "drained": drained,
            "producer_cpu": cpu.value / seconds, "fresh": fresh,
            "batch_median": statistics.median([b.get("batch", 0.0) + b.get("apply", 0.0)
                                               for b in applied_batches]) if applied_batches else 0.0,
            "batches": len(applied_batches)}


# -- the report -----------------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def breakdown(backlog: dict[str, Any]) -> list[str]:
    """Where the backlog's micro-batches spent their time."""
    progress, timings = backlog["progress"], backlog["timings"]
    lines = []
    by_id = {t["id"]: t for t in timings}
    for p in progress:
        d, t = p.durationMs, by_id.get(p.batchId, {"batch": 0.0})
        spark_part = t.get("batch", 0.0)
        lines.append(f"| {p.batchId} | {t.get('entries', 0):,} | {d.get('triggerExecution', 0) / 1000:.2f} | "
                     f"{d.get('latestOffset', 0) / 1000:.2f} | {(d.get('getBatch', 0) + d.get('queryPlanning', 0) + d.get('walCommit', 0) + d.get('commitOffsets', 0)) / 1000:.2f} | "  # noqa: E501
                     f"{spark_part:.2f} | {t.get('apply', 0) - t.get('write', 0):.2f} | {t.get('write', 0):.2f} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=200_000, help="backlog entries (snapshots and events)")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--queues", type=int, default=10, help="partial queues per node")
    parser.add_argument("--event-share", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=3, help="runs of the XRANGE and batch-reader measures")
    parser.add_argument("--rates", default="100,25000,50000", help="live producer rates, entries/s")
    parser.add_argument("--seconds", type=float, default=30.0, help="each live run's producing time")
    parser.add_argument("--batch-entries", type=int, default=200_000,
                        help="the backlog job's entries per micro-batch (maxEntriesPerTrigger)")
    parser.add_argument("--skip", default="", help="comma-separated: xrange, batch, backlog, live")
    parser.add_argument("--quick", action="store_true", help="30,000 entries, 1 repeat, 10 s live runs")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if args.quick:
        args.entries, args.repeat, args.seconds = 30_000, 1, 10.0
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    work = Path(tempfile.mkdtemp(prefix="meshgate-pipeline-bench-"))
    server = RedisServer(work / "redis").start()
    host, port, url = server.host, server.port, server.url
    rows: list[tuple[str, str, str]] = []  # measure, result, limit / target
    notes: list[str] = []
    spark = None
    try:
        began = time.perf_counter()
        total, size, event_seconds, traffic = fill_backlog(host, port, "backlog", args.entries, args.nodes,
                                                           args.queues, args.event_share)
        print(f"backlog: {total:,} entries ({size / total / 1000:.1f} KB each on the wire, {size / 1e6:.0f} MB) "
              f"of {args.nodes} nodes x {args.queues} partial queues over {event_seconds:.0f} s of event time, "
              f"written in {time.perf_counter() - began:.1f} s", flush=True)
        streams = ["backlog:snapshots", "backlog:events"]
        limit = limit2 = None
        if "xrange" not in skip:
            limit, limit2 = xrange_rate(url, streams, args.repeat)
            print(f"XRANGE: {limit:,.0f}/s one connection, {limit2:,.0f}/s two", flush=True)
            rows.append((f"Redis XRANGE, redis-py, page {PAGE:,} (the limit)",
                         f"{limit:,.0f}/s one connection; {limit2:,.0f}/s two at once", "—"))
        began = time.perf_counter()
        from pipeline.spark import session

        spark = session("local[2]", app="meshgate-bench")
        print(f"Spark {spark.version} session in {time.perf_counter() - began:.1f} s", flush=True)
        of_limit = (lambda r: f" ({r / limit2:.0%} of two connections' XRANGE)") if limit2 else (lambda r: "")
        if "batch" not in skip:
            rates_ = batch_rates(spark, url, "backlog", total, args.repeat)
            for (mode, arrow), rate in rates_.items():
                print(f"batch {mode} arrow={arrow}: {rate:,.0f}/s", flush=True)
            rows.append(("batch reader `redis_streams`, `count()`",
                         f"Arrow {rates_[('count', True)]:,.0f}/s{of_limit(rates_[('count', True)])}; "
                         f"tuples {rates_[('count', False)]:,.0f}/s", "≥ 100,000/s"))
            rows.append(("batch reader `meshgate_partials` (decoded, reduced), merged and collected",
                         f"{rates_[('parse', True)]:,.0f}/s{of_limit(rates_[('parse', True)])}", "—"))
        if "backlog" not in skip:
            # A running job is warm (the JIT, the Python workers): so is the one measured.
            warm_total = fill_backlog(host, port, "warm", 30_000, args.nodes, args.queues, args.event_share)[0]
            backlog_run(spark, url, "warm", work, warm_total, 10_000)
            backlog = backlog_run(spark, url, "backlog", work, total, args.batch_entries)
            steady = f"{backlog['steady']:,.0f}/s" if backlog["steady"] else "—"
            print(f"backlog applied: {backlog['entries']:,} entries in {backlog['seconds']:.1f} s, "
                  f"{backlog['rate']:,.0f}/s; steady state (after the first batch) {steady}", flush=True)
            applied_published = published(redis.Redis.from_url(url), "backlog")
            check = "rollups check" if applied_published == traffic.published else "ROLLUPS DIFFER"
            rows.append((f"streaming job, backlog (`availableNow`, {args.batch_entries:,} a batch)",
                         f"{backlog['rate']:,.0f}/s ({backlog['entries']:,} in {backlog['seconds']:.1f} s; "
                         f"{len(backlog['progress'])} batches; {check}); steady state after the first batch "
                         f"{steady}", "≥ 50,000/s"))
            notes.append("Backlog micro-batches (seconds): Spark's trigger, its latestOffset and the rest of "
                         "its own bookkeeping; in foreachBatch the Spark jobs (parse, reduce, collect), the "
                         "driver's Rollups.apply in Python, its Redis transaction")
            notes.append("")
            notes.append("| batch | entries | trigger | latestOffset | plan + commit | Spark jobs | "
                         "apply (Python) | Redis MULTI |")
            notes.append("|---|---|---|---|---|---|---|---|")
            notes.extend(breakdown(backlog))
            if applied_published != traffic.published:
                notes.append(f"\nROLLUPS DIFFER: published {applied_published}, generated {traffic.published}")
        if "live" not in skip:
            for index, rate in enumerate(rates):
                result = live_run(spark, host, port, f"live{index}", work, rate, args.seconds, args.nodes,
                                  args.queues, args.event_share)
                fresh = result["fresh"]
                freshness = (f"p50 {quantile(fresh, .5):.2f} s, p95 {quantile(fresh, .95):.2f} s "
                             f"({len(fresh)} probes)") if fresh else "no probe seen"
                keeps = result["lag_end"] <= 3.0 and result["drained"] is not None and result["drained"] <= 5.0
                drained = f"{result['drained']:.1f} s" if result["drained"] is not None else "not in 60 s"
                produced = result["produced"] / result["seconds"]
                print(f"live {rate:,.0f}/s: produced {produced:,.0f}/s, applied {result['applied_rate']:,.0f}/s, "
                      f"lag end {result['lag_end']:.1f} s max {result['lag_max']:.1f} s, drained {drained} after; "
                      f"freshness {freshness}; batch median {result['batch_median']:.2f} s; producer CPU "
                      f"{result['producer_cpu']:.0%}", flush=True)
                rows.append((f"streaming job, live at {rate:,.0f}/s for {args.seconds:.0f} s (1 s trigger)",
                             f"{'keeps up' if keeps else 'FALLS BEHIND'}: produced {produced:,.0f}/s (the "
                             f"producer's CPU {result['producer_cpu']:.0%}), applied {result['applied_rate']:,.0f}/s, "
                             f"behind {result['lag_end']:.1f} s at the end (worst {result['lag_max']:.1f} s), "
                             f"all applied {drained} after the producer stopped; batches "
                             f"{result['batch_median']:.2f} s (median)", "≥ 50,000/s"))
                rows.append((f"freshness at {rate:,.0f}/s: XADD to the 10 s rollup", freshness, "p95 ≤ 2 s"))
        print(f"\n{total:,} backlog entries of {args.nodes} nodes × {args.queues} partial queues "
              f"({size / total / 1000:.1f} KB an entry), {args.event_share:.0%} events; Spark local[2], "
              f"{os.cpu_count()} cores\n")
        print("| measure | result | limit / target |")
        print("|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        if notes:
            print()
            print("\n".join(notes))
    finally:
        if spark is not None:
            for query in spark.streams.active:
                query.stop()
            spark.stop()
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
