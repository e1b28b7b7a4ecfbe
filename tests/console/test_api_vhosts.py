"""GET/POST /api/v1/vhosts and GET/DELETE /api/v1/vhosts/<name>: the vhosts of the
mesh with what each holds (every node asked), made and deleted mesh-wide by an admin,
a deletion refused (409, the reason) while the vhost holds messages unless ``force``;
names by the rule for vhost names (a 400), "/" spelt %2F."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from e2e_support import unique
from mesh_support import send_many
from vhost_support import clients_fixture  # noqa: F401  (the fixture)

from tests.console.api_support import expect_error, expect_ok

pytestmark = pytest.mark.django_db


def _url(name: str) -> str:
    return "/api/v1/vhosts/" + quote(name, safe="")


def _add(mesh, admin, name: str, **body) -> dict:
    """``name`` made through the API, awaited on every node."""
    done = expect_ok(admin.post("/api/v1/vhosts", {"name": name, **body}, format="json"))
    assert done["result"]["action"] == "vhost_add" and done["result"]["target"] == name, done
    mesh.wait(lambda: _row(admin, name) and _row(admin, name)["node_count"] == 3, f"vhost {name} on every node")
    return done


def _row(client, name: str) -> dict | None:
    items = expect_ok(client.get("/api/v1/vhosts", {"page_size": "500"}))["items"]
    return next((row for row in items if row["name"] == name), None)


def test_vhosts_refuse_anonymous_and_viewers_may_not_change_them(mesh, anonymous, viewer):
    expect_error(anonymous.get("/api/v1/vhosts"), 401, "unauthenticated")
    expect_error(anonymous.get(_url("/")), 401, "unauthenticated")
    expect_error(viewer.post("/api/v1/vhosts", {"name": unique("v")}, format="json"), 403, "forbidden")
    expect_error(viewer.delete(_url("/")), 403, "forbidden")


def test_the_default_vhost_is_listed_on_every_node_and_spelt_2f(mesh, viewer):
    row = _row(viewer, "/")
    assert row is not None and row["origin"] == "default" and row["node_count"] == 3, row
    assert [part["node_name"] for part in row["nodes"]] == ["A", "B", "C"]
    detail = expect_ok(viewer.get(_url("/")))
    assert detail["name"] == "/" and detail["definition"] is None
    # Management does not expose limits nor permissions: said, not guessed.
    assert detail["limits"] is None and detail["permissions"] is None


def test_an_admin_adds_a_vhost_its_figures_are_summed_and_a_delete_holding_messages_is_refused(
        mesh, admin, clients):
    name = unique("team/é ")  # a "/", a space and a non-ASCII letter: URL-encoded, kept as they are
    _add(mesh, admin, name, description="the orders team")
    client = clients.stomp_on(mesh.b.proc, name)
    send_many(client, "/queue/orders", ["one", "two"])
    mesh.wait(lambda: _row(admin, name)["messages"] == 2, "the vhost's two messages listed")
    row = _row(admin, name)
    assert (row["origin"], row["queues"], row["connections"]) == ("definition", 1, 1), row
    on_b = next(part for part in row["nodes"] if part["node_name"] == "B")
    assert (on_b["queues"], on_b["messages"], on_b["connections"]) == (1, 2, 1), row

    detail = expect_ok(admin.get(_url(name)))
    assert detail["messages"] == 2 and detail["definition"]["description"] == "the orders team"
    assert detail["definition"]["origin_name"] in ("A", "B", "C") and detail["failures"] == []

    refused = expect_error(admin.delete(_url(name)), 409, "conflict")
    assert "holds 2 message(s)" in refused["message"] and "2 on B" in refused["message"], refused
    assert _row(admin, name) is not None

    deleted = expect_ok(admin.delete(_url(name), QUERY_STRING="force=true"))
    assert deleted["result"]["action"] == "vhost_delete" and deleted["result"]["count"] == 2, deleted
    mesh.wait(lambda: _row(admin, name) is None, f"vhost {name} gone from every node")
    expect_error(admin.get(_url(name)), 404, "not_found")


def test_an_empty_vhost_is_deleted_without_force(mesh, admin):
    name = unique("empty")
    _add(mesh, admin, name)
    expect_ok(admin.delete(_url(name)))
    mesh.wait(lambda: _row(admin, name) is None, f"vhost {name} gone")


@pytest.mark.parametrize("body", [{}, {"name": ""}, {"name": 5}, {"name": "bell\x07"}, {"name": "x" * 256},
                                  {"name": "ok", "limits": {}}, {"name": "ok", "description": "a\nb"}, ["ok"]],
                         ids=["missing", "empty", "number", "control", "too-long", "unknown-field",
                              "control-in-description", "not-an-object"])
def test_a_bad_vhost_to_add_is_a_400(mesh, admin, body, caplog):
    expect_error(admin.post("/api/v1/vhosts", body, format="json"), 400, "bad_request")
    assert not any(row["name"] == "ok" for row in expect_ok(admin.get("/api/v1/vhosts"))["items"])


def test_bad_names_and_parameters_on_one_vhost_are_4xx(mesh, admin):
    expect_error(admin.get(_url("bell\x07")), 400, "bad_request")
    expect_error(admin.delete(_url("bell\x07")), 400, "bad_request")
    expect_error(admin.delete(_url(unique("none")), QUERY_STRING="force=perhaps"), 400, "bad_request")
    expect_error(admin.get(_url(unique("none"))), 404, "not_found")
    expect_error(admin.delete(_url(unique("none"))), 404, "not_found")
    refused = expect_error(admin.delete(_url("/")), 400, "bad_request")
    assert "cannot be deleted" in refused["message"]
    expect_error(admin.get("/api/v1/vhosts", {"sort": "colour"}), 400, "bad_request")
