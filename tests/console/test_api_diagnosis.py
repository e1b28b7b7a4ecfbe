"""GET /api/v1/diagnosis: the stuck-message doctor (docs/doctor.md) through the API.
On the real 3-node mesh, a STOMP consumer on B takes messages and never acks them:
the report holds its ``unacked_old`` finding with evidence, explanation and remedy
(the command line and the management request), and the remedy, applied through the
API's own action (DELETE connections/ID), ends it. Thresholds are validated (400
JSON), a signed-out client is refused (401) and a mesh that cannot be asked is a 503."""

from __future__ import annotations

import pytest
from e2e_support import unique
from mesh_support import free_port

from tests.console.api_support import expect_error, expect_no_traceback, expect_ok

pytestmark = pytest.mark.django_db
URL = "/api/v1/diagnosis"


def _report(client, **params) -> dict:
    return expect_ok(client.get(URL, {key: str(value) for key, value in params.items()}))


def _finding(report: dict, kind: str, subject: str) -> dict | None:
    return next((f for f in report["findings"] if f["kind"] == kind and f["subject"] == subject), None)


@pytest.fixture
def holder(mesh):
    """A client of B holding 3 unacked deliveries of a queue of its own; (client, session, queue)."""
    queue = unique("doctor")
    client = mesh.b.client()
    client.subscribe(f"/queue/{queue}", ack="client-individual")
    mesh.send(mesh.b, queue, ["u0", "u1", "u2"])
    client.listener.wait_for(3)
    yield client, client.connected_frame.headers["session"], queue
    try:
        client.disconnect()
    except Exception:  # closed by the remedy
        pass


def test_a_consumer_that_never_acks_is_a_finding_with_its_explanation_and_remedy(mesh, viewer, admin, holder,
                                                                                  caplog):
    client, session, queue = holder
    report = _report(viewer, unacked=1)
    assert report["unanswered"] == [] and len(report["nodes"]) == 3, report
    assert set(report) >= {"taken_at", "reporter", "findings", "nodes", "unanswered"}
    # An age is a lower bound: the same delivery seen at the head of B's unacked ones twice.
    finding = mesh.wait(lambda: _finding(_report(viewer, unacked=1), "unacked_old", session),
                        "the doctor to see the unacked deliveries")
    assert (finding["severity"], finding["node_name"], finding["vhost"]) == ("warning", "B", "/"), finding
    assert finding["id"].startswith("unacked_old/") and finding["id"].endswith("/" + session)
    assert f"holds 3 unacked deliveries of /queue/{queue}" in finding["evidence"], finding
    assert "activemq.prefetchSize" in finding["explanation"] and "basic.qos" in finding["explanation"]
    remedy = finding["remedy"]
    assert remedy["command"] == f"meshgate close {session} --node B" and remedy["confirm"] is True, remedy
    assert remedy["request"]["action"] == "close_connection" and remedy["request"]["connection"] == session
    # Thresholds are the request's: not old enough for 300 s, nor for older_than (which sets all three).
    assert _finding(_report(viewer, unacked=300), "unacked_old", session) is None
    assert _finding(_report(viewer, older_than=3600, unacked=1), "unacked_old", session) is None
    assert _finding(_report(viewer, older_than=1), "unacked_old", session) is not None

    # The remedy, through the API's action for it: the deliveries come back, the finding goes.
    closed = expect_ok(admin.delete(f"/api/v1/connections/{session}"))
    assert closed["failures"] == [] and closed["result"][0]["action"] == "close_connection"
    client.listener.wait_disconnected()
    mesh.wait(lambda: _finding(_report(viewer, unacked=0), "unacked_old", session) is None,
              "the finding gone once the connection is closed")
    expect_no_traceback(caplog)


def test_a_quiet_mesh_has_no_finding_about_it(mesh, viewer):
    report = _report(viewer)  # the defaults: nothing here is minutes old
    assert report["unanswered"] == []
    assert not [f for f in report["findings"] if f["kind"] == "node_unanswered"], report


@pytest.mark.parametrize("params", [
    {"unacked": "soon"}, {"older_than": "-1"}, {"waiting": "nan"}, {"in_doubt": "inf"}, {"unacked": "1e400"},
    {"older_than": str(366 * 24 * 3600 + 1)}, {"waiting": ""}, {"in_doubt": "9" * 2000}, {"unacked": "1\x00"},
])
def test_bad_thresholds_are_a_json_400(mesh, viewer, params, caplog):
    error = expect_error(viewer.get(URL, params), 400, "bad_request")
    assert next(iter(params)) in error["message"], error
    expect_no_traceback(caplog)


def test_the_diagnosis_refuses_anonymous(mesh, anonymous):
    expect_error(anonymous.get(URL), 401, "unauthenticated")
    expect_error(anonymous.get(URL, {"unacked": "soon"}), 401, "unauthenticated")  # auth comes first


def test_a_mesh_that_cannot_be_asked_is_a_json_503(mesh, viewer, settings):
    from console.mesh import sources

    ports = [free_port(), free_port()]
    settings.MESHGATE = {**settings.MESHGATE, "STOMP": [f"127.0.0.1:{port}" for port in ports]}
    sources.management.cache_clear()
    try:
        error = expect_error(viewer.get(URL), 503, "unreachable")
        assert all(f"127.0.0.1:{port}" in error["message"] for port in ports), error
    finally:
        sources.management.cache_clear()
