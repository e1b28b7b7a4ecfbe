"""The console pointed at addresses where no node listens: every request that goes to
the mesh (actions, connections) answers 503 with a JSON error, while what is read
from the nodes' snapshots in Redis still works, and auth and input checks still come
first."""

from __future__ import annotations

import pytest
from e2e_support import unique
from mesh_support import free_port

from tests.console.api_support import expect_error

pytestmark = pytest.mark.django_db


@pytest.fixture
def nowhere(mesh, settings):
    """The console's management requests go to two ports no node listens on."""
    from console.mesh import sources

    ports = [free_port(), free_port()]
    settings.MESHGATE = {**settings.MESHGATE, "STOMP": [f"127.0.0.1:{port}" for port in ports]}
    sources.management.cache_clear()
    yield ports
    sources.management.cache_clear()


@pytest.fixture(scope="module")
def queue(mesh):
    """A queue with two messages waiting on B."""
    name = unique("un")
    mesh.send(mesh.b, name, ["one", "two"])
    return name


_ASKING = [
    pytest.param("post", "/api/v1/queues/{queue}/purge", {"node": "B"}, id="purge"),
    pytest.param("post", "/api/v1/queues/{queue}/move", {"node": "B", "to_node": "C"}, id="move"),
    pytest.param("post", "/api/v1/queues/{queue}/browse", {"node": "B"}, id="browse"),
    pytest.param("post", "/api/v1/queues/{queue}/send", {"body": "x"}, id="send"),
    pytest.param("delete", "/api/v1/queues/{queue}?node=B", None, id="delete"),
    pytest.param("delete", "/api/v1/connections/B-1", None, id="close-connection"),
    pytest.param("get", "/api/v1/connections", None, id="connections"),
]


def _request(client, method: str, path: str, body: dict | None):
    if method in ("post", "put"):
        return getattr(client, method)(path, body, format="json")
    return getattr(client, method)(path)


@pytest.mark.parametrize("method, path, body", _ASKING)
def test_requests_to_the_mesh_answer_503_json(mesh, admin, nowhere, queue, method, path, body):
    error = expect_error(_request(admin, method, path.format(queue=queue), body), 503, "unreachable")
    # The message says which addresses were tried.
    assert all(f"127.0.0.1:{port}" in error["message"] for port in nowhere), error


@pytest.mark.parametrize("method, path, body", [
    pytest.param("post", "/api/v1/queues/q%00x/purge", {}, id="purge"),
    pytest.param("post", "/api/v1/queues/{queue}/move", {"node": "B", "to_queue": "to\x01q"}, id="move-to"),
    pytest.param("delete", "/api/v1/queues/q%7Fx?node=B", None, id="delete"),
    pytest.param("put", "/api/v1/definitions/queues/q%0Bx", {}, id="define-queue"),
    pytest.param("put", "/api/v1/definitions/queues/{queue}", {"dead_letter_queue": "dlq\x1b"}, id="dead-letter-queue"),
    pytest.param("delete", "/api/v1/definitions/queues/q%0Dx", None, id="delete-definition"),
    pytest.param("delete", "/api/v1/definitions/durable/app.s%09x", None, id="delete-durable"),
    pytest.param("delete", "/api/v1/connections/B-1%1B", None, id="close-connection"),
])
def test_a_bad_name_is_refused_before_asking_the_mesh(mesh, admin, nowhere, queue, method, path, body):
    error = expect_error(_request(admin, method, path.format(queue=queue), body), 400, "bad_request")
    assert "invalid " in error["message"] and "names are printable characters only" in error["message"], error


def test_nothing_reaches_the_mesh_by_another_way(mesh, admin, settings, queue):
    """With the console pointed nowhere every action fails; pointed at the mesh again, the
    messages the purge, move and delete would have taken still wait on B."""
    from console.mesh import sources

    reachable = settings.MESHGATE
    settings.MESHGATE = {**reachable, "STOMP": [f"127.0.0.1:{free_port()}"]}
    sources.management.cache_clear()
    try:
        for param in _ASKING:
            method, path, body = param.values
            assert _request(admin, method, path.format(queue=queue), body).status_code == 503
    finally:
        settings.MESHGATE = reachable
        sources.management.cache_clear()
    page = admin.post(f"/api/v1/queues/{queue}/browse", {"node": "B"}, format="json")
    assert page.status_code == 200, page.content[:500]
    assert [m["body"] for m in page.json()["result"][0]["messages"]] == ["one", "two"]


def test_reads_from_redis_still_work(mesh, viewer, nowhere, queue):
    overview = viewer.get("/api/v1/overview")
    assert overview.status_code == 200 and overview.json()["nodes_up"] == 3
    nodes = viewer.get("/api/v1/nodes").json()
    assert [row["name"] for row in nodes["items"]] == ["A", "B", "C"]
    row = mesh.wait(lambda: (r := viewer.get(f"/api/v1/queues/{queue}")).status_code == 200 and r.json(),
                    "the queue in the view")
    assert row["messages"] == 2 and [part["node_name"] for part in row["nodes"]] == ["B"]
    listed = viewer.get("/api/v1/queues", {"name": queue}).json()
    assert [item["name"] for item in listed["items"]] == [queue]
    assert viewer.get("/api/v1/links").json()["total_count"] == 3
    assert viewer.get("/api/v1/events", {"kind": "link_up"}).json()["total_count"] >= 6
    assert viewer.get(f"/api/v1/queues/{queue}/history", {"seconds": "10"}).status_code == 200
    assert viewer.get("/api/v1/overview/history", {"seconds": "10"}).status_code == 200


def test_auth_and_input_are_checked_before_asking_the_mesh(mesh, anonymous, viewer, admin, nowhere, queue):
    expect_error(anonymous.get("/api/v1/connections"), 401, "unauthenticated")
    expect_error(viewer.post(f"/api/v1/queues/{queue}/purge", {}, format="json"), 403, "forbidden")
    expect_error(viewer.delete("/api/v1/connections/B-1"), 403, "forbidden")
    expect_error(admin.post(f"/api/v1/queues/{queue}/move", {"node": "B", "to_queue": "x", "to_node": "C"},
                      format="json"), 400, "bad_request")
    expect_error(admin.post(f"/api/v1/queues/{queue}/browse", {"limit": 501}, format="json"), 400, "bad_request")
