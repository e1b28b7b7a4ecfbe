"""GET /api/v1/overview and /api/v1/overview/history: the mesh's totals from the
nodes' snapshots, and its message rates over the last seconds."""

from __future__ import annotations

import time

import pytest
from e2e_support import unique
from mesh_support import send_many

from tests.console.api_support import expect_error

pytestmark = pytest.mark.django_db


def _overview(client) -> dict:
    response = client.get("/api/v1/overview")
    assert response.status_code == 200, response.content[:500]
    return response.json()


def test_overview_refuses_anonymous_and_bad_tokens(mesh, anonymous):
    expect_error(anonymous.get("/api/v1/overview"), 401, "unauthenticated")
    assert anonymous.get("/api/v1/overview")["WWW-Authenticate"].startswith("Token")
    anonymous.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    expect_error(anonymous.get("/api/v1/overview"), 401, "unauthenticated")
    expect_error(anonymous.get("/api/v1/overview/history"), 401, "unauthenticated")


def test_overview_counts_every_node_and_link_up(mesh, viewer):
    # The fixture waits for every node's snapshot; a link may show in the snapshots a moment later.
    body = mesh.wait(lambda: (o := _overview(viewer))["links_up"] == 3 and o, "every link up in the overview")
    assert (body["nodes"], body["nodes_up"], body["nodes_down"]) == (3, 3, 0), body
    assert body["links_down"] == 0, body
    assert body["metrics_behind"] == [], body
    assert abs(body["taken_at"] - time.time()) < 5, body
    assert set(body["rates"]) >= {"enqueue", "ack", "forward", "redistribute", "expire", "dead_letter"}


def test_overview_totals_follow_messages_queues_consumers_and_connections(mesh, viewer):
    before = _overview(viewer)
    queue, other = unique("ov"), unique("ov")
    sender = mesh.b.client()
    consumer = mesh.c.client()
    try:
        send_many(sender, f"/queue/{queue}", [f"m{i}" for i in range(5)])
        consumer.subscribe(f"/queue/{other}", ack="client-individual")
        # The sender and the consumer are two more connections; 5 messages wait in a new queue
        # and one consumer waits on another new (empty) queue.
        after = mesh.wait(lambda: (o := _overview(viewer))["messages"] == before["messages"] + 5
                          and o["queues"] == before["queues"] + 2 and o["consumers"] == before["consumers"] + 1
                          and o["connections"] == before["connections"] + 2 and o,
                          "the overview to count the new queue, messages, consumer and connections")
        assert after["nodes_up"] == 3
    finally:
        sender.disconnect()
        consumer.disconnect()
    mesh.wait(lambda: _overview(viewer)["connections"] == before["connections"],
              "the overview to stop counting the closed connections")


@pytest.mark.parametrize("seconds", ["0", "-5", "3601", "x", ""])
def test_overview_history_refuses_bad_seconds(mesh, viewer, seconds):
    error = expect_error(viewer.get("/api/v1/overview/history", {"seconds": seconds}), 400, "bad_request")
    assert "seconds" in error["message"]


def test_overview_history_shows_the_enqueue_rate_of_steady_sending(mesh, viewer):
    queue = unique("ovh")
    sender = mesh.a.client()
    started = time.time()
    try:
        # Steady sending for 2 s: the history samples one snapshot interval per second, so
        # every sample inside this window covers some sends.
        for i in range(40):
            sender.send(f"/queue/{queue}", f"m{i}", persistent="true")
            time.sleep(0.05)
        sender.sync()
    finally:
        sender.disconnect()
    ended = time.time()

    def busy():
        points = viewer.get("/api/v1/overview/history", {"seconds": "60"}).json()["points"]
        inside = [p for p in points if started + 0.5 <= p["t"] <= ended - 0.5]
        return inside if inside and all(p["enqueue"] > 0 for p in inside) else None

    inside = mesh.wait(busy, "the history to show the enqueue rate while sending")
    for point in inside:
        assert 5 <= point["enqueue"] <= 100, point  # about 20 messages per second were sent
    body = viewer.get("/api/v1/overview/history", {"seconds": "60"}).json()
    assert body["source"] == "snapshots" and body["resolution"] is None, body  # no pipeline runs here
    points = body["points"]
    assert points and set(points[0]) == {"t", "enqueue", "ack", "forward", "redistribute"}
    times = [p["t"] for p in points]
    assert times == sorted(times) and times[0] >= time.time() - 62, times[:3]
    short = viewer.get("/api/v1/overview/history", {"seconds": "1"}).json()["points"]
    assert len(short) < len(points)
