"""GET /api/v1/queues/<name> (one cluster-wide queue: totals and the partial queue of
each node) and /api/v1/queues/<name>/history (its rates over the last seconds)."""

from __future__ import annotations

import time

import pytest
from e2e_support import unique
from mesh_support import send_many

from model.latency import padded
from tests.console.api_support import expect_error, subscribe_seen_on_a

pytestmark = pytest.mark.django_db

_TOTALS = ("messages", "depth", "in_flight", "forwarding", "in_doubt", "consumers")


def _detail(client, name: str) -> dict | None:
    response = client.get(f"/api/v1/queues/{name}")
    if response.status_code == 404:
        return None
    assert response.status_code == 200, (response.status_code, response.content[:500])
    return response.json()


def _by_node(row: dict) -> dict[str, dict]:
    return {part["node_name"]: part for part in row["nodes"]}


def _assert_totals_are_sums(row: dict) -> None:
    for field in _TOTALS:
        assert row[field] == sum(part[field] for part in row["nodes"]), (field, row)
    assert row["node_count"] == len(row["nodes"])
    for part in row["nodes"]:
        partial = part["partial"]
        assert (partial["name"], partial["node"]) == (row["name"], part["node"]), part
        assert part["messages"] == part["depth"] + part["in_flight"] + part["forwarding"] + part["in_doubt"], part
        assert part["depth"] == partial["depth"] and part["in_flight"] == partial["in_flight"], part
    assert row["latency"] == [sum(column) for column in zip(*(padded(p["partial"]["latency"]) for p in row["nodes"]),
                                                            strict=True)]
    assert row["latency_sum_ms"] == pytest.approx(sum(p["partial"]["latency_sum_ms"] for p in row["nodes"]))


def test_queue_detail_and_history_refuse_anonymous(mesh, anonymous):
    expect_error(anonymous.get("/api/v1/queues/anything"), 401, "unauthenticated")
    expect_error(anonymous.get("/api/v1/queues/anything/history"), 401, "unauthenticated")


def test_queue_detail_answers_json_404_for_an_unknown_queue(mesh, viewer):
    name = unique("nothing")
    error = expect_error(viewer.get(f"/api/v1/queues/{name}"), 404, "not_found")
    assert name in error["message"]


def test_queue_totals_are_the_sums_of_what_was_sent_on_each_node(mesh, viewer):
    queue = unique("qd")
    for member, count in ((mesh.a, 3), (mesh.b, 5)):
        sender = member.client()
        try:
            send_many(sender, f"/queue/{queue}", [f"{member.name}-{i}" for i in range(count)])
        finally:
            sender.disconnect()
    row = mesh.wait(lambda: (r := _detail(viewer, queue)) and r["messages"] == 8 and r["node_count"] == 2 and r,
                    "the queue with 8 messages on A and B")
    _assert_totals_are_sums(row)
    assert (row["name"], row["depth"], row["in_flight"], row["consumers"]) == (queue, 8, 0, 0)
    parts = _by_node(row)
    assert sorted(parts) == ["A", "B"]  # nothing was sent on C
    assert (parts["A"]["depth"], parts["B"]["depth"]) == (3, 5)
    assert (parts["A"]["partial"]["enqueued"], parts["B"]["partial"]["enqueued"]) == (3, 5)
    assert parts["A"]["oldest_age_ms"] is not None and parts["A"]["oldest_age_ms"] >= 0


def test_queue_totals_follow_a_consumer_that_holds_then_acks(mesh, viewer):
    queue = unique("qc")
    mesh.send(mesh.a, queue, [f"m{i}" for i in range(4)])
    mesh.wait(lambda: (r := _detail(viewer, queue)) and r["depth"] == 4, "4 messages waiting on A")
    consumer = mesh.c.client()
    try:
        consumer.subscribe(f"/queue/{queue}", ack="client-individual")
        messages = consumer.listener.wait_for(4)
        # Delivered on C, not acknowledged: in flight there, still counted in messages.
        row = mesh.wait(lambda: (r := _detail(viewer, queue)) and _by_node(r).get("C", {}).get("in_flight") == 4
                        and r["depth"] == 0 and r["forwarding"] == 0 and r,
                        "4 messages in flight on C")
        _assert_totals_are_sums(row)
        assert (row["messages"], row["in_flight"], row["consumers"]) == (4, 4, 1)
        assert _by_node(row)["C"]["consumers"] == 1
        for message in messages:
            consumer.ack(message)
        consumer.sync()
        row = mesh.wait(lambda: (r := _detail(viewer, queue)) and r["messages"] == 0 and sum(r["latency"]) == 4
                        and r, "the 4 acks counted")
        _assert_totals_are_sums(row)
        parts = _by_node(row)
        assert parts["C"]["partial"]["acked"] == 4 and sum(parts["C"]["partial"]["latency"]) == 4
        # The backlog on A followed the consumer to C (docs/management.md: redistribution).
        assert parts["A"]["partial"]["redistributed_out"] == 4 and parts["C"]["partial"]["redistributed_in"] == 4
        assert row["latency_sum_ms"] > 0
    finally:
        consumer.disconnect()


@pytest.mark.parametrize("seconds", ["0", "3601", "soon", "1e-300"])
def test_queue_history_refuses_bad_seconds(mesh, viewer, seconds):
    error = expect_error(viewer.get(f"/api/v1/queues/{unique('qh')}/history", {"seconds": seconds}), 400, "bad_request")
    assert "seconds" in error["message"]


def test_queue_history_shows_the_rates_of_that_queue_only(mesh, viewer):
    queue, quiet = unique("qh"), unique("qh")
    sender = mesh.b.client()
    try:
        send_many(sender, f"/queue/{quiet}", ["only one"])
        started = time.time()
        # Steady sending for 2 s: the history samples one snapshot interval per second.
        for i in range(40):
            sender.send(f"/queue/{queue}", f"m{i}", persistent="true")
            time.sleep(0.05)
        sender.sync()
        ended = time.time()
    finally:
        sender.disconnect()

    def inside(name: str) -> list[dict]:
        response = viewer.get(f"/api/v1/queues/{name}/history", {"seconds": "60"})
        assert response.status_code == 200, response.content[:500]
        body = response.json()
        assert body["source"] == "snapshots" and body["resolution"] is None, body  # no pipeline runs here
        return [p for p in body["points"] if started + 0.5 <= p["t"] <= ended - 0.5]

    points = mesh.wait(lambda: (p := inside(queue)) and all(point["enqueue"] > 0 for point in p) and p,
                       "the queue's history to show its enqueue rate")
    for point in points:
        assert 5 <= point["enqueue"] <= 100 and point["ack"] == 0 and point["forward"] == 0, point
    assert all(point["enqueue"] == 0 for point in inside(quiet))


def test_a_message_forwarded_to_another_node_is_enqueued_once_in_the_rates(mesh, viewer):
    """``enqueue`` counts what producers sent: a message sent on A and forwarded to C's
    consumer enters C's partial queue too, but it is one message."""
    queue = unique("once")
    consumer = mesh.c.client()
    sender = mesh.a.client()
    try:
        subscribe_seen_on_a(mesh, viewer, consumer, queue)
        started = time.time()
        for i in range(40):  # about 20 a second for 2 s
            sender.send(f"/queue/{queue}", f"m{i}")
            time.sleep(0.05)
        sender.sync()
        ended = time.time()
        consumer.listener.wait_for(40)
    finally:
        sender.disconnect()
        consumer.disconnect()

    def inside() -> list[dict]:
        points = viewer.get(f"/api/v1/queues/{queue}/history", {"seconds": "60"}).json()["points"]
        return [p for p in points if started + 0.5 <= p["t"] <= ended - 0.5]

    points = mesh.wait(lambda: (p := inside()) and all(point["forward"] > 0 for point in p) and p,
                       "the history of the forwarding")
    average = sum(point["enqueue"] for point in points) / len(points)
    assert 10 <= average <= 30, points  # about 20 a second, not twice that
