"""GET /api/v1/vhosts/<name>/permissions: every node's vhost permissions for the vhost
(RabbitMQ's GET /api/vhosts/{vhost}/permissions), one row per entry and node with
where it comes from; a bad vhost name is a 400, one no node has a 404."""

from __future__ import annotations

import pytest
from e2e_support import unique

from tests.console.api_support import expect_error, expect_ok, permission_rows, vhost_url

pytestmark = pytest.mark.django_db


def test_a_viewer_sees_each_nodes_entries_with_their_source(mesh, admin, viewer):
    name = unique("team")
    expect_ok(admin.post("/api/v1/vhosts", {"name": name}, format="json"))
    mesh.wait(lambda: expect_ok(viewer.get(vhost_url(name, "permissions")))["items"] == [], f"vhost {name}")
    expect_ok(admin.put(vhost_url(name, "permissions", "bob"), {"configure": "^b", "write": "", "read": ".*"},
                        format="json"))
    rows = permission_rows(mesh, viewer, name, 3)
    assert {row["node_name"] for row in rows} == {"A", "B", "C"}, rows
    assert all((row["vhost"], row["user"], row["group"], row["configure"], row["write"], row["read"],
                row["source"], row["in_force"]) == (name, "bob", None, "^b", "", ".*", "command", True)
               for row in rows), rows
    assert not any(row["map_active"] for row in rows)  # the console's mesh lets clients in without users
    expect_ok(admin.delete(vhost_url(name, "permissions", "bob")))
    assert permission_rows(mesh, viewer, name, 0) == []


def test_a_bad_or_unknown_vhost_is_a_4xx(mesh, viewer):
    expect_error(viewer.get(vhost_url("bell\x07", "permissions")), 400, "bad_request")
    expect_error(viewer.get(vhost_url(unique("none"), "permissions")), 404, "not_found")
