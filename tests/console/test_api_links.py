"""GET /api/v1/links: a page of the mesh's links, one row per pair of nodes as both
ends report it, with what has been forwarded over it."""

from __future__ import annotations

import pytest
from e2e_support import unique
from mesh_support import send_many

from tests.console.api_support import expect_error, expect_ok, subscribe_seen_on_a

pytestmark = pytest.mark.django_db


def _links(client, **params) -> dict:
    return expect_ok(client.get("/api/v1/links", params))


def _pair(row: dict) -> str:
    """"AB" for the link between A and B, whichever end is ``a`` (the lower node id)."""
    return "".join(sorted((row["a_name"], row["b_name"])))


def _all_up(client):
    """The page of links once all three are up as both of their ends report them (an end
    may write a snapshot listing a new link a moment after the other)."""
    body = _links(client)
    return body if body["total_count"] == 3 and all(row["state"] == "up" and len(row["ends"]) == 2
                                                    for row in body["items"]) else None


def test_links_refuse_anonymous(mesh, anonymous):
    expect_error(anonymous.get("/api/v1/links"), 401, "unauthenticated")


def test_every_pair_of_nodes_is_one_link_up_reported_by_both_ends(mesh, viewer):
    body = mesh.wait(lambda: _all_up(viewer), "three links up")
    assert (body["page"], body["page_count"], body["total_count"]) == (1, 1, 3)
    assert sorted(_pair(row) for row in body["items"]) == ["AB", "AC", "BC"]
    names = [row["name"] for row in body["items"]]
    assert names == sorted(names)  # by name by default
    for row in body["items"]:
        assert row["a"] < row["b"] and row["id"] == f"{row['a']}~{row['b']}", row
        assert row["name"] == f"{row['a_name']}–{row['b_name']}"
        assert row["direction"] == "duplex"
        assert sorted(end["node"] for end in row["ends"]) == sorted((row["a"], row["b"])), row["ends"]
        assert all(end["state"] == "up" for end in row["ends"])


def test_link_forwarded_counts_messages_that_crossed_it(mesh, viewer):
    mesh.wait(lambda: _all_up(viewer), "three links up")

    def forwarded(pair: str) -> int:
        return next(row["forwarded"] for row in _links(viewer)["items"] if _pair(row) == pair)

    before = {pair: forwarded(pair) for pair in ("AB", "AC", "BC")}
    queue = unique("lk")
    consumer = mesh.c.client()
    sender = mesh.a.client()
    try:
        subscribe_seen_on_a(mesh, viewer, consumer, queue)
        send_many(sender, f"/queue/{queue}", [f"m{i}" for i in range(4)])
        consumer.listener.wait_for(4)
        mesh.wait(lambda: forwarded("AC") >= before["AC"] + 4, "the link A–C to count 4 forwarded messages")
    finally:
        sender.disconnect()
        consumer.disconnect()
    assert forwarded("AB") == before["AB"]


def test_links_sort_filter_and_page(mesh, viewer):
    mesh.wait(lambda: _all_up(viewer), "three links up")
    names = [row["name"] for row in _links(viewer)["items"]]
    assert [row["name"] for row in _links(viewer, sort="name", sort_reverse="1")["items"]] == names[::-1]
    assert sorted(_pair(row) for row in _links(viewer, name="c")["items"]) == ["AC", "BC"]
    page = _links(viewer, page_size="2", page="2")
    assert (page["page"], page["page_size"], page["page_count"], page["total_count"]) == (2, 2, 2, 3)
    assert [row["name"] for row in page["items"]] == names[2:]


@pytest.mark.parametrize("params, status, code", [
    ({"sort": "peer"}, 400, "bad_request"), ({"page_size": "501"}, 400, "bad_request"),
    ({"page": "3"}, 404, "not_found"),
])
def test_links_refuse_bad_parameters_with_json_errors(mesh, viewer, params, status, code):
    expect_error(viewer.get("/api/v1/links", params), status, code)


def test_links_to_a_killed_node_go_down(mesh, viewer):
    mesh.wait(lambda: _all_up(viewer), "three links up")
    mesh.c.kill9()
    try:
        mesh.wait(lambda: {_pair(r): r["state"] for r in _links(viewer)["items"]} == {"AB": "up", "AC": "down",
                                                                                       "BC": "down"},
                  "the links to C down, A–B up")
    finally:
        mesh.c.start()
    mesh.wait(lambda: _all_up(viewer), "the links to C up again", timeout=30)
