"""GET /api/v1/connections (every client connection of the mesh, asked afresh over
management requests, in pages, an AMQP connection with its channels) and DELETE
/api/v1/connections/<id> (an admin closes one: the client gets an ERROR frame with the
reason)."""

from __future__ import annotations

import pytest
from amqp_support import Pika, channels_holding_unacked
from e2e_support import unique

from tests.console.api_support import expect_error, expect_ok

pytestmark = pytest.mark.django_db


def _connections(client, **params) -> dict:
    return expect_ok(client.get("/api/v1/connections", params))


def _row(client, connection_id: str) -> dict | None:
    items = _connections(client, page_size="500")["items"]
    return next((row for row in items if row["id"] == connection_id), None)


def test_connections_refuse_anonymous(mesh, anonymous):
    expect_error(anonymous.get("/api/v1/connections"), 401, "unauthenticated")
    expect_error(anonymous.delete("/api/v1/connections/B-1"), 401, "unauthenticated")


def test_the_list_shows_a_client_with_its_node_user_protocol_and_version(mesh, viewer):
    ids = {row["name"]: row["id"] for row in viewer.get("/api/v1/nodes").json()["items"]}
    client_id = unique("client")
    client = mesh.b.client(version="1.1", headers={"client-id": client_id})
    try:
        client.subscribe(f"/queue/{unique('cn')}")
        session = client.connected_frame.headers["session"]
        row = _row(viewer, session)
        assert row is not None, _connections(viewer, page_size="500")
        assert (row["node"], row["node_name"], row["name"]) == (ids["B"], "B", session)
        assert (row["user"], row["protocol"], row["version"]) == ("anonymous", "stomp", "1.1")
        assert row["client_id"] == client_id and row["subscriptions"] == 1 and row["unacked"] == 0
        assert row["remote"].startswith("127.0.0.1:")
        body = _connections(viewer)
        assert body["failures"] == [] and body["total_count"] == len(body["items"]) >= 1
        # Every node answered: the console's own management connection is listed too.
        assert {r["node_name"] for r in body["items"]} >= {"A", "B"}
    finally:
        client.disconnect()
    mesh.wait(lambda: _row(viewer, session) is None, "the closed connection gone from the list")


def test_connections_sort_filter_and_page(mesh, viewer):
    clients = [mesh.b.client() for _ in range(3)] + [mesh.c.client()]
    try:
        on_b = sorted(c.connected_frame.headers["session"] for c in clients[:3])
        # Session ids are "<node name>-<n>": "B-" names exactly B's (the console itself talks to A).
        mesh.wait(lambda: _connections(viewer, name="B-")["total_count"] == 3, "B's three connections")
        pages = [_connections(viewer, name="B-", page_size="1", page=str(n)) for n in (1, 2, 3)]
        assert [(p["page"], p["page_size"], p["page_count"], p["total_count"]) for p in pages] == \
            [(1, 1, 3, 3), (2, 1, 3, 3), (3, 1, 3, 3)]
        assert [p["items"][0]["id"] for p in pages] == on_b  # by id by default
        reverse = _connections(viewer, name="B-", sort="name", sort_reverse="true")["items"]
        assert [r["id"] for r in reverse] == on_b[::-1]
        by_node = _connections(viewer, sort="node_name", sort_reverse="true", page_size="500")["items"]
        assert [r["node_name"] for r in by_node] == sorted((r["node_name"] for r in by_node), reverse=True)
        assert by_node[0]["node_name"] == "C"
        assert [r["id"] for r in _connections(viewer, name=on_b[1])["items"]] == [on_b[1]]
    finally:
        for client in clients:
            client.disconnect()


@pytest.mark.parametrize("params, status, code", [
    ({"sort": "remote"}, 400, "bad_request"), ({"page_size": "501"}, 400, "bad_request"),
    ({"page": "1000"}, 404, "not_found"),
])
def test_connections_refuse_bad_parameters(mesh, viewer, params, status, code):
    expect_error(viewer.get("/api/v1/connections", params), status, code)


def test_an_admin_closes_a_connection_and_the_client_gets_an_error_frame(mesh, admin):
    ids = {row["name"]: row["id"] for row in admin.get("/api/v1/nodes").json()["items"]}
    client = mesh.c.client()
    session = client.connected_frame.headers["session"]
    assert _row(admin, session) is not None
    response = admin.delete(f"/api/v1/connections/{session}")
    assert response.status_code == 200, response.content[:500]
    body = response.json()
    assert body["failures"] == []
    (done,) = body["result"]
    assert (done["node"], done["action"], done["target"]) == (ids["C"], "close_connection", session)
    error = client.listener.wait_error()
    assert "closed by operator from the console" in error.headers.get("message", "") + error.body, error.headers
    client.listener.wait_disconnected()
    mesh.wait(lambda: _row(admin, session) is None, "the closed connection gone from the list")
    # Recorded as an admin action in the console user's name.
    event = mesh.wait(lambda: next((e for e in admin.get("/api/v1/events", {"kind": "admin_action", "q": session})
                                    .json()["items"] if e["action"] == "close_connection" and e["ok"]), None),
                      "the close_connection event")
    assert event["user"] == "operator" and event["node"] == ids["C"]  # (the console's login is anonymous)


def test_a_viewer_may_not_close_a_connection(mesh, viewer):
    client = mesh.a.client()
    try:
        session = client.connected_frame.headers["session"]
        error = expect_error(viewer.delete(f"/api/v1/connections/{session}"), 403, "forbidden")
        assert "administrator" in error["message"]
        client.sync()  # still connected, no ERROR
        assert client.listener.errors == [] and _row(viewer, session) is not None
    finally:
        client.disconnect()


def test_closing_an_unknown_connection_is_a_json_404(mesh, admin):
    error = expect_error(admin.delete("/api/v1/connections/B-999999"), 404, "not_found")
    assert "B-999999" in error["message"]


def _channel(number: int, **fields) -> dict:
    return {"number": number, "consumers": 0, "unacked": 0, "prefetch": 0, "global_prefetch": 0, "confirm": False,
            "transactional": False, **fields}


def test_an_amqp_connection_is_listed_with_its_channels(mesh, viewer):
    clients = Pika()
    try:
        connection = clients(mesh.b.proc)  # a real pika client on B's AMQP listener
        confirming, consuming = channels_holding_unacked(connection, unique("amqp-cn"), published=2, held=2,
                                                         prefetch=5, global_prefetch=7)
        transacting = connection.channel()
        transacting.tx_select()
        items = _connections(viewer, page_size="500")["items"]
        (row,) = [r for r in items if r["protocol"] == "amqp"]
        assert row["node_name"] == "B" and row["id"].startswith("B-amqp-") and row["version"] == "0-9-1"
        assert (row["channels"], row["subscriptions"], row["unacked"]) == (3, 1, 2)
        assert row["channel_details"] == [
            _channel(confirming.channel_number, confirm=True),
            _channel(consuming.channel_number, consumers=1, unacked=2, prefetch=5, global_prefetch=7),
            _channel(transacting.channel_number, transactional=True)]
        stomp = [r for r in items if r["protocol"] == "stomp"]
        assert stomp and all(r["channels"] == 0 and r["channel_details"] == [] for r in stomp)
        transacting.close()
        row = _row(viewer, row["id"])
        assert row["channels"] == 2 and [c["number"] for c in row["channel_details"]] == [
            confirming.channel_number, consuming.channel_number]
    finally:
        clients.close_all()
    mesh.wait(lambda: not [r for r in _connections(viewer, page_size="500")["items"] if r["protocol"] == "amqp"],
              "the AMQP connection gone from the list")
