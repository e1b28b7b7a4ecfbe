"""``?vhost=`` on the lists (queues, connections, definitions) and on the queue URLs:
two vhosts with a queue of the same name stay apart, in what is listed and in what an
action touches; "/" is %2F; a list without it shows every vhost; a bad vhost name is
a 400."""

from __future__ import annotations

import pytest
from e2e_support import manage_result, unique
from mesh_support import send_many
from vhost_support import clients_fixture  # noqa: F401  (the fixture)

from model.requests import VhostAdd, VhostList
from tests.console.api_support import expect_error, expect_ok

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def team(mesh):
    """A vhost made by command on A, awaited on every node; "/" in its name, as %2F in URLs."""
    name = unique("team b/")
    manage_result(mesh.a.stomp, VhostAdd(name=name))
    for node in mesh.nodes:
        mesh.wait(lambda node=node: name in {row.name for row in manage_result(node.stomp, VhostList())},
                  f"vhost {name} on {node.name}")
    return name


def _queues(client, **params) -> list[dict]:
    return expect_ok(client.get("/api/v1/queues", {"page_size": "500", **params}))["items"]


def _shared_queue(mesh, team, clients, client) -> str:
    """A queue of the same name in both vhosts: 1 message in "/" on A, 2 in ``team`` on B,
    awaited in the snapshots."""
    queue = unique("shared")
    mesh.send(mesh.a, queue, ["default"])
    send_many(clients.stomp_on(mesh.b.proc, team), f"/queue/{queue}", ["team-1", "team-2"])
    mesh.wait(lambda: {row["vhost"]: row["messages"] for row in _queues(client, name=queue)} == {"/": 1, team: 2},
              f"{queue} of both vhosts in the snapshots")
    return queue


def test_queues_of_one_vhost_every_vhost_and_the_default_one(mesh, team, viewer, clients):
    queue = _shared_queue(mesh, team, clients, viewer)
    every = {row["vhost"]: row for row in _queues(viewer, name=queue)}
    assert set(every) == {"/", team} and every["/"]["messages"] == 1 and every[team]["messages"] == 2, every
    assert [where["node_name"] for where in every[team]["nodes"]] == ["B"]

    only_team = _queues(viewer, name=queue, vhost=team)
    assert [(row["vhost"], row["messages"]) for row in only_team] == [(team, 2)]
    only_default = _queues(viewer, name=queue, vhost="/")
    assert [(row["vhost"], row["messages"]) for row in only_default] == [("/", 1)]


def test_a_queue_url_names_its_vhost_and_an_action_stays_inside_it(mesh, team, admin, clients):
    queue = _shared_queue(mesh, team, clients, admin)
    detail = expect_ok(admin.get(f"/api/v1/queues/{queue}", {"vhost": team}))
    assert (detail["vhost"], detail["messages"]) == (team, 2)
    assert [(part["node_name"], part["partial"]["vhost"]) for part in detail["nodes"]] == [("B", team)]
    browsed = expect_ok(admin.post(f"/api/v1/queues/{queue}/browse?vhost={team.replace('/', '%2F')}", {},
                                   format="json"))
    assert sorted(m["body"] for page in browsed["result"] for m in page["messages"]) == ["team-1", "team-2"]

    purged = expect_ok(admin.post(f"/api/v1/queues/{queue}/purge?vhost={team.replace('/', '%2F')}", {},
                                  format="json"))
    assert sum(done["count"] for done in purged["result"]) == 2
    mesh.wait(lambda: expect_ok(admin.get(f"/api/v1/queues/{queue}", {"vhost": team}))["messages"] == 0,
              f"{team}'s {queue} purged")
    assert [row["messages"] for row in _queues(admin, name=queue, vhost="/")] == [1]  # "/"'s untouched
    expect_ok(admin.get(f"/api/v1/queues/{queue}/history", {"vhost": team}))
    expect_error(admin.get(f"/api/v1/queues/{unique('none')}", {"vhost": team}), 404, "not_found")


def test_connections_filtered_by_vhost(mesh, team, viewer, clients):
    client = clients.stomp_on(mesh.c.proc, team)
    session = client.connected_frame.headers["session"]

    def listed(**params) -> list[dict]:
        return expect_ok(viewer.get("/api/v1/connections", {"page_size": "500", **params}))["items"]

    in_team = mesh.wait(lambda: listed(vhost=team), f"a connection of {team}")
    assert [(row["id"], row["vhost"]) for row in in_team] == [(session, team)]
    assert session not in {row["id"] for row in listed(vhost="/")}
    assert {row["vhost"] for row in listed()} >= {"/", team}


def test_definitions_filtered_by_vhost_and_a_queue_defined_in_one(mesh, team, admin):
    queue = unique("defined")
    expect_ok(admin.put(f"/api/v1/definitions/queues/{queue}?vhost={team.replace('/', '%2F')}",
                        {"max_length": 5}, format="json"))

    def defined(**params) -> list[tuple[str, str]]:
        items = expect_ok(admin.get("/api/v1/definitions", {"page_size": "500", "name": queue, **params}))["items"]
        return [(row["in_vhost"], row["kind"]) for row in items if not row["deleted"]]

    assert defined(vhost=team) == [(team, "queue")]
    assert defined(vhost="/") == []
    assert defined() == [(team, "queue")]
    expect_ok(admin.delete(f"/api/v1/definitions/queues/{queue}?vhost={team.replace('/', '%2F')}"))
    assert defined(vhost=team) == []


@pytest.mark.parametrize("url", ["/api/v1/queues", "/api/v1/connections", "/api/v1/definitions",
                                 "/api/v1/queues/q", "/api/v1/queues/q/history"])
def test_a_bad_vhost_filter_is_a_400(mesh, viewer, url):
    expect_error(viewer.get(url, {"vhost": "bell\x07"}), 400, "bad_request")
    expect_error(viewer.get(url, {"vhost": ""}), 400, "bad_request")


def test_an_unknown_vhost_has_no_queue_and_the_nodes_refuse_acting_in_it(mesh, viewer, admin):
    expect_error(viewer.get("/api/v1/queues/q", {"vhost": unique("nowhere")}), 404, "not_found")
    # An action answers per node: every node's refusal is listed, nothing was done.
    purged = expect_ok(admin.post("/api/v1/queues/q/purge?vhost=nowhere", {}, format="json"))
    assert purged["result"] == [] and len(purged["failures"]) == 3, purged
    assert all(f["code"] == "bad_request" and "no vhost" in f["message"] for f in purged["failures"]), purged
