"""GET /api/v1/overview/history and /api/v1/queues/{name}/history: charts from the
metrics pipeline's rollups when it runs and its windows cover the range, else from
the snapshots. Rollups are written into the real Redis with the model's shapes, as
the pipeline writes them (tests/console/pipeline_support.py); a real 3-node mesh
writes its snapshots there."""

from __future__ import annotations

import time

import pytest
import redis
from e2e_support import unique

from console.mesh import rollups
from model.rollups import RESOLUTIONS, PipelineStatus, QueueWindow
from tests.console.api_support import expect_error, expect_ok
from tests.console.pipeline_support import LATENCY, clear, counts, write_status, write_window, write_windows

pytestmark = pytest.mark.django_db
OVERVIEW = "/api/v1/overview/history"
RATES = {"enqueue": "published", "ack": "acked", "forward": "forwarded_out", "redistribute": "redistributed_out",
         "dead_lettered": "dead_lettered", "expired": "expired"}


@pytest.fixture
def client(mesh):
    client = redis.Redis.from_url(mesh.redis.url)
    clear(client)
    yield client
    clear(client)
    client.close()


def _history(client_api, path: str = OVERVIEW, **query) -> dict:
    return expect_ok(client_api.get(path, query))


def _charted(client_api, path: str = OVERVIEW, **query) -> tuple[dict, float, float]:
    """The answer, and the earliest and latest start of the range it was asked for."""
    seconds = float(query["seconds"])
    before = time.time() - seconds
    body = _history(client_api, path, **query)
    return body, before, time.time() - seconds


def _expect_points_of(answer: tuple[dict, float, float], written: dict, resolution: str) -> list[dict]:
    """The answer's points are the windows written that overlap the range, each window's
    counts over the window's length."""
    body, earliest, latest = answer
    seconds = RESOLUTIONS[resolution]
    assert body["source"] == "pipeline" and body["resolution"] == resolution, {k: body[k] for k in ("source",
                                                                                                  "resolution")}
    times = [point["t"] for point in body["points"]]
    assert times == sorted(times) and set(times) <= set(written), times[:3]
    # Every window overlapping the range (the range began between earliest and latest).
    assert {start for start in written if start > latest - seconds} <= set(times), (times[:3], sorted(written)[:3])
    assert all(start > earliest - seconds for start in times), times[:3]
    for point in body["points"]:
        total = written[point["t"]]
        for rate, counter in RATES.items():
            assert point[rate] == pytest.approx(getattr(total, counter) / seconds), (rate, point)
        assert (point["depth_last"], point["depth_max"], point["consumers"]) == (
            total.depth_last, total.depth_max, total.consumers), point
        assert point["partial"] is False
    return body["points"]


def test_history_refuses_anonymous(mesh, anonymous):
    expect_error(anonymous.get(OVERVIEW), 401, "unauthenticated")
    expect_error(anonymous.get("/api/v1/queues/anything/history"), 401, "unauthenticated")


@pytest.mark.parametrize("path", [OVERVIEW, "/api/v1/queues/q/history"])
@pytest.mark.parametrize("query, field", [
    ({"seconds": "0"}, "seconds"), ({"seconds": "3601"}, "seconds"), ({"seconds": "soon"}, "seconds"),
    ({"seconds": "1e-300"}, "seconds"), ({"seconds": "0.5"}, "seconds"),
    ({"resolution": "5m"}, "resolution"), ({"resolution": ""}, "resolution"), ({"resolution": "10S"}, "resolution"),
    ({"seconds": "60", "resolution": "1h"}, "resolution"),
])
def test_bad_parameters_are_refused_with_a_json_400(mesh, viewer, path, query, field):
    error = expect_error(viewer.get(path, query), 400, "bad_request")
    assert field in error["message"], error


def test_without_a_pipeline_the_history_comes_from_snapshots(mesh, client, viewer):
    body = mesh.wait(lambda: (b := _history(viewer, seconds=60))["points"] and b, "rates from the snapshots")
    assert body["source"] == "snapshots" and body["resolution"] is None, body
    assert set(body["points"][0]) == {"t", "enqueue", "ack", "forward", "redistribute"}
    # An explicit resolution changes nothing while no pipeline runs.
    body = _history(viewer, seconds=60, resolution="1m")
    assert body["source"] == "snapshots" and body["resolution"] is None


def test_a_running_pipeline_charts_its_10s_windows_for_the_overview(client, viewer):
    now = time.time()
    written = write_windows(client, "10s", now - 310, now, latency=LATENCY)
    write_status(client)
    points = _expect_points_of(_charted(viewer, seconds=300), written, "10s")
    assert len(points) >= 29
    for point in points:  # the latency percentiles, passed through
        assert (point["p50_ms"], point["p95_ms"], point["p99_ms"]) == (2.048, 4.096, 8.192), point
    assert points[0]["enqueue"] != points[1]["enqueue"]  # each window its own counts


def test_a_running_pipeline_charts_one_queues_windows(client, viewer):
    queue, other = unique("ph"), unique("ph")
    now = time.time()
    written = write_windows(client, "10s", now - 300, now, queue=queue)
    write_status(client)
    path = f"/api/v1/queues/{queue}/history"
    points = _expect_points_of(_charted(viewer, path, seconds=300), written, "10s")
    assert len(points) >= 29
    assert all(point["p50_ms"] is None and point["p99_ms"] is None for point in points)  # no acks timed
    # A queue the windows do not hold has no points (the pipeline still answers).
    assert _history(viewer, f"/api/v1/queues/{other}/history", seconds=300) == {
        "source": "pipeline", "resolution": "10s", "points": []}


def test_the_resolution_follows_the_range_or_the_parameter(client, viewer):
    now = time.time()
    tens = write_windows(client, "10s", now - 3600, now, latency=LATENCY)
    minutes = write_windows(client, "1m", now - 3600, now, latency=LATENCY)
    write_status(client)
    _expect_points_of(_charted(viewer, seconds=900), tens, "10s")  # up to 15 minutes: 10-second windows
    _expect_points_of(_charted(viewer, seconds=901), minutes, "1m")  # longer: 1-minute windows
    assert 59 <= len(_expect_points_of(_charted(viewer, seconds=3600), minutes, "1m")) <= 61
    _expect_points_of(_charted(viewer, seconds=300, resolution="1m"), minutes, "1m")
    assert len(_expect_points_of(_charted(viewer, seconds=3600, resolution="10s"), tens, "10s")) >= 355


def test_a_stale_pipeline_falls_back_to_snapshots(client, viewer):
    now = time.time()
    write_windows(client, "10s", now - 300, now)
    write_status(client, applied_at=now - 120)
    assert _history(viewer, seconds=300)["source"] == "snapshots"
    write_status(client)  # it wrote a batch again
    assert _history(viewer, seconds=300)["source"] == "pipeline"


def test_a_pipeline_without_windows_for_the_range_falls_back_to_snapshots(client, viewer):
    write_status(client)
    assert _history(viewer, seconds=300)["source"] == "snapshots"  # no window at all
    now = time.time()
    write_windows(client, "10s", now - 1200, now - 600)  # catching up: its windows are 10 minutes behind
    assert _history(viewer, seconds=300)["source"] == "snapshots"
    assert _history(viewer, seconds=900)["source"] == "snapshots"


def test_windows_that_begin_after_the_snapshots_do_not_replace_them():
    """A pipeline started later than the oldest snapshot kept (``--from latest``) charts
    only once its windows reach back as far as the snapshots, or to the range's start."""
    status = PipelineStatus(pipeline="p", batch=1, applied_at=1000.0, started_at=0.0, master="local[2]")

    def found(starts, oldest):
        return rollups.Windows(status=status, resolution="10s", seconds=10, starts=starts,
                               windows=[None] * len(starts), oldest_snapshot=oldest)

    recent = [float(t) for t in range(900, 1000, 10)]  # the last 100 s
    assert not found(recent, oldest=800.0).covers(700.0, 1000.0)  # snapshots reach further back
    assert found(recent, oldest=895.0).covers(700.0, 1000.0)  # the mesh is as young as the windows
    assert found(recent, oldest=None).covers(900.0, 1000.0)
    assert not found(recent, oldest=None).covers(850.0, 1000.0)
    assert not found([], oldest=None).covers(900.0, 1000.0)
    assert not found([float(t) for t in range(900, 950, 10)], oldest=None).covers(900.0, 1000.0)  # behind


def test_the_open_window_is_marked_partial_and_rated_over_its_covered_part():
    start = 990.0
    total = counts(0, LATENCY)
    total.at = 996.0  # its last snapshot: 6 s into the window
    window = QueueWindow(queue="q", start=start, seconds=10, total=total)
    closed = QueueWindow(queue="q", start=980.0, seconds=10, total=counts(1))
    found = rollups.Windows(status=None, resolution="10s", seconds=10, starts=[980.0, start],
                            windows=[closed, window], oldest_snapshot=None)
    before, open_ = rollups.points(found, now=996.5)
    assert before["partial"] is False and before["enqueue"] == closed.total.published / 10
    assert open_["partial"] is True and open_["enqueue"] == total.published / 6
    assert open_["dead_lettered"] == total.dead_lettered / 6 and open_["depth_last"] == total.depth_last
    assert open_["p95_ms"] == 4.096


def test_an_open_window_written_now_is_charted(client, viewer):
    now = time.time()
    written = write_windows(client, "10s", now - 300, now)
    start = float(int(now // 10) * 10)
    current = counts(0)
    current.at = now
    write_window(client, "10s", start, current)
    write_status(client)
    points = _history(viewer, seconds=300)["points"]
    assert [p["t"] for p in points][-2:] == [max(written), start]
    assert points[-1]["partial"] is True and points[-1]["enqueue"] >= current.published / 10
