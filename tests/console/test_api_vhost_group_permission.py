"""PUT and DELETE /api/v1/vhosts/<name>/permissions/group/<group>: a group's
permissions, as a user's (a principal is granted what its own and its groups'
entries grant); a user called "group" is still a user."""

from __future__ import annotations

import pytest

from tests.console.api_support import expect_error, expect_ok, permission_rows, vhost_url

pytestmark = pytest.mark.django_db
PATTERNS = {"configure": "^ops\\.", "write": ".*", "read": ""}


def test_an_admin_sets_and_clears_a_groups_permissions(mesh, admin, viewer):
    url = vhost_url("/", "permissions", "group", "ops")
    done = expect_ok(admin.put(url, PATTERNS, format="json"))
    assert done["result"]["target"] == "group 'ops' in vhost '/'", done
    expect_ok(admin.put(vhost_url("/", "permissions", "group"), PATTERNS, format="json"))  # the user "group"
    rows = permission_rows(mesh, viewer, "/", 6)
    assert {(row["user"], row["group"]) for row in rows} == {(None, "ops"), ("group", None)}, rows
    expect_ok(admin.delete(url))
    expect_ok(admin.delete(vhost_url("/", "permissions", "group")))
    permission_rows(mesh, viewer, "/", 0)


def test_a_group_needs_an_admin_and_good_input(mesh, admin, viewer):
    url = vhost_url("/", "permissions", "group", "ops")
    expect_error(viewer.put(url, PATTERNS, format="json"), 403, "forbidden")
    expect_error(admin.put(url, {**PATTERNS, "read": "(?"}, format="json"), 400, "bad_request")
    expect_error(admin.put(vhost_url("/", "permissions", "group", "o\tps"), PATTERNS, format="json"), 400,
                 "bad_request")
    # A newline no path matches: Django's 404, JSON like every error
    expect_error(admin.put(vhost_url("/", "permissions", "group", "o\nps"), PATTERNS, format="json"), 404,
                 "not_found")
    expect_error(admin.delete(url), 404, "not_found")
