"""GET /api/v1/queues: the cluster-wide queues, in pages
(``{items, page, page_size, page_count, total_count}``), sorted, filtered by name."""

from __future__ import annotations

import pytest
from e2e_support import unique
from mesh_support import send_many

from tests.console.api_support import expect_error, expect_ok

pytestmark = pytest.mark.django_db


def _queues(client, **params) -> dict:
    return expect_ok(client.get("/api/v1/queues", params))


@pytest.fixture(scope="module")
def family(mesh):
    """Five queues named ``<prefix>.<i>`` holding 5, 1, 4, 2, 3 messages, sent on A, B and C."""
    prefix = unique("ql")
    depths = {f"{prefix}.{i}": depth for i, depth in enumerate((5, 1, 4, 2, 3))}
    for i, (name, depth) in enumerate(depths.items()):
        sender = mesh.nodes[i % 3].client()
        try:
            send_many(sender, f"/queue/{name}", [f"{name}-{n}" for n in range(depth)])
        finally:
            sender.disconnect()
    return prefix, depths


def _family_listed(client, mesh, family) -> dict:
    prefix, depths = family
    return mesh.wait(lambda: (b := _queues(client, name=prefix))["total_count"] == 5
                     and {row["name"]: row["messages"] for row in b["items"]} == depths and b,
                     "the five queues with their messages")


def test_queues_refuse_anonymous(mesh, anonymous):
    expect_error(anonymous.get("/api/v1/queues"), 401, "unauthenticated")


def test_queue_list_is_one_page_of_rows_with_per_node_parts(mesh, viewer, family):
    body = _family_listed(viewer, mesh, family)
    prefix, depths = family
    assert (body["page"], body["page_size"], body["page_count"]) == (1, 100, 1)
    names = {row["id"]: row["name"] for row in viewer.get("/api/v1/nodes").json()["items"]}
    for i, row in enumerate(body["items"]):
        assert row["name"] == f"{prefix}.{i}"  # by name by default
        assert row["depth"] == row["messages"] and row["node_count"] == 1 and row["consumers"] == 0, row
        (part,) = row["nodes"]
        assert part["node_name"] == "ABC"[i % 3] and names[part["node"]] == part["node_name"], part
        # Lists say where the messages and consumers are; the queue's own page has the rest.
        assert part["messages"] == row["depth"] and set(part) == {"node", "node_name", "messages", "consumers",
                                                                   "in_flight", "in_doubt"}, part


def test_queue_list_pages_cover_every_row_once(mesh, viewer, family):
    _family_listed(viewer, mesh, family)
    prefix, depths = family
    pages = [_queues(viewer, name=prefix, page_size="2", page=str(n)) for n in (1, 2, 3)]
    for number, page in enumerate(pages, start=1):
        assert (page["page"], page["page_size"], page["page_count"], page["total_count"]) == (number, 2, 3, 5)
    assert [len(page["items"]) for page in pages] == [2, 2, 1]
    assert [row["name"] for page in pages for row in page["items"]] == sorted(depths)
    whole = _queues(viewer, name=prefix, page_size="500")
    assert (whole["page_count"], whole["page_size"], len(whole["items"])) == (1, 500, 5)


@pytest.mark.parametrize("field", ["messages", "depth", "name"])
def test_queue_list_sorts_both_ways(mesh, viewer, family, field):
    _family_listed(viewer, mesh, family)
    prefix, depths = family
    expected = sorted(depths, key=(lambda name: name) if field == "name" else depths.get)
    assert [row["name"] for row in _queues(viewer, name=prefix, sort=field)["items"]] == expected
    assert [row["name"] for row in _queues(viewer, name=prefix, sort=field, sort_reverse="true")["items"]] \
        == expected[::-1]
    # Sorting happens before paging: the first page holds the largest ones.
    if field != "name":
        first = _queues(viewer, name=prefix, sort=field, sort_reverse="true", page_size="2")["items"]
        assert [depths[row["name"]] for row in first] == [5, 4]


def test_queue_list_filters_by_part_of_the_name_in_any_case(mesh, viewer, family):
    _family_listed(viewer, mesh, family)
    prefix, _ = family
    assert [row["name"] for row in _queues(viewer, name=prefix.upper() + ".3")["items"]] == [f"{prefix}.3"]
    nothing = _queues(viewer, name=unique("none"))
    assert (nothing["items"], nothing["total_count"], nothing["page"], nothing["page_count"]) == ([], 0, 1, 1)
    everything = _queues(viewer)
    assert everything["total_count"] >= 5


@pytest.mark.parametrize("page_size", ["0", "501", "x", "-1", ""])
def test_queue_list_refuses_bad_page_sizes_with_json_400(mesh, viewer, page_size):
    error = expect_error(viewer.get("/api/v1/queues", {"page_size": page_size}), 400, "bad_request")
    assert "page_size" in error["message"]


@pytest.mark.parametrize("page", ["4", "0", "x"])
def test_queue_list_answers_json_404_for_a_page_out_of_range(mesh, viewer, family, page):
    _family_listed(viewer, mesh, family)
    expect_error(viewer.get("/api/v1/queues", {"name": family[0], "page_size": "2", "page": page}), 404, "not_found")


def test_queue_list_refuses_an_unknown_sort_field(mesh, viewer):
    error = expect_error(viewer.get("/api/v1/queues", {"sort": "bogus"}), 400, "bad_request")
    assert "sort" in error["message"] and "messages" in error["message"]


def test_names_with_digits_int_cannot_read_sort_as_text(mesh, viewer):
    prefix = unique("qd")
    names = [f"{prefix}.9²", f"{prefix}.10", f"{prefix}.9", f"{prefix}.{'7' * 200}"]
    sender = mesh.nodes[0].client()
    try:
        for name in names:
            send_many(sender, f"/queue/{name}", ["x"])
    finally:
        sender.disconnect()
    mesh.wait(lambda: _queues(viewer, name=prefix)["total_count"] == 4, "the four queues")
    assert [row["name"] for row in _queues(viewer, name=prefix, sort="name")["items"]] == [
        f"{prefix}.9", f"{prefix}.9²", f"{prefix}.10", f"{prefix}.{'7' * 200}"]
