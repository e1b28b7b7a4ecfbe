"""PUT /api/v1/vhosts/<name>/limits and the limits in GET /api/v1/vhosts/<name>: an
admin sets the limits of a vhost made by command, on every node at once (a STOMP
connection beyond max_connections refused on another node); a limit left out is
kept, null removes it; bad input is a 400, a vhost not made by command a 404 or 409."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from e2e_support import unique
from vhost_support import ConnectRefused, clients_fixture  # noqa: F401  (the fixture)

from tests.console.api_support import expect_error, expect_ok

pytestmark = pytest.mark.django_db


def _url(name: str, *rest: str) -> str:
    return "/api/v1/vhosts/" + quote(name, safe="") + "".join("/" + part for part in rest)


def _on_every_node(mesh, admin, name: str, limits: dict) -> None:
    def there() -> bool:
        rows = expect_ok(admin.get("/api/v1/vhosts", {"page_size": "500"}))["items"]
        row = next((row for row in rows if row["name"] == name), None)
        return row is not None and row["node_count"] == 3 and expect_ok(admin.get(_url(name)))["limits"] == limits
    mesh.wait(there, f"vhost {name} with limits {limits}")


def test_limits_set_by_an_admin_hold_on_every_node_and_are_shown(mesh, admin, clients):
    name = unique("team")
    expect_ok(admin.post("/api/v1/vhosts", {"name": name}, format="json"))
    _on_every_node(mesh, admin, name, {"max_connections": None, "max_queues": None, "max_messages": None})

    done = expect_ok(admin.put(_url(name, "limits"), {"max_connections": 1, "max_queues": 4}, format="json"))
    assert done["result"]["action"] == "vhost_limits" and done["result"]["target"] == name, done
    _on_every_node(mesh, admin, name, {"max_connections": 1, "max_queues": 4, "max_messages": None})
    clients.stomp_on(mesh.c.proc, name)
    with pytest.raises(ConnectRefused):
        clients.stomp_on(mesh.c.proc, name)

    expect_ok(admin.put(_url(name, "limits"), {"max_connections": None}, format="json"))  # others kept
    _on_every_node(mesh, admin, name, {"max_connections": None, "max_queues": 4, "max_messages": None})
    clients.stomp_on(mesh.c.proc, name)


@pytest.mark.parametrize("body", [{"max_connections": -1}, {"max_queues": "many"}, {"max_messages": 2**31},
                                  {"max_connections": 1.5}, {}, {"max_conections": 1}, [1]])
def test_bad_limits_are_a_400(mesh, admin, body):
    expect_error(admin.put(_url(unique("team"), "limits"), body, format="json"), 400, "bad_request")


def test_limits_need_an_admin_and_a_vhost_made_by_command(mesh, admin, viewer):
    expect_error(viewer.put(_url("/", "limits"), {"max_queues": 1}, format="json"), 403, "forbidden")
    expect_error(admin.put(_url(unique("none"), "limits"), {"max_queues": 1}, format="json"), 404, "not_found")
    expect_error(admin.put(_url("/", "limits"), {"max_queues": 1}, format="json"), 409, "conflict")
    assert expect_ok(admin.get(_url("/")))["limits"] is None
