"""GET /api/v1/messages/{id}/journey: a traced message's journey across the console's
real 3-node mesh (docs/journeys.md), every node's records in causal order; admin only;
an untraced message has none; a malformed id is a JSON 400."""

from __future__ import annotations

import pytest
from e2e_support import unique

from tests.console.api_support import expect_error, expect_no_traceback, expect_ok, subscribe_seen_on_a

pytestmark = pytest.mark.django_db


def url(message_id: str) -> str:
    return f"/api/v1/messages/{message_id}/journey"


def test_a_message_sent_on_a_and_acked_on_c_has_every_nodes_steps_in_order(mesh, viewer, admin):
    queue = unique("journey")
    consumer = mesh.c.client()
    subscribe_seen_on_a(mesh, viewer, consumer, queue)
    producer = mesh.a.client()
    try:
        producer.send(f"/queue/{queue}", "traced", headers={"trace": "true", "persistent": "true"}, receipt=True)
        producer.send(f"/queue/{queue}", "plain", receipt=True)
        got = {m.body: m.headers["message-id"] for m in consumer.listener.wait_for(2)}
    finally:
        producer.disconnect()
        consumer.disconnect()  # auto-ack: acked as delivered
    answer = mesh.wait(lambda: (a := expect_ok(admin.get(url(got["traced"]))))["steps"]
                       and a["steps"][-1]["step"] in ("acked", "peer_stored") and len(a["steps"]) >= 8 and a,
                       "the journey's records on A and C")
    assert answer["id"] == got["traced"] and answer["failures"] == []
    steps = [(answer["nodes"][s["node"]], s["step"]) for s in answer["steps"]]
    on = {name: [step for node, step in steps if node == name] for name in ("A", "C")}
    assert on["A"] == ["received", "stored", "forwarded", "peer_stored"], steps
    assert on["C"] == ["link_received", "stored", "delivered", "acked"], steps
    assert steps.index(("A", "forwarded")) < steps.index(("C", "link_received")), steps
    forwarded = next(s for s in answer["steps"] if s["step"] == "forwarded")
    assert forwarded["reason"] == "demand" and answer["nodes"][forwarded["peer"]] == "C"
    assert expect_ok(admin.get(url(got["plain"])))["steps"] == []  # untraced


def test_journeys_are_for_admins(mesh, viewer, anonymous):
    expect_error(viewer.get(url("x-1-1")), 403, "forbidden")
    expect_error(anonymous.get(url("x-1-1")), 401, "unauthenticated")


@pytest.mark.parametrize("message_id", ["a" * 201, "a%00b", "a%7Fb"])
def test_a_malformed_id_is_a_json_400(mesh, admin, message_id, caplog):
    expect_error(admin.get(url(message_id)), 400, "bad_request")
    expect_error(admin.get(url("a%0Ab")), 404, "not_found")  # no path of the API holds a line break
    expect_no_traceback(caplog)
