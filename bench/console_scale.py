"""The console at scale: a generator writes the snapshots of NODES nodes with QUEUES
queues each into a redis-server of its own (as the nodes would, one per node per
second), a console (daphne + the meshwatch worker) reads them, and this measures:

- ``GET /api/v1/queues?page_size=100``: p50 / p95 / p99 over --requests requests;
- the topology page drawn in headless Chromium (from navigation to every node on
  the graph), --page-loads times;
- --ws-clients WebSocket clients subscribed to the mesh and the queue rows: that each
  received every update the worker sent (the same count for all, over --ws-seconds).

    .venv/bin/python bench/console_scale.py [--nodes 100] [--queues 1000] [--requests 200]
        [--page-loads 5] [--ws-clients 50] [--ws-seconds 20]

Prints a markdown table for docs/performance.md. Needs redis-server and chromium
(Debian packages) and the console extra."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import msgspec
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from meshgate.redis_server import RedisServer, free_port  # noqa: E402
from model.mesh import Addresses, Link, Node, PartialQueue, Snapshot  # noqa: E402

# -- the generator ------------------------------------------------------------------------------


class Generator(threading.Thread):
    """Every second, each node's snapshot: its queues with counters moving a little."""

    def __init__(self, url: str, nodes: int, queues: int) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.stop_event = threading.Event()
        started = time.time()
        ids = [str(uuid.UUID(int=random.getrandbits(128))) for _ in range(nodes)]
        self.snapshots = []
        for index, node_id in enumerate(ids):
            name = f"node{index + 1:03d}"
            neighbours = [ids[(index + step) % nodes] for step in (1, -1, 7) if nodes > 1]
            links = [Link(node=node_id, peer=peer, peer_name=f"node{ids.index(peer) + 1:03d}", direction="duplex",
                          dialled=True, state="up", since=started) for peer in dict.fromkeys(neighbours)]
            partials = [PartialQueue(node=node_id, name=f"queue.{q:04d}", depth=random.randint(0, 500), in_flight=0,
                                     consumers=random.randint(0, 3))
                        for q in range(queues)]
            node = Node(id=node_id, name=name, version="bench", started_at=started, last_seen=started,
                        addresses=Addresses(stomp=f"10.0.{index // 250}.{index % 250}:61613"))
            self.snapshots.append(Snapshot(seq=0, taken_at=started, node=node, links=links, queues=partials))
        self.encode = msgspec.json.Encoder().encode
        self.written = 0
        self.bytes = 0

    def run(self) -> None:
        while not self.stop_event.is_set():
            tick = time.time()
            pipe = self.client.pipeline(transaction=False)
            for snapshot in self.snapshots:
                snapshot.seq += 1
                snapshot.taken_at = snapshot.node.last_seen = time.time()
                for partial in random.sample(snapshot.queues, min(20, len(snapshot.queues))):
                    partial.enqueued += 10
                    partial.acked += 10
                    partial.depth = max(0, partial.depth + random.randint(-5, 5))
                data = self.encode(snapshot)
                self.bytes += len(data)
                pipe.xadd("meshgate:snapshots", {"node": snapshot.node.id, "seq": snapshot.seq, "schema": 1,
                                                 "data": data}, minid=f"{int((tick - 120) * 1000)}-0",
                          approximate=True)
            pipe.execute()
            self.written += len(self.snapshots)
            self.stop_event.wait(max(0.0, 1.0 - (time.time() - tick)))


# -- the console ----------------------------------------------------------------------------------


class Console:
    def __init__(self, work: Path, redis_url: str) -> None:
        self.port = free_port()
        self.env = dict(os.environ, DJANGO_SETTINGS_MODULE="console.settings", MESHGATE_CONSOLE_DATA=str(work),
                        MESHGATE_REDIS_URL=redis_url, MESHGATE_CONSOLE_STOMP="127.0.0.1:1", PYTHONPATH=str(ROOT))
        django = [sys.executable, "-m", "django"]
        subprocess.run([*django, "migrate", "--verbosity", "0"], env=self.env, check=True, cwd=ROOT)
        subprocess.run([*django, "ensureadmin"], env=self.env, check=True, cwd=ROOT, capture_output=True)
        self.password = (work / "admin-password").read_text().strip()
        token = subprocess.run([*django, "drf_create_token", "admin"], env=self.env, check=True, cwd=ROOT,
                               capture_output=True, text=True).stdout.split()[2]
        self.token = token
        self.web = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                                     "console.asgi:application"], env=self.env, cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.worker = subprocess.Popen([*django, "meshwatch"], env=self.env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        for process in (self.worker, self.web):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()


# -- measurements ---------------------------------------------------------------------------------


def api_latency(console: Console, requests_: int) -> list[float]:
    import urllib.request

    def get() -> float:
        request = urllib.request.Request(console.url + "/api/v1/queues?page_size=100&sort=messages&sort_reverse=1",
                                         headers={"Authorization": "Token " + console.token})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        elapsed = time.perf_counter() - started
        assert b'"items"' in body
        return elapsed

    for _ in range(5):
        get()  # warm up
    times = []
    for _ in range(requests_):
        times.append(get())
        time.sleep(0.02)
    return times


def page_draw_times(console: Console, loads: int, nodes: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(console.url + "/login/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", console.password)
        page.click("button[type=submit]")
        page.wait_for_url(console.url + "/")
        for _ in range(loads):
            started = time.perf_counter()
            page.goto(console.url + "/topology/")
            page.wait_for_function(f"document.body.dataset.drawn && Number(document.body.dataset.drawn) >= {nodes}",
                                   timeout=60_000)
            times.append(time.perf_counter() - started)
        browser.close()
    return times


async def websocket_clients(console: Console, clients: int, seconds: float) -> list[dict[str, int]]:
    import http.cookiejar
    import urllib.request

    import websockets

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(console.url + "/login/").read()
    csrf = next(c.value for c in jar if c.name == "csrftoken")
    data = f"username=admin&password={console.password}&csrfmiddlewaretoken={csrf}".encode()
    opener.open(urllib.request.Request(console.url + "/login/", data=data,
                                       headers={"Referer": console.url + "/login/"})).read()
    cookie = "; ".join(f"{c.name}={c.value}" for c in jar)

    async def one() -> dict[str, list[int]]:
        counts: dict[str, list[int]] = {}  # kind -> the update numbers received
        async with websockets.connect(console.url.replace("http", "ws") + "/ws/mesh", max_size=None,
                                      additional_headers={"Cookie": cookie, "Origin": console.url}) as socket:
            await socket.send('{"subscribe": ["mesh", "queues"]}')
            deadline = time.monotonic() + seconds
            while (left := deadline - time.monotonic()) > 0:
                try:
                    message = await asyncio.wait_for(socket.recv(), left)
                except TimeoutError:
                    break
                update = msgspec.json.decode(message)
                counts.setdefault(update.get("type"), []).append(update.get("seq", 0))
        return counts

    return await asyncio.gather(*(one() for _ in range(clients)))


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--page-loads", type=int, default=5)
    parser.add_argument("--ws-clients", type=int, default=50)
    parser.add_argument("--ws-seconds", type=float, default=20.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="meshgate-console-scale-"))
    server = RedisServer(work / "redis").start()
    generator = Generator(server.url, args.nodes, args.queues)
    generator.start()
    console = None
    try:
        time.sleep(3)
        console = Console(work / "console", server.url)
        time.sleep(5)
        api = api_latency(console, args.requests)
        draws = page_draw_times(console, args.page_loads, args.nodes) if args.page_loads else []
        counts = asyncio.run(websocket_clients(console, args.ws_clients, args.ws_seconds)) if args.ws_clients else []
        rate = generator.bytes / max(1, generator.written)
        print(f"\n{args.nodes} nodes × {args.queues} queues; snapshots of {rate / 1e6:.2f} MB, "
              f"{args.nodes} a second ({args.nodes * rate / 1e6:.1f} MB/s into Redis)\n")
        print("| measure | result | target |")
        print("|---|---|---|")
        print(f"| `GET /api/v1/queues?page_size=100` ({len(api)} requests) | p50 {1000 * quantile(api, .5):.0f} ms, "
              f"p95 {1000 * quantile(api, .95):.0f} ms, p99 {1000 * quantile(api, .99):.0f} ms | p95 < 100 ms |")
        if draws:
            print(f"| topology page drawn ({len(draws)} loads) | median {statistics.median(draws):.2f} s, "
                  f"max {max(draws):.2f} s | < 2 s |")
        if counts:
            # The first message of each kind is the state at subscription (no number); after it,
            # numbered updates: none may be missing between a client's first and last.
            missed = sum(len(range(seqs[1], seqs[-1] + 1)) - len(seqs[1:]) for c in counts
                         for seqs in c.values() if len(seqs) > 2)
            received = {kind: sorted(len(c.get(kind, ())) for c in counts) for kind in ("mesh", "queues")}
            spread = ", ".join(f"{kind}: {values[0]}–{values[-1]}" for kind, values in received.items())
            print(f"| {len(counts)} WebSocket clients over {args.ws_seconds:.0f} s | {spread} updates per client, "
                  f"{missed} missed | every client every update |")
    finally:
        generator.stop_event.set()
        if console is not None:
            console.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
