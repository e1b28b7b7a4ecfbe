"""GET /api/v1/events: the nodes' events from their Redis stream, newest first, in
pages, filtered by kind (repeatable), reporting node (id or name), time and text."""

from __future__ import annotations

import json
import time

import pytest
from e2e_support import unique

from tests.console.api_support import expect_error, expect_ok

pytestmark = pytest.mark.django_db


def _events(client, **params) -> dict:
    return expect_ok(client.get("/api/v1/events", params))


@pytest.fixture(scope="module")
def churn(mesh):
    """A consumer of a fresh queue attached and detached three times on B, then once on C:
    eight consumer events whose text names the queue. Returns the queue and the nodes' ids."""
    from console.mesh import events
    from console.mesh.sources import mesh_view

    queue = unique("ev")
    for member, written in ((mesh.b, 2), (mesh.b, 4), (mesh.b, 6), (mesh.c, 8)):
        client = member.client()
        subscription = client.subscribe(f"/queue/{queue}")
        client.unsubscribe(subscription)
        client.disconnect()
        # Each node writes its events to the stream itself: wait for them, so the stream's
        # order (newest first) is the order they happened in, whichever node they came from.
        mesh.wait(lambda n=written: len(events.recent(text=queue)) == n, f"{written} events in the stream")
    ids = {row.name: row.id for row in mesh_view(0).nodes()}
    return queue, ids


def _all_churn(client, mesh, churn) -> list[dict]:
    queue, _ = churn
    return mesh.wait(lambda: (items := _events(client, q=queue, page_size="500")["items"]) and len(items) == 8
                     and items, "the 8 consumer events of the queue")


def test_events_refuse_anonymous(mesh, anonymous):
    expect_error(anonymous.get("/api/v1/events"), 401, "unauthenticated")


def test_events_are_newest_first(mesh, viewer, churn):
    items = _all_churn(viewer, mesh, churn)
    queue, ids = churn
    kinds = [e["kind"] for e in items]
    assert kinds == ["consumer_detached", "consumer_attached"] * 4, kinds
    assert [e["node"] for e in items] == [ids["C"]] * 2 + [ids["B"]] * 6
    times = [e["time"] for e in items]
    assert times == sorted(times, reverse=True)
    assert all(e["destination"] == f"/queue/{queue}" for e in items)
    assert [e["consumers"] for e in items] == [0, 1] * 4


def test_events_filter_by_kind(mesh, viewer, churn):
    _all_churn(viewer, mesh, churn)
    queue, _ = churn
    attached = _events(viewer, q=queue, kind="consumer_attached")["items"]
    assert len(attached) == 4 and {e["kind"] for e in attached} == {"consumer_attached"}
    both = _events(viewer, q=queue, kind=["consumer_attached", "consumer_detached"])
    assert both["total_count"] == 8
    assert _events(viewer, q=queue, kind="link_down")["total_count"] == 0
    links_up = _events(viewer, kind="link_up", page_size="500")["items"]
    assert links_up and {e["kind"] for e in links_up} == {"link_up"}
    # Every node saw its two links come up.
    assert {(e["node"], e["peer_name"]) for e in links_up} >= {(churn[1][n], p) for n, p in
                                                               (("A", "B"), ("A", "C"), ("B", "A"), ("B", "C"),
                                                                ("C", "A"), ("C", "B"))}


def test_events_filter_by_node_name_or_id(mesh, viewer, churn):
    _all_churn(viewer, mesh, churn)
    queue, ids = churn
    on_b = _events(viewer, q=queue, node="B")["items"]
    assert len(on_b) == 6 and {e["node"] for e in on_b} == {ids["B"]}
    assert _events(viewer, q=queue, node=ids["C"])["total_count"] == 2
    assert _events(viewer, q=queue, node="A")["total_count"] == 0
    assert _events(viewer, q=queue, node="no-such-node")["total_count"] == 0
    links_up_on_a = _events(viewer, kind="link_up", node="A")["items"]
    assert {e["peer_name"] for e in links_up_on_a} == {"B", "C"} and {e["node"] for e in links_up_on_a} == {ids["A"]}


def test_events_filter_by_text_in_any_case(mesh, viewer, churn):
    _all_churn(viewer, mesh, churn)
    queue, _ = churn
    assert _events(viewer, q=queue.upper())["total_count"] == 8
    assert _events(viewer, q=unique("no-such-text"))["total_count"] == 0


def test_events_filter_by_time(mesh, viewer, churn):
    items = _all_churn(viewer, mesh, churn)
    queue, _ = churn
    newer = _events(viewer, q=queue, since=str(items[3]["time"]))["items"]
    assert newer == items[:3]
    assert _events(viewer, q=queue, since=str(time.time() + 60))["total_count"] == 0


def test_events_page_newest_first(mesh, viewer, churn):
    items = _all_churn(viewer, mesh, churn)
    queue, _ = churn
    pages = [_events(viewer, q=queue, page_size="3", page=str(n)) for n in (1, 2, 3)]
    assert [(p["page"], p["page_size"], p["page_count"], p["total_count"]) for p in pages] == \
        [(1, 3, 3, 8), (2, 3, 3, 8), (3, 3, 3, 8)]
    assert [e for p in pages for e in p["items"]] == items


def test_events_since_keeps_newer_events_that_come_before_a_late_older_one(mesh, viewer):
    from console.mesh.sources import redis_client, stream

    ids = {row["name"]: row["id"] for row in viewer.get("/api/v1/nodes").json()["items"]}
    queue = unique("late")
    now = time.time()

    def write(node: str, at: float, connection: str) -> None:
        event = {"kind": "consumer_attached", "time": at, "node": ids[node], "destination": f"/queue/{queue}",
                 "connection": connection, "consumers": 1}
        redis_client().xadd(stream("events"), {"node": ids[node], "kind": "consumer_attached", "schema": "1",
                                               "data": json.dumps(event)})

    # B's event happened at now; A's, a second earlier, reached the stream after it (A was behind).
    write("B", now, "B-new")
    write("A", now - 1.0, "A-late")
    assert [e["connection"] for e in _events(viewer, q=queue)["items"]] == ["A-late", "B-new"]
    assert [e["connection"] for e in _events(viewer, q=queue, since=str(now - 0.5))["items"]] == ["B-new"]


@pytest.mark.parametrize("params, status, code", [
    ({"since": "yesterday"}, 400, "bad_request"), ({"page_size": "0"}, 400, "bad_request"),
    ({"page_size": "501"}, 400, "bad_request"), ({"page": "100000"}, 404, "not_found"),
    ({"since": "nan"}, 400, "bad_request"), ({"since": "inf"}, 400, "bad_request"),
    ({"kind": "no_such_kind"}, 400, "bad_request"), ({"page_size": "\u00b2"}, 400, "bad_request"),
])
def test_events_refuse_bad_parameters(mesh, viewer, params, status, code):
    expect_error(viewer.get("/api/v1/events", params), status, code)
