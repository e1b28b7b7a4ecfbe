"""GET, PUT and DELETE /api/v1/definitions/traces/<queue|topic>/NAME: tracing a destination
on every node of the console's real 3-node mesh for a while (docs/journeys.md, "Tracing a
destination for a while"). Switched on through the console on A, a message sent without
a header on C is traced; switched off, it is not. Any user reads it, admins change it;
bad input is a 4xx JSON error that changes nothing."""

from __future__ import annotations

import time

import pytest
from e2e_support import manage_result, unique

from model.definitions import TRACE
from model.requests import Definitions, JourneySteps
from tests.console.api_support import expect_error, expect_no_traceback, expect_ok

pytestmark = pytest.mark.django_db


def url(queue: str) -> str:
    return f"/api/v1/definitions/traces/queue/{queue}"


def _held(member, destination: str):
    """The trace one node holds for ``destination`` (None: none, or deleted)."""
    return next((r.trace for r in manage_result(member.stomp, Definitions())
                 if (r.kind, r.name) == (TRACE, destination)), None)


def _sent_on_c_is_traced(mesh, queue: str) -> bool:
    consumer = mesh.c.client()
    try:
        consumer.subscribe(f"/queue/{queue}")
        consumer.send(f"/queue/{queue}", "plain", receipt=True)
        message_id = consumer.listener.wait_for(1)[0].headers["message-id"]
    finally:
        consumer.disconnect()
    return bool(manage_result(mesh.c.stomp, JourneySteps(ids=[message_id], node=mesh.c.name)))


def test_switched_on_through_the_console_it_traces_on_every_node_until_switched_off(mesh, admin, viewer):
    queue = unique("traced")
    destination = f"/queue/{queue}"
    done = expect_ok(admin.put(url(queue), {"rate": 1, "for_s": 3600}, format="json"))["result"]
    assert (done["action"], done["target"]) == ("define_trace", destination)
    for member in mesh.nodes:
        mesh.wait(lambda m=member: _held(m, destination), f"the trace on {member}")
    record = expect_ok(viewer.get(url(queue)))  # any user reads it
    assert record["kind"] == "trace" and record["trace"]["rate"] == 1
    assert time.time() < record["trace"]["until"] <= time.time() + 3600
    assert record["trace"]["by"] == "operator"  # the console's user, as the audit names it
    assert _sent_on_c_is_traced(mesh, queue)

    expect_error(viewer.delete(url(queue)), 403, "forbidden")  # a viewer changes nothing
    expect_error(viewer.put(url(queue), {"for_s": 60}, format="json"), 403, "forbidden")
    done = expect_ok(admin.delete(url(queue)))["result"]
    assert (done["action"], done["target"]) == ("delete_definition", f"tracing of {destination}")
    mesh.wait(lambda: _held(mesh.c, destination) is None, "the deletion on C")
    expect_error(viewer.get(url(queue)), 404, "not_found")
    assert not _sent_on_c_is_traced(mesh, queue)


@pytest.mark.parametrize("path, body, status, code", [
    ("queue/q", {"rate": 0, "for_s": 60}, 400, "bad_request"),
    ("queue/q", {"rate": 1.5, "for_s": 60}, 400, "bad_request"),
    ("queue/q", {"rate": "all", "for_s": 60}, 400, "bad_request"),
    ("queue/q", {"rate": "NaN", "for_s": 60}, 400, "bad_request"),
    ("queue/q", {"until": "Infinity"}, 400, "bad_request"),
    ("queue/q", {"for_s": 0}, 400, "bad_request"),
    ("queue/q", {"for_s": 1e300}, 400, "bad_request"),
    ("queue/q", {"until": 1000.0}, 400, "bad_request"),  # in the past: the node says so
    ("queue/q", {"until": 1e300}, 400, "bad_request"),  # too far ahead
    ("queue/q", {"until": 2e9, "for_s": 60}, 400, "bad_request"),
    ("queue/q", {}, 400, "bad_request"),  # no end
    ("queue/q", {"for_s": 60, "sample": 2}, 400, "bad_request"),
    ("queue/q", ["for_s"], 400, "bad_request"),
    ("exchange/amq.topic", {"for_s": 60}, 400, "bad_request"),
    ("queue/a.*", {"for_s": 60}, 400, "bad_request"),
    ("queue/a%00b", {"for_s": 60}, 400, "bad_request"),
    ("queue/" + "x" * 300, {"for_s": 60}, 400, "bad_request"),
])
def test_hostile_input_is_a_json_4xx_that_changes_nothing(mesh, admin, caplog, path, body, status, code):
    before = manage_result(mesh.a.stomp, Definitions())
    expect_error(admin.put(f"/api/v1/definitions/traces/{path}", body, format="json"), status, code)
    assert manage_result(mesh.a.stomp, Definitions()) == before
    expect_no_traceback(caplog)


def test_a_bad_destination_is_a_400_for_get_and_delete_too_and_an_unknown_one_404(admin, caplog):
    expect_error(admin.get("/api/v1/definitions/traces/exchange/x"), 400, "bad_request")
    expect_error(admin.delete("/api/v1/definitions/traces/queue/"), 400, "bad_request")
    expect_error(admin.delete(url(unique("never"))), 404, "not_found")
    expect_no_traceback(caplog)
