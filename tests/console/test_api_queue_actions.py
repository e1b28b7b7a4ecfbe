"""The queue actions of the REST API: POST /api/v1/queues/<name>/purge, /move, /browse,
/send and DELETE /api/v1/queues/<name>. They are management requests to the mesh in
the signed-in admin's name: viewers are refused, each action shows up as an
``admin_action`` event naming the console's user, and the mesh's refusals come back
as JSON errors with their HTTP status."""

from __future__ import annotations

import pytest
from e2e_support import unique
from mesh_support import send_many

from tests.console.api_support import expect_error, expect_ok

pytestmark = pytest.mark.django_db

ADMIN = "operator"  # the conftest's admin user


# -- helpers ---------------------------------------------------------------------------------------


def _post(client, queue: str, action: str, body: dict):
    return client.post(f"/api/v1/queues/{queue}/{action}", body, format="json")


def _ids(client) -> dict[str, str]:
    return {row["name"]: row["id"] for row in expect_ok(client.get("/api/v1/nodes"))["items"]}


def _fill(member, queue: str, bodies: list[str], **headers: str) -> None:
    sender = member.client()
    try:
        send_many(sender, f"/queue/{queue}", bodies, headers=headers)
    finally:
        sender.disconnect()


def _depths(client, queue: str) -> dict[str, int]:
    """Messages waiting per node name ({} while the console knows no such queue)."""
    response = client.get(f"/api/v1/queues/{queue}")
    if response.status_code == 404:
        return {}
    return {part["node_name"]: part["depth"] for part in expect_ok(response)["nodes"]}


def _wait_depths(mesh, client, queue: str, expected: dict[str, int], what: str) -> None:
    """Wait until the named nodes hold these depths (other nodes: nothing waiting)."""
    mesh.wait(lambda: {n: d for n, d in _depths(client, queue).items() if d or n in expected} == expected,
              f"{what}: {expected}")


def _filled(mesh, client, queue: str, bodies: dict) -> None:
    """Send each node (a key of ``bodies``) its bodies for ``queue``; wait until each holds them."""
    for member, sent in bodies.items():
        _fill(member, queue, sent)
    _wait_depths(mesh, client, queue, {member.name: len(sent) for member, sent in bodies.items()},
                 "the messages sent")


def _admin_event(mesh, client, queue: str, action: str, ok: bool = True) -> dict:
    """The admin_action event of ``action`` on ``queue``, once it is in the events stream."""
    def find():
        query = {"kind": "admin_action", "q": queue, "page_size": "500"}
        items = expect_ok(client.get("/api/v1/events", query))["items"]
        return next((e for e in items if e["action"] == action and e["ok"] is ok and queue in e["target"]), None)

    event = mesh.wait(find, f"an admin_action event for {action} on {queue}")
    assert event["kind"] == "admin_action"
    assert event["user"] == ADMIN, event  # the console acts on behalf of its user (its own login is anonymous)
    return event


# -- who may act -------------------------------------------------------------------------------------

_ACTIONS = [
    pytest.param("post", "purge", {}, id="purge"),
    pytest.param("post", "move", {"node": "B", "to_queue": "elsewhere"}, id="move"),
    pytest.param("post", "browse", {}, id="browse"),
    pytest.param("post", "send", {"body": "x"}, id="send"),
    pytest.param("delete", None, None, id="delete"),
]


def _act(client, method: str, queue: str, action: str | None, body: dict | None):
    if method == "delete":
        return client.delete(f"/api/v1/queues/{queue}")
    return _post(client, queue, action, body)


@pytest.mark.parametrize("method, action, body", _ACTIONS)
def test_actions_refuse_anonymous(mesh, anonymous, method, action, body):
    expect_error(_act(anonymous, method, unique("qa"), action, body), 401, "unauthenticated")


def test_actions_refuse_viewers_and_leave_the_queue_alone(mesh, viewer, admin):
    queue = unique("qa")
    _fill(mesh.b, queue, ["kept-1", "kept-2"])
    for param in _ACTIONS:
        method, action, body = param.values
        error = expect_error(_act(viewer, method, queue, action, body), 403, "forbidden")
        assert "administrator" in error["message"]
    # Nothing reached the mesh: both messages still wait on B, and the admin's own browse
    # and send (a fence) are the only admin actions recorded for the queue.
    page = expect_ok(_post(admin, queue, "browse", {"node": "B"}))["result"][0]
    assert [m["body"] for m in page["messages"]] == ["kept-1", "kept-2"]
    expect_ok(_post(admin, queue, "send", {"node": "B", "body": "fence"}))
    _admin_event(mesh, admin, queue, "send")
    events = expect_ok(admin.get("/api/v1/events", {"kind": "admin_action", "q": queue}))["items"]
    assert [e["action"] for e in events] == ["send", "browse"], events  # newest first


@pytest.mark.parametrize("method, action, body", _ACTIONS)
def test_actions_refuse_a_bad_queue_name_without_asking_the_mesh(mesh, admin, method, action, body):
    error = expect_error(_act(admin, method, "probe-nul%00x", action, body), 400, "bad_request")
    assert error["message"].startswith("invalid queue name 'probe-nul\\x00x'") and "node" not in error, error


# -- purge -------------------------------------------------------------------------------------------


def test_purge_one_node_drops_only_its_messages(mesh, admin):
    ids = _ids(admin)
    queue = unique("qp")
    _filled(mesh, admin, queue, {mesh.a: ["a1", "a2", "a3"], mesh.b: ["b1", "b2", "b3", "b4"]})
    body = expect_ok(_post(admin, queue, "purge", {"node": "B"}))
    assert body["failures"] == []
    (done,) = body["result"]
    assert done == {"node": ids["B"], "action": "purge", "target": f"/queue/{queue}", "count": 4, "detail": ""}
    _wait_depths(mesh, admin, queue, {"A": 3, "B": 0}, "B's messages purged, A's kept")
    event = _admin_event(mesh, admin, queue, "purge")
    assert (event["node"], event["target"], event["result"]) == (ids["B"], f"/queue/{queue}", "4 message(s)")


def test_purge_every_node(mesh, admin):
    ids = _ids(admin)
    queue = unique("qp")
    _filled(mesh, admin, queue, {mesh.a: ["a1", "a2"], mesh.c: ["c1", "c2", "c3"]})
    body = expect_ok(_post(admin, queue, "purge", {}))
    # B has no such queue: it is simply not among the answers.
    assert body["failures"] == []
    assert {done["node"]: done["count"] for done in body["result"] if done["count"]} == {ids["A"]: 2, ids["C"]: 3}
    _wait_depths(mesh, admin, queue, {}, "every message purged")
    assert expect_ok(admin.get(f"/api/v1/queues/{queue}"))["messages"] == 0
    _admin_event(mesh, admin, queue, "purge")


def test_purge_refuses_unknown_queues_and_nodes(mesh, admin):
    ids = _ids(admin)
    assert "any node" in expect_error(_post(admin, unique("qp"), "purge", {}), 404, "not_found")["message"]
    queue = unique("qp")
    _fill(mesh.a, queue, ["a1"])
    error = expect_error(_post(admin, queue, "purge", {"node": "B"}), 404, "not_found")
    assert error["node"] == ids["B"] and queue in error["message"]
    assert "'Z'" in expect_error(_post(admin, queue, "purge", {"node": "Z"}), 404, "not_found")["message"]
    # A refusal by the mesh is recorded too, as not ok, by the node that refused.
    event = _admin_event(mesh, admin, queue, "purge", ok=False)
    assert event["node"] == ids["B"] and queue in event["result"]


@pytest.mark.parametrize("body", [{"node": ""}, {"node": ["A"]}, "not json"])
def test_purge_refuses_a_bad_body(mesh, admin, body):
    if body == "not json":
        response = admin.post(f"/api/v1/queues/{unique('qp')}/purge", "{not json", content_type="application/json")
    else:
        response = _post(admin, unique("qp"), "purge", body)
    expect_error(response, 400, "bad_request")


# -- move --------------------------------------------------------------------------------------------


def test_move_to_another_queue_on_the_same_node(mesh, admin):
    ids = _ids(admin)
    queue, target = unique("qm"), unique("qm")
    _filled(mesh, admin, queue, {mesh.b: [f"m{i}" for i in range(5)]})
    body = expect_ok(_post(admin, queue, "move", {"node": "B", "to_queue": target, "count": 2}))
    assert body["failures"] == []
    assert body["result"] == [{"node": ids["B"], "action": "move", "target": f"/queue/{queue}", "count": 2,
                               "detail": f"to /queue/{target}"}]
    _wait_depths(mesh, admin, target, {"B": 2}, "2 messages moved to the other queue on B")
    _wait_depths(mesh, admin, queue, {"B": 3}, "3 messages left on B")
    consumer = mesh.b.client()
    try:
        consumer.subscribe(f"/queue/{target}", ack="client-individual")
        moved = consumer.listener.wait_for(2)
        assert [m.body for m in moved] == ["m0", "m1"]  # the first two, in order
        for message in moved:
            consumer.ack(message)
        consumer.sync()
    finally:
        consumer.disconnect()
    left = expect_ok(_post(admin, queue, "browse", {"node": "B"}))["result"][0]
    assert [m["body"] for m in left["messages"]] == ["m2", "m3", "m4"]
    event = _admin_event(mesh, admin, queue, "move")
    assert event["result"] == f"2 message(s), to /queue/{target}" and event["node"] == ids["B"]


def test_move_to_another_node_then_consume_there(mesh, admin):
    ids = _ids(admin)
    queue = unique("qm")
    bodies = [f"m{i}" for i in range(4)]
    _filled(mesh, admin, queue, {mesh.b: bodies})
    body = expect_ok(_post(admin, queue, "move", {"node": "B", "to_node": "C"}))
    assert body["failures"] == []
    assert body["result"] == [{"node": ids["B"], "action": "move", "target": f"/queue/{queue}", "count": 4,
                               "detail": "to node C"}]
    # Before any consumer: the messages wait on C now, none on B.
    _wait_depths(mesh, admin, queue, {"B": 0, "C": 4}, "the 4 messages on C")
    consumer = mesh.c.client()
    try:
        consumer.subscribe(f"/queue/{queue}", ack="client-individual")
        received = consumer.listener.wait_for(4)
        assert sorted(m.body for m in received) == bodies
        for message in received:
            consumer.ack(message)
        consumer.sync()
        mesh.wait(lambda: expect_ok(admin.get(f"/api/v1/queues/{queue}"))["messages"] == 0, "every moved message acked")
        row = expect_ok(admin.get(f"/api/v1/queues/{queue}"))
        parts = {part["node_name"]: part["partial"] for part in row["nodes"]}
        assert parts["C"]["acked"] == 4 and parts["B"]["acked"] == 0
    finally:
        consumer.disconnect()
    event = _admin_event(mesh, admin, queue, "move")
    assert event["result"] == "4 message(s), to node C"


@pytest.mark.parametrize("body, words", [
    pytest.param({"node": "B", "to_queue": "x", "to_node": "C"}, "exactly one", id="both-targets"),
    pytest.param({"node": "B"}, "exactly one", id="no-target"),
    pytest.param({"node": "B", "to_queue": "x", "count": 0}, "count", id="count-0"),
    pytest.param({"node": "B", "to_queue": "x", "count": "many"}, "count", id="count-not-a-number"),
    pytest.param({"to_node": "C"}, "node", id="to-node-without-node"),
    pytest.param({"node": "*", "to_node": "C"}, "node", id="to-node-from-every-node"),
    pytest.param({"node": "B", "to_queue": "SELF"}, "itself", id="to-itself"),
    pytest.param({"node": "B", "to_node": "B"}, "already", id="to-its-own-node"),
    pytest.param({"node": "B", "to_queue": "no*such>queue"}, "no wildcards", id="bad-queue-name"),
])
def test_move_refuses_a_bad_request(mesh, admin, body, words):
    queue = unique("qm")
    _fill(mesh.b, queue, ["m0"])
    body = {k: queue if v == "SELF" else v for k, v in body.items()}
    error = expect_error(_post(admin, queue, "move", body), 400, "bad_request")
    assert words in error["message"]
    browsed = expect_ok(_post(admin, queue, "browse", {"node": "B"}))["result"][0]
    assert [m["body"] for m in browsed["messages"]] == ["m0"]


def test_move_refuses_unknown_queues_and_nodes(mesh, admin):
    ids = _ids(admin)
    queue = unique("qm")
    error = expect_error(_post(admin, queue, "move", {"node": "B", "to_queue": unique("qm")}), 404, "not_found")
    assert error["node"] == ids["B"] and queue in error["message"]
    _fill(mesh.b, queue, ["m0"])
    for body in ({"node": "B", "to_node": "Z"}, {"node": "Z", "to_queue": "x"}):
        assert "'Z'" in expect_error(_post(admin, queue, "move", body), 404, "not_found")["message"]


# -- browse ------------------------------------------------------------------------------------------


def test_browse_pages_through_messages_with_headers_and_a_body_preview(mesh, admin):
    ids = _ids(admin)
    queue = unique("qb")
    bodies = [f"message-{i}-" + "x" * 300 for i in range(7)]
    sender = mesh.b.client()
    try:
        for i, body in enumerate(bodies):
            sender.send(f"/queue/{queue}", body, persistent="true", headers={"x-index": str(i)})
        sender.sync()
    finally:
        sender.disconnect()
    body = expect_ok(_post(admin, queue, "browse", {"node": "B", "offset": 2, "limit": 3, "preview": 10}))
    assert body["failures"] == []
    (page,) = body["result"]
    assert (page["node"], page["queue"], page["total"], page["offset"]) == (ids["B"], queue, 7, 2)
    assert [m["headers"]["x-index"] for m in page["messages"]] == ["2", "3", "4"]
    for message, sent in zip(page["messages"], bodies[2:5], strict=True):
        assert message["body"] == sent[:10] and message["truncated"] is True and message["size"] == len(sent)
        assert message["destination"] == f"/queue/{queue}" and message["persistent"] is True
        assert message["redelivered"] is False and message["id"] and message["age_ms"] >= 0
    # The last page; a preview as long as the body is not truncated; nothing was taken.
    body = {"node": "B", "offset": 5, "limit": 50, "preview": 400}
    last = expect_ok(_post(admin, queue, "browse", body))["result"][0]
    assert [m["body"] for m in last["messages"]] == bodies[5:] and not any(m["truncated"] for m in last["messages"])
    _wait_depths(mesh, admin, queue, {"B": 7}, "the 7 messages still waiting")


def test_browse_every_node_answers_a_page_per_node_that_has_the_queue(mesh, admin):
    ids = _ids(admin)
    queue = unique("qb")
    _fill(mesh.a, queue, ["a0"])
    _fill(mesh.b, queue, ["b0", "b1"])
    body = expect_ok(_post(admin, queue, "browse", {}))
    assert body["failures"] == []
    pages = {page["node"]: page for page in body["result"] if page["total"]}
    assert {node: [m["body"] for m in page["messages"]] for node, page in pages.items()} == \
        {ids["A"]: ["a0"], ids["B"]: ["b0", "b1"]}


@pytest.mark.parametrize("body, field", [
    ({"limit": 501}, "limit"), ({"limit": 0}, "limit"), ({"offset": -1}, "offset"), ({"preview": -1}, "preview"),
    ({"preview": 65537}, "preview"), ({"offset": "first"}, "offset"), ({"offset": 10 ** 30}, "offset"),
])
def test_browse_refuses_bad_bounds(mesh, admin, body, field):
    queue = unique("qb")
    _fill(mesh.b, queue, ["m0"])
    error = expect_error(_post(admin, queue, "browse", {"node": "B", **body}), 400, "bad_request")
    assert field in error["message"]


def test_browse_refuses_unknown_queues_and_nodes(mesh, admin):
    ids = _ids(admin)
    queue = unique("qb")
    assert "any node" in expect_error(_post(admin, queue, "browse", {}), 404, "not_found")["message"]
    assert expect_error(_post(admin, queue, "browse", {"node": "A"}), 404, "not_found")["node"] == ids["A"]
    expect_error(_post(admin, queue, "browse", {"node": "Z"}), 404, "not_found")


# -- send --------------------------------------------------------------------------------------------


def test_send_a_test_message_that_a_consumer_receives(mesh, admin):
    ids = _ids(admin)
    queue = unique("qs")
    consumer = mesh.c.client()
    try:
        consumer.subscribe(f"/queue/{queue}")
        body = expect_ok(_post(admin, queue, "send", {"node": "A", "body": "hello, mesh", "headers": {"x-test": "yes"},
                                                "persistent": True}))
        assert body["failures"] == []
        (done,) = body["result"]
        assert (done["node"], done["action"], done["target"], done["count"]) == (ids["A"], "send",
                                                                                  f"/queue/{queue}", 1)
        assert done["detail"]  # the message id
        (message,) = consumer.listener.wait_for(1)
        assert message.body == "hello, mesh"
        assert message.headers["x-test"] == "yes" and message.headers["persistent"] == "true"
        assert message.headers["destination"] == f"/queue/{queue}"
    finally:
        consumer.disconnect()
    event = _admin_event(mesh, admin, queue, "send")
    assert event["node"] == ids["A"] and event["target"] == f"/queue/{queue}"
    assert event["result"] == f"1 message(s), {done['detail']}"


def test_send_without_a_node_goes_through_the_node_asked(mesh, admin):
    ids = _ids(admin)
    queue = unique("qs")
    body = expect_ok(_post(admin, queue, "send", {"body": ""}))
    assert [done["node"] for done in body["result"]] == [ids["A"]]  # the console's first address is A's
    _wait_depths(mesh, admin, queue, {"A": 1}, "the test message waiting on A")
    (message,) = expect_ok(_post(admin, queue, "browse", {"node": "A"}))["result"][0]["messages"]
    assert (message["body"], message["persistent"]) == ("", False)


@pytest.mark.parametrize("body, field", [
    ({"body": "x", "headers": "x-a: 1"}, "headers"), ({"body": "x", "persistent": "perhaps"}, "persistent"),
    ({"body": {"nested": True}}, "body"), ({"body": "x", "headers": {"x-a": None}}, "headers"),
    ({"body": "x", "headers": {"x-a": "1\ncontent-length:2"}}, "headers"), ({"headers": {"a\rb": "1"}}, "headers"),
])
def test_send_refuses_a_bad_body(mesh, admin, body, field):
    error = expect_error(_post(admin, unique("qs"), "send", body), 400, "bad_request")
    assert field in error["message"]


def test_send_refuses_an_unknown_node(mesh, admin):
    assert "'Z'" in expect_error(_post(admin, unique("qs"), "send", {"node": "Z", "body": "x"}), 404,
                           "not_found")["message"]


# -- delete ------------------------------------------------------------------------------------------


def test_delete_on_one_node_then_everywhere(mesh, admin):
    ids = _ids(admin)
    queue = unique("qx")
    _filled(mesh, admin, queue, {mesh.a: ["a1", "a2"], mesh.b: ["b1", "b2", "b3"]})
    body = expect_ok(admin.delete(f"/api/v1/queues/{queue}?node=B"))
    assert body == {"result": [{"node": ids["B"], "action": "delete_queue", "target": f"/queue/{queue}",
                                "count": 3, "detail": ""}], "failures": []}
    mesh.wait(lambda: set(_depths(admin, queue)) == {"A"}, "the queue gone from B, kept on A")
    body = expect_ok(admin.delete(f"/api/v1/queues/{queue}"))
    assert {done["node"]: done["count"] for done in body["result"]} == {ids["A"]: 2}
    mesh.wait(lambda: admin.get(f"/api/v1/queues/{queue}").status_code == 404, "the queue gone from every node")
    _admin_event(mesh, admin, queue, "delete_queue")

    def deletions():
        events = expect_ok(admin.get("/api/v1/events", {"kind": "admin_action", "q": queue}))["items"]
        done = sorted((e["node"], e["result"]) for e in events if e["action"] == "delete_queue" and e["ok"])
        return done if len(done) >= 2 else None

    assert mesh.wait(deletions, "both deletions recorded") == sorted([(ids["B"], "3 message(s)"),
                                                                       (ids["A"], "2 message(s)")])


def test_delete_is_refused_with_409_while_a_consumer_is_attached(mesh, admin):
    ids = _ids(admin)
    queue = unique("qx")
    consumer = mesh.b.client()
    try:
        consumer.subscribe(f"/queue/{queue}", ack="client-individual")
        mesh.wait(lambda: (r := admin.get(f"/api/v1/queues/{queue}")).status_code == 200 and r.json()["consumers"],
                  "the consumer in the view")
        error = expect_error(admin.delete(f"/api/v1/queues/{queue}?node=B"), 409, "conflict")
        assert error["node"] == ids["B"] and "consumer" in error["message"]
        event = _admin_event(mesh, admin, queue, "delete_queue", ok=False)
        assert event["node"] == ids["B"] and "consumer" in event["result"]
        # The queue is still there and still delivers.
        expect_ok(_post(admin, queue, "send", {"node": "B", "body": "still here"}))
        (message,) = consumer.listener.wait_for(1)
        assert message.body == "still here"
    finally:
        consumer.disconnect()


def test_delete_refuses_unknown_queues_and_nodes(mesh, admin):
    ids = _ids(admin)
    queue = unique("qx")
    assert "any node" in expect_error(admin.delete(f"/api/v1/queues/{queue}"), 404, "not_found")["message"]
    assert expect_error(admin.delete(f"/api/v1/queues/{queue}?node=C"), 404, "not_found")["node"] == ids["C"]
    expect_error(admin.delete(f"/api/v1/queues/{queue}?node=Z"), 404, "not_found")


# -- a node that is not linked (last: it kills a node) -----------------------------------------------


def test_move_to_a_node_that_is_not_linked_is_a_409_conflict(mesh, admin):
    ids = _ids(admin)
    queue = unique("qm")
    _filled(mesh, admin, queue, {mesh.b: ["m0", "m1"]})

    def links_to_c_down():
        links = expect_ok(admin.get("/api/v1/links"))["items"]
        return all(row["state"] == "down" for row in links if "C" in (row["a_name"], row["b_name"]))

    mesh.c.kill9()
    try:
        mesh.wait(links_to_c_down, "the links to C down")
        # C is still in the mesh's view for a few seconds (3 × connection_ttl), but not linked.
        error = expect_error(_post(admin, queue, "move", {"node": "B", "to_node": "C"}), 409, "conflict")
        assert error["node"] == ids["B"] and "not linked" in error["message"]
        event = _admin_event(mesh, admin, queue, "move", ok=False)
        assert "not linked" in event["result"]
        page = expect_ok(_post(admin, queue, "browse", {"node": "B"}))["result"][0]
        assert [m["body"] for m in page["messages"]] == ["m0", "m1"]  # nothing moved
    finally:
        mesh.c.start()
    mesh.wait(lambda: len([r for r in expect_ok(admin.get("/api/v1/links"))["items"] if r["state"] == "up"]) == 3,
              "every link up again", timeout=30)
