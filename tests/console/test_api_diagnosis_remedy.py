"""POST /api/v1/diagnosis/{finding_id}/remedy: a finding's remedy done through the API
(``apply_remedy``, docs/doctor.md) on the console's real 3-node mesh. A durable
subscription of B is abandoned: its remedy (delete it) needs ``confirm``, is done in the
console user's name and audited as delete_definition from the doctor; then the finding
is gone (404). Advice only is a 409; admins only; hostile ids and bodies are 4xx JSON."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from e2e_support import manage_result, unique
from mesh_support import send_many

from model.requests import Diagnosis, Events
from tests.console.api_support import expect_error, expect_no_traceback, expect_ok

pytestmark = pytest.mark.django_db


def url(finding_id: str) -> str:
    return f"/api/v1/diagnosis/{quote(finding_id, safe='')}/remedy"


def _finding(mesh, kind: str, subject: str):
    report = manage_result(mesh.a.stomp, Diagnosis(older_than_s=0))
    return next((f for f in report.findings if f.kind == kind and subject in f.subject), None)


@pytest.fixture
def abandoned(mesh):
    """A durable subscription on B whose subscriber went, 2 messages kept for it: its finding."""
    topic, client_id = "/topic/" + unique("audit"), unique("app")
    subscriber = mesh.b.client(headers={"client-id": client_id})
    subscriber.subscribe(topic, id="d", headers={"activemq.subscriptionName": "s"})
    producer = mesh.b.client()
    try:
        send_many(producer, topic, ["while here"])
        subscriber.listener.wait_for(1)
        subscriber.disconnect()
        send_many(producer, topic, ["away-0", "away-1"])
    finally:
        producer.disconnect()
    return mesh.wait(lambda: _finding(mesh, "durable_abandoned", client_id), "the abandoned durable subscription")


def test_a_confirmed_remedy_is_done_audited_from_the_doctor_and_its_finding_is_gone(mesh, admin, abandoned, caplog):
    refused = expect_error(admin.post(url(abandoned.id), {}, format="json"), 400, "bad_request")
    assert f"would delete durable subscription {abandoned.subject}" in refused["message"], refused
    assert _finding(mesh, "durable_abandoned", abandoned.subject) is not None  # nothing was done

    done = expect_ok(admin.post(url(abandoned.id), {"confirm": True}, format="json"))
    assert done["action"] == "delete_definition" and done["failures"] == [], done
    assert _finding(mesh, "durable_abandoned", abandoned.subject) is None
    audit = [e for e in manage_result(mesh.a.stomp, Events(kinds=["admin_action"], limit=1000))
             if e.target == f"durable subscription {abandoned.subject}"]
    assert [(e.action, e.ok, e.user) for e in audit] == [("delete_definition", True, "operator")]
    assert audit[0].result.startswith(f"doctor {abandoned.id}: "), audit
    refusals = [e for e in manage_result(mesh.a.stomp, Events(kinds=["admin_action"], limit=1000))
                if e.target == f"finding {abandoned.id}"]
    assert [(e.action, e.ok) for e in refusals] == [("apply_remedy", False)]  # the refusal is audited too

    gone = expect_error(admin.post(url(abandoned.id), {"confirm": True}, format="json"), 404, "not_found")
    assert f"no finding {abandoned.id} now" in gone["message"]
    expect_no_traceback(caplog)


def test_a_finding_with_advice_only_is_a_409(mesh, admin):
    queue = unique("bound")
    holder = mesh.c.client()
    holder.subscribe(f"/queue/{queue}", ack="client-individual", headers={"activemq.prefetchSize": "1"})
    mesh.send(mesh.c, queue, ["b0", "b1", "b2"])
    try:
        holder.listener.wait_for(1)
        bound = mesh.wait(lambda: _finding(mesh, "prefetch_bound", queue), "the backlog behind the prefetch")
        error = expect_error(admin.post(url(bound.id), {"confirm": True}, format="json"), 409, "conflict")
        assert "no remedy to apply, only advice" in error["message"], error
    finally:
        holder.disconnect()


def test_remedies_are_for_admins(mesh, viewer, anonymous):
    expect_error(viewer.post(url("kind/node///x"), {}, format="json"), 403, "forbidden")
    expect_error(anonymous.post(url("kind/node///x"), {}, format="json"), 401, "unauthenticated")


@pytest.mark.parametrize(("finding_id", "status"), [
    ("a" * 1025, 400),  # longer than any id
    ("kind/node///a\x00b", 400),  # not printable
    ("kind/node///a\x7fb", 400),
    ("<img src=x onerror=alert(1)>", 404),  # no such finding: the node says so, naming it as text
    ("../../nodes", 404),
    ("unacked_old/00000000///" + "é" * 300, 404),
])
def test_a_hostile_id_is_a_json_4xx(mesh, admin, finding_id, status, caplog):
    error = expect_error(admin.post(url(finding_id), {"confirm": True}, format="json"), status,
                         "bad_request" if status == 400 else "not_found")
    assert ("printable characters" if status == 400 else f"no finding {finding_id} now") in error["message"], error
    # An empty id, or one with a line break, is no path of the API.
    expect_error(admin.post("/api/v1/diagnosis//remedy", {}, format="json"), 404, "not_found")
    expect_error(admin.post("/api/v1/diagnosis/a%0Ab/remedy", {}, format="json"), 404, "not_found")
    expect_no_traceback(caplog)


@pytest.mark.parametrize("body", [{"confirm": "perhaps"}, {"confirm": True, "force": True}, [True], "yes"])
def test_a_bad_body_is_a_json_400(mesh, admin, body, caplog):
    expect_error(admin.post(url("kind/node///x"), body, format="json"), 400, "bad_request")
    expect_no_traceback(caplog)
