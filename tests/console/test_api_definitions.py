"""Mesh-wide definitions in the REST API: GET /api/v1/definitions, PUT and DELETE
/api/v1/definitions/queues/<name>, DELETE /api/v1/definitions/durable/<name>.
A queue's settings set through the console reach every node of a real mesh and
act there (a NACKed message dead-letters where the settings say); a durable
subscription made by a STOMP client on one node is listed (with where its subscriber
is and what waits for it) and deleted for all;
bad input is a 4xx JSON error that changes nothing."""

from __future__ import annotations

import pika
import pytest
from amqp_support import Pika
from e2e_support import manage_result, unique

from model.definitions import DURABLE_SUBSCRIPTION, QUEUE_SETTINGS
from model.requests import Definitions
from tests.console.api_support import expect_error, expect_no_traceback, expect_ok

pytestmark = pytest.mark.django_db


def _held(member, kind: str, name: str):
    """The definition one node holds (None: none, not even a deletion)."""
    return next((r for r in manage_result(member.stomp, Definitions()) if (r.kind, r.name) == (kind, name)), None)


def _listed(client, name: str) -> list[dict]:
    return [row for row in expect_ok(client.get("/api/v1/definitions", {"name": name}))["items"]
            if row["name"] == name]


def test_queue_settings_put_through_the_console_reach_every_node_and_act_there(mesh, admin):
    queue = unique("qd")
    body = {"max_delivery_attempts": 1, "dead_letter_queue": queue + ".dlq", "message_ttl_ms": 600000}
    done = expect_ok(admin.put(f"/api/v1/definitions/queues/{queue}", body, format="json"))["result"]
    assert done["action"] == "define_queue" and done["target"] == f"/queue/{queue}"
    for member in mesh.nodes:
        mesh.wait(lambda m=member: _held(m, QUEUE_SETTINGS, queue), f"the definition on {member}")
    (row,) = _listed(admin, queue)
    assert row["kind"] == "queue" and row["queue"] == body and row["deleted"] is False
    # Made by the node the console asks first (A), named for the page.
    assert row["origin_name"] == "A" and row["version"] >= 1 and "subscribers" not in row
    # It acts on another node: one NACK there and the message is dead-lettered.
    consumer = mesh.c.client()
    consumer.subscribe(f"/queue/{queue}", ack="client-individual")
    producer = mesh.c.client()
    producer.send(f"/queue/{queue}", "poison", receipt=True)
    (message,) = consumer.listener.wait_for(1)
    assert int(message.headers["expires"]) > 0  # the queue's TTL, as it was sent without one
    consumer.nack(message)
    dead = mesh.c.client()
    dead.subscribe(f"/queue/{queue}.dlq")
    assert dead.listener.wait_for(1)[0].body == "poison"

    # Deleted for every node, and listed as deleted.
    consumer.disconnect()
    done = expect_ok(admin.delete(f"/api/v1/definitions/queues/{queue}"))["result"]
    assert done["action"] == "delete_definition"
    for member in mesh.nodes:
        mesh.wait(lambda m=member: _held(m, QUEUE_SETTINGS, queue).deleted,
                  f"the deletion on {member}")
    assert [row["deleted"] for row in _listed(admin, queue)] == [True]


def test_a_durable_subscription_is_listed_and_deleted_for_every_node(mesh, admin):
    client_id, name = unique("app"), "feed"
    durable = f"{client_id}.{name}"
    subscriber = mesh.b.client(headers={"client-id": client_id})
    topic = unique("news")
    subscriber.subscribe("/topic/" + topic, headers={"activemq.subscriptionName": name})
    for member in mesh.nodes:
        mesh.wait(lambda m=member: _held(m, DURABLE_SUBSCRIPTION, durable), f"the subscription on {member}")
    (row,) = _listed(admin, durable)
    assert row["kind"] == "durable" and row["durable"]["topic"].startswith("news")
    assert row["origin_name"] == "B"
    # Where its subscriber is, from the nodes' snapshots.
    ids = {r["name"]: r["id"] for r in admin.get("/api/v1/nodes").json()["items"]}
    session = subscriber.connected_frame.headers["session"]
    mesh.wait(lambda: _listed(admin, durable)[0]["subscribers"] == [
        {"node": ids["B"], "node_name": "B", "connection": session}], "the subscriber on B in the listing")
    # While its subscriber is connected (to B), it cannot be deleted there.
    error = expect_error(admin.delete(f"/api/v1/definitions/durable/{durable}"), 409, "conflict")
    assert "subscriber" in error["message"]
    subscriber.disconnect()
    # Away: no subscriber, and what is published meanwhile waits for it (counted over the nodes).
    mesh.wait(lambda: _listed(admin, durable)[0]["subscribers"] == [], "the subscriber gone from the listing")
    publisher = mesh.c.client()
    for body in ("one", "two"):
        publisher.send("/topic/" + topic, body, receipt=True)
    mesh.wait(lambda: _listed(admin, durable)[0]["waiting"] == 2, "two messages waiting for the subscription")
    expect_ok(admin.delete(f"/api/v1/definitions/durable/{durable}"))
    for member in mesh.nodes:
        mesh.wait(lambda m=member: _held(m, DURABLE_SUBSCRIPTION, durable).deleted, f"the deletion on {member}")


def test_a_queue_declared_over_amqp_keeps_its_arguments_through_export_and_import(mesh, admin):
    queue, dead = unique("qx"), unique("qx.dead")
    arguments = {"x-message-ttl": 600000, "x-max-length": 1, "x-dead-letter-exchange": "",
                 "x-dead-letter-routing-key": dead}
    clients = Pika()
    try:
        channel = clients(mesh.a.proc).channel()
        channel.queue_declare(dead)
        channel.queue_declare(queue, arguments=arguments)
        for member in mesh.nodes:
            mesh.wait(lambda m=member: _held(m, QUEUE_SETTINGS, queue), f"the definition on {member}")
        declared = _held(mesh.a, QUEUE_SETTINGS, queue).queue
        (exported,) = _listed(admin, queue)  # the export: GET /api/v1/definitions
        assert exported["queue"]["amqp_arguments"] == arguments
        # The import, onto a mesh that no longer holds the queue: PUT what was exported.
        expect_ok(admin.delete(f"/api/v1/definitions/queues/{queue}"))
        mesh.wait(lambda: _held(mesh.c, QUEUE_SETTINGS, queue).deleted, "the deletion on C")
        expect_ok(admin.put(f"/api/v1/definitions/queues/{queue}", exported["queue"], format="json"))
        for member in mesh.nodes:
            mesh.wait(lambda m=member: (_held(m, QUEUE_SETTINGS, queue).queue or None) == declared,
                      f"the imported settings, arguments and all, on {member}")
        # An AMQP client declaring it again as before is answered declare_ok (not a 406), on any node,
        # and the arguments act: x-max-length 1 dead-letters the oldest through the default exchange.
        other = clients(mesh.c.proc).channel()
        other.queue_declare(queue, arguments=arguments)
        for body in (b"first", b"second"):
            other.basic_publish("", queue, body)
        mesh.wait(lambda: other.queue_declare(dead, passive=True).method.message_count == 1, "the dead-lettered one")
        assert other.basic_get(dead, auto_ack=True)[2] == b"first"
    finally:
        clients.close_all()


@pytest.mark.parametrize("body, field", [
    ({"max_delivery_attempts": 0}, "max_delivery_attempts"),
    ({"message_ttl_ms": "soon"}, "message_ttl_ms"),
    ({"colour": "red"}, "colour"),
    ({"message_ttl_ms": 2 ** 32}, "message_ttl_ms"),  # at most 2**32 - 1, as x-message-ttl
    ({"max_length": 10 ** 30}, "max_length"),
])
def test_bad_settings_are_a_400_naming_the_field_and_define_nothing(mesh, admin, body, field):
    queue = unique("qbad")
    error = expect_error(admin.put(f"/api/v1/definitions/queues/{queue}", body, format="json"), 400, "bad_request")
    assert field in error["message"]
    assert _listed(admin, queue) == []


@pytest.mark.parametrize("content", ["null", "5", "true"])
def test_a_body_that_is_not_an_object_is_a_400_and_defines_nothing(mesh, admin, caplog, content):
    queue = unique("qbad")
    response = admin.put(f"/api/v1/definitions/queues/{queue}", content, content_type="application/json")
    assert "must be a JSON object" in expect_error(response, 400, "bad_request")["message"]
    expect_no_traceback(caplog)
    assert _listed(admin, queue) == []


@pytest.mark.parametrize("arguments", [
    {"x-colour": "red"}, {"x-max-length": "many"}, {"x-overflow": "reject-publish"}, {"x-expires": 0},
    {"x-message-ttl": 2 ** 32}, {"x-dead-letter-exchange": 7}, {"x-max-priority": 256},
])
def test_x_arguments_the_amqp_listener_refuses_are_a_400_with_its_reason(mesh, admin, arguments):
    clients = Pika()
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            clients(mesh.a.proc).channel().queue_declare(unique("qx"), arguments=arguments)
    finally:
        clients.close_all()
    assert refused.value.reply_code == 406
    queue = unique("qx")
    response = admin.put(f"/api/v1/definitions/queues/{queue}", {"amqp_arguments": arguments}, format="json")
    assert expect_error(response, 400, "bad_request")["message"] == f"amqp_arguments: {refused.value.reply_text}"
    assert _listed(admin, queue) == []


@pytest.mark.parametrize("path, body, words", [
    ("QUEUE", {"dead_letter_queue": "dlq\x1b"}, "invalid dead-letter queue name 'dlq\\x1b'"),
    ("QUEUE", {"expiry_queue": "expired\n"}, "invalid expiry queue name 'expired\\n'"),
    ("QUEUE", {"dead_letter_exchange": "dlx\x7f"}, "invalid exchange name 'dlx\\x7f'"),
])
def test_a_bad_name_is_refused_by_the_api_without_asking_the_mesh(mesh, admin, path, body, words):
    queue = unique("qn")
    response = admin.put(f"/api/v1/definitions/queues/{path.replace('QUEUE', queue)}", body, format="json")
    error = expect_error(response, 400, "bad_request")
    assert words in error["message"] and "node" not in error, error
    assert _listed(admin, queue) == []


def test_unknown_definitions_are_a_404_and_viewers_may_only_look(mesh, admin, viewer):
    expect_error(admin.delete(f"/api/v1/definitions/queues/{unique('never')}"), 404, "not_found")
    expect_error(admin.delete(f"/api/v1/definitions/durable/{unique('never')}"), 404, "not_found")
    queue = unique("qv")
    expect_error(viewer.put(f"/api/v1/definitions/queues/{queue}", {}, format="json"), 403, "forbidden")
    expect_ok(viewer.get("/api/v1/definitions"))
    assert _listed(admin, queue) == []
