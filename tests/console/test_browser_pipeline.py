"""The Overview and Queue pages chart the metrics pipeline's rollups when it runs, in
real headless Chromium (the fixtures of test_browser.py: a real Redis, a real 3-node
mesh, daphne and the meshwatch worker). No Spark here: a thread writes what the
pipeline writes (its status every half second, and the window still open) with the
model's shapes, over windows written for the last hour. Screenshots are saved like
test_browser.py's (``MESHGATE_SCREENSHOTS=DIR`` keeps them)."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from e2e_support import unique
from mesh_support import send_many

from model.rollups import RESOLUTIONS, Counts, with_percentiles
from tests.console import test_browser as browser_tests
from tests.console.pipeline_support import LATENCY, clear, write_status, write_window

# test_browser.py's fixtures, for this module's own console and browser.
console, browser, page, shot = browser_tests.console, browser_tests.browser, browser_tests.page, browser_tests.shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]
# Every window the same: 20 enqueued, 18 acked, 3 forwarded a second; 42 waiting at its end,
# 57 at most; p50 / p95 / p99 2.048 / 4.096 / 8.192 ms.
RATE = {"published": 20, "enqueued": 20, "acked": 18, "forwarded_out": 3}


def steady(seconds: float) -> Counts:
    counts = Counts(**{name: int(per_second * seconds) for name, per_second in RATE.items()}, depth_last=42,
                    depth_max=57, consumers=2, latency=list(LATENCY) if seconds >= 1 else [], latency_sum_ms=300.0)
    return with_percentiles(counts)


class FakePipeline:
    """Writes what a running pipeline writes, for the cluster and ``queue``, until stopped."""

    def __init__(self, url: str, queue: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.queue = queue
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def backfill(self) -> None:
        now = time.time()
        for resolution, seconds in RESOLUTIONS.items():
            start = float(int((now - 3600) // seconds) * seconds)
            while start + seconds <= now:
                write_window(self.client, resolution, start, steady(seconds), {self.queue: steady(seconds)})
                start += seconds

    def write(self) -> None:
        now = time.time()
        for resolution, seconds in RESOLUTIONS.items():
            start = float(int(now // seconds) * seconds)
            covered = int(now - start)  # whole seconds, so the open window's rates are exact
            if covered >= 1:
                cluster, queue = steady(covered), steady(covered)
                cluster.at = queue.at = start + covered
                write_window(self.client, resolution, start, cluster, {self.queue: queue})
            else:  # the window that just closed, whole
                write_window(self.client, resolution, start - seconds, steady(seconds), {self.queue: steady(seconds)})
        write_status(self.client, batch=int(now))

    def start(self) -> FakePipeline:
        self.backfill()
        self.write()
        self.thread = threading.Thread(target=self._run, name="fake-pipeline", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stopped.wait(0.5):
            self.write()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(5)
        clear(self.client)
        self.client.close()


@pytest.fixture
def queue(mesh):
    name = unique("charted")
    send_many(mesh.a.client(), f"/queue/{name}", [f"m{i}" for i in range(5)])
    return name


@pytest.fixture
def pipeline(mesh, queue):
    clear(redis.Redis.from_url(mesh.redis.url))
    fake = FakePipeline(mesh.redis.url, queue)
    yield fake
    fake.stop()


def _legend(page, chart: str) -> str:
    return page.locator(f"#{chart} .u-legend").inner_text().lower()


def test_the_overview_switches_to_the_pipeline_when_it_starts_and_charts_latency(page, console, pipeline, tmp_path):
    page.goto(console.url + "/")
    source = page.locator("#chart-source")
    source.filter(has_text="from snapshots; the pipeline is not running").wait_for()
    assert page.locator("#latency-card").is_hidden()
    pipeline.start()
    # No reload: the page looks at the pipeline every 10 s and reads its windows when it runs.
    source.filter(has_text="Spark pipeline, 10 s windows").wait_for(timeout=20_000)
    assert source.get_attribute("data-source") == "pipeline"
    page.locator("#latency-card").wait_for()
    assert page.locator("#latency-chart canvas").count() == 1
    page.wait_for_function("() => Number(document.getElementById('latency-chart').dataset.points) >= 30")
    latency = _legend(page, "latency-chart")
    assert "p50" in latency and "2.0 ms" in latency and "4.1 ms" in latency and "8.2 ms" in latency, latency
    rates = _legend(page, "chart")
    assert "20.0/s" in rates and "18.0/s" in rates and "3.0/s" in rates, rates
    assert page.locator("#latency-chart .chart-empty").is_hidden()
    shot(page, "overview-pipeline", tmp_path, full_page=True)
    # Live: the windows are read again every few seconds, so the next window shows without a reload.
    newest = float(page.get_attribute("#chart", "data-newest"))
    page.wait_for_function(f"() => Number(document.getElementById('chart').dataset.newest) > {newest}", timeout=25_000)
    # An hour is charted from 1-minute windows.
    page.click("#chart-range button[data-seconds='3600']")
    source.filter(has_text="Spark pipeline, 1 min windows").wait_for()
    page.wait_for_function("() => Number(document.getElementById('chart').dataset.points) >= 55")
    assert "range=3600" in page.url
    shot(page, "overview-pipeline-hour", tmp_path)


def test_the_queue_page_charts_latency_and_depth_from_the_pipeline(page, console, pipeline, queue, tmp_path):
    pipeline.start()
    page.goto(console.url + f"/queues/{queue}/")
    page.locator("#chart-source").filter(has_text="Spark pipeline, 10 s windows").wait_for()
    page.locator("#pipeline-charts").wait_for()
    assert page.locator("#latency-chart canvas").count() == 1 and page.locator("#depth-chart canvas").count() == 1
    page.wait_for_function("() => Number(document.getElementById('depth-chart').dataset.points) >= 30")
    depth = _legend(page, "depth-chart")
    assert "42" in depth and "57" in depth, depth
    assert "8.2 ms" in _legend(page, "latency-chart")
    page.locator("#parts").filter(has_text="5").wait_for()  # the page itself still reads the mesh
    shot(page, "queue-pipeline", tmp_path, full_page=True)


def test_a_queue_without_windows_says_so(page, console, pipeline, mesh, tmp_path):
    pipeline.start()
    other = unique("unwindowed")
    send_many(mesh.b.client(), f"/queue/{other}", ["one"])
    page.goto(console.url + f"/queues/{other}/")
    page.locator("#chart-source").filter(has_text="Spark pipeline, 10 s windows").wait_for()
    for chart in ("chart", "latency-chart", "depth-chart"):
        page.locator(f"#{chart} .chart-empty").filter(has_text="The pipeline has no window here in this range yet.") \
            .wait_for()
        assert page.get_attribute(f"#{chart}", "data-points") == "0"
    shot(page, "queue-pipeline-empty", tmp_path)
