"""GET /api/v1/nodes (a page of node rows) and /api/v1/nodes/<id or name> (one node
with its links, partial queues and topic subscriptions), from the nodes' snapshots."""

from __future__ import annotations

import pytest
from e2e_support import unique

from tests.console.api_support import expect_error, expect_ok

pytestmark = pytest.mark.django_db


def test_nodes_refuse_anonymous(mesh, anonymous):
    expect_error(anonymous.get("/api/v1/nodes"), 401, "unauthenticated")
    expect_error(anonymous.get("/api/v1/nodes/A"), 401, "unauthenticated")


def test_node_list_is_a_page_of_every_node_up(mesh, viewer):
    body = expect_ok(viewer.get("/api/v1/nodes"))
    assert {k: body[k] for k in ("page", "page_size", "page_count", "total_count")} == \
        {"page": 1, "page_size": 100, "page_count": 1, "total_count": 3}
    assert [row["name"] for row in body["items"]] == ["A", "B", "C"]
    for row, member in zip(body["items"], mesh.nodes, strict=True):
        # Seconds since its last snapshot (seen a hair below 0 under load: the node's clock reading
        # and the console's are taken in different processes).
        assert row["state"] == "up" and row["age"] is not None and -0.5 < row["age"] < 3, row
        assert row["node"]["id"] == row["id"] and row["node"]["name"] == member.name
        assert row["node"]["addresses"]["stomp"].endswith(f":{member.stomp}"), row["node"]["addresses"]
    ids = {row["id"] for row in body["items"]}
    assert len(ids) == 3


def test_node_list_sorts_both_ways_and_pages(mesh, viewer):
    listed = expect_ok(viewer.get("/api/v1/nodes", {"sort": "name", "sort_reverse": "true"}))
    names = [row["name"] for row in listed["items"]]
    assert names == ["C", "B", "A"]
    page = expect_ok(viewer.get("/api/v1/nodes", {"page_size": "2", "page": "2"}))
    assert (page["page"], page["page_count"], page["total_count"]) == (2, 2, 3)
    assert [row["name"] for row in page["items"]] == ["C"]
    assert [row["name"] for row in expect_ok(viewer.get("/api/v1/nodes", {"name": "b"}))["items"]] == ["B"]


@pytest.mark.parametrize("params, field", [({"sort": "bogus"}, "sort"), ({"page_size": "0"}, "page_size"),
                                           ({"page_size": "x"}, "page_size"), ({"page_size": "9" * 5000}, "page_size"),
                                           ({"sort_reverse": "perhaps"}, "sort_reverse")])
def test_node_list_refuses_bad_parameters(mesh, viewer, params, field):
    assert field in expect_error(viewer.get("/api/v1/nodes", params), 400, "bad_request")["message"]


def test_node_list_answers_404_for_a_page_out_of_range(mesh, viewer):
    expect_error(viewer.get("/api/v1/nodes", {"page": "5"}), 404, "not_found")


def test_node_detail_by_name_and_id_holds_its_links_and_queues(mesh, viewer):
    queue = unique("nd")
    mesh.send(mesh.b, queue, ["one", "two", "three"])

    def with_queue():
        detail = expect_ok(viewer.get("/api/v1/nodes/B"))
        mine = [q for q in detail["partial_queues"] if q["name"] == queue]
        links_up = [link for link in detail["links"] if link["state"] == "up"]
        return detail if mine and mine[0]["depth"] == 3 and len(links_up) == 2 else None

    detail = mesh.wait(with_queue, "node B's detail to list its two links and the queue with 3 messages")
    assert detail["name"] == "B" and detail["state"] == "up"
    (partial,) = [q for q in detail["partial_queues"] if q["name"] == queue]
    assert partial["node"] == detail["id"] and partial["consumers"] == 0 and partial["enqueued"] == 3
    names = {row["id"]: row["name"] for row in expect_ok(viewer.get("/api/v1/nodes"))["items"]}
    assert sorted(link["peer_name"] for link in detail["links"]) == ["A", "C"]
    assert all(link["state"] == "up" and link["node"] == detail["id"] and names[link["peer"]] == link["peer_name"]
               for link in detail["links"]), detail["links"]
    assert detail["subscriptions"] == []
    assert (detail["links_up"], detail["links_down"]) == (2, 0)

    by_id = expect_ok(viewer.get(f"/api/v1/nodes/{detail['id']}"))
    assert by_id["id"] == detail["id"] and by_id["name"] == "B"
    # The other nodes do not hold B's partial queue.
    assert all(q["name"] != queue for q in expect_ok(viewer.get("/api/v1/nodes/A"))["partial_queues"])


def test_node_detail_lists_topic_subscriptions(mesh, viewer):
    topic = unique("nt")
    subscriber = mesh.c.client()
    try:
        subscriber.subscribe(f"/topic/{topic}")
        detail = mesh.wait(lambda: (d := expect_ok(viewer.get("/api/v1/nodes/C")))["subscriptions"] and d,
                           "node C's detail to list the topic subscription")
        (subscription,) = detail["subscriptions"]
        assert subscription["destination"] == f"/topic/{topic}" and subscription["active"] is True
        assert subscription["durable"] is False and subscription["node"] == detail["id"]
    finally:
        subscriber.disconnect()


def test_node_detail_answers_404_json_for_an_unknown_node(mesh, viewer):
    error = expect_error(viewer.get("/api/v1/nodes/Z"), 404, "not_found")
    assert "'Z'" in error["message"]
