"""PUT and DELETE /api/v1/vhosts/<name>/permissions/<user> (RabbitMQ's
/api/permissions/{vhost}/{user}): an admin sets a user's configure, write and read
patterns on every node, or clears them; all three are required and checked as the
nodes compile them; bad input is a 400 (never a 500), a viewer's a 403, a vhost no
node has a 400 naming it, clearing what no command set a 404."""

from __future__ import annotations

import pytest
from e2e_support import unique

from tests.console.api_support import expect_error, expect_no_traceback, expect_ok, permission_rows, vhost_url

pytestmark = pytest.mark.django_db
ALL = {"configure": ".*", "write": ".*", "read": ".*"}


def test_an_admin_sets_and_clears_a_users_permissions_on_every_node(mesh, admin):
    name = unique("team")
    expect_ok(admin.post("/api/v1/vhosts", {"name": name}, format="json"))
    user = "dev/ops é"  # a name with a slash and a space reaches the node as it is
    url = vhost_url(name, "permissions", user)
    mesh.wait(lambda: admin.put(url, ALL, format="json").status_code == 200, f"vhost {name} on the asked node")
    done = expect_ok(admin.put(url, {"configure": "", "write": "^x$", "read": ".*"}, format="json"))
    assert done["result"]["action"] == "vhost_permissions_set" and user in done["result"]["target"], done
    rows = permission_rows(mesh, admin, name, 3)
    assert {(row["user"], row["write"]) for row in rows} == {(user, "^x$")}, rows
    assert expect_ok(admin.put(url, {"configure": "", "write": "^x$", "read": ".*"},
                               format="json"))["result"]["detail"] == "unchanged"
    cleared = expect_ok(admin.delete(url))
    assert cleared["result"]["action"] == "vhost_permissions_clear", cleared
    permission_rows(mesh, admin, name, 0)
    expect_error(admin.delete(url), 404, "not_found")


@pytest.mark.parametrize("body", [
    {"configure": "(", "write": "", "read": ""},
    {"configure": "", "write": "[a-", "read": ""},
    {"configure": "", "write": ""},
    {"configure": 1, "write": "", "read": ""},
    {"configure": None, "write": "", "read": ""},
    {"configure": "a" * 1025, "write": "", "read": ""},
    {"configure": "", "write": "", "read": "", "tag": "x"},
    ["configure"], "configure=.*",
])
def test_bad_patterns_are_a_400(mesh, admin, body, caplog):
    expect_error(admin.put(vhost_url("/", "permissions", "bob"), body, format="json"), 400, "bad_request")
    expect_no_traceback(caplog)


@pytest.mark.parametrize(("vhost", "user"), [("/", "b\x07ob"), ("/", "x" * 256), ("bell\x07", "bob"),
                                             ("", "bob")])
def test_bad_names_are_a_4xx(mesh, admin, vhost, user, caplog):
    response = admin.put(vhost_url(vhost, "permissions", user), ALL, format="json")
    assert response.status_code in (400, 404, 405), response.content[:300]  # "vhosts//…" is another path
    assert response.json()["error"]["code"], response.content[:300]
    expect_no_traceback(caplog)


def test_setting_needs_an_admin_and_a_vhost_the_node_has(mesh, admin, viewer):
    expect_error(viewer.put(vhost_url("/", "permissions", "bob"), ALL, format="json"), 403, "forbidden")
    expect_error(viewer.delete(vhost_url("/", "permissions", "bob")), 403, "forbidden")
    error = expect_error(admin.put(vhost_url(unique("none"), "permissions", "bob"), ALL, format="json"), 400,
                         "bad_request")
    assert "no vhost" in error["message"], error
