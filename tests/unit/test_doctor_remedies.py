"""management.remedies.remedy_request and management.audit.admin_action on hand-made
reports: which request ``apply_remedy`` sends for a finding, and why it sends none
(docs/doctor.md, "Applying a remedy")."""

from __future__ import annotations

import pytest

from management.audit import admin_action
from management.doctor import format_diagnosis
from management.doctor_common import as_json
from management.remedies import remedy_request
from model.diagnosis import DiagnosisReport, Finding, Remedy
from model.requests import ApplyRemedy, CloseConnection, Move, Nodes, Request, ScaleDownNode

NODE = "a" * 32


def finding(subject: str, remedy: Remedy | None) -> Finding:
    return Finding(id=f"kind/{NODE[:8]}///{subject}", kind="kind", severity="warning", node=NODE, subject=subject,
                   summary="s", evidence="e", explanation="raise mesh.max_hops", remedy=remedy)


def report(*findings: Finding) -> DiagnosisReport:
    return DiagnosisReport(taken_at=1.0, reporter=NODE, findings=list(findings))


MOVE = finding("orders", Remedy(label="move the backlog to B", command="meshgate move orders --node A --to-node B",
                                request=as_json(Move(node=NODE, queue="orders", to_node="b" * 32))))
CLOSE = finding("conn-1", Remedy(label="close connection conn-1", command="meshgate close conn-1 --node A",
                                 request=as_json(CloseConnection(node=NODE, connection="conn-1")), confirm=True))
ADVICE = finding("advice", Remedy(label="bring the link back", command="meshgate links", request=None))
NONE = finding("nothing", None)


def refusal(asked: ApplyRemedy, *findings: Finding):
    with pytest.raises(Exception) as raised:
        remedy_request(asked, report(*findings))
    return raised.value


def test_the_remedy_is_its_own_request_in_the_askers_name_marked_as_the_doctors():
    request = remedy_request(ApplyRemedy(finding=MOVE.id, on_behalf_of="carol"), report(CLOSE, MOVE))
    assert request == Move(node=NODE, queue="orders", to_node="b" * 32, on_behalf_of="carol", remedy_of=MOVE.id)


def test_a_finding_gone_or_never_given_is_not_found():
    error = refusal(ApplyRemedy(finding="kind/aaaaaaaa///<b>gone</b>"), MOVE)
    assert error.code == "not_found" and "no finding kind/aaaaaaaa///<b>gone</b> now" in str(error)


@pytest.mark.parametrize("advice", [ADVICE, NONE])
def test_a_finding_with_advice_only_has_nothing_to_apply(advice):
    error = refusal(ApplyRemedy(finding=advice.id, confirm=True), advice)
    assert error.code == "conflict" and "no remedy to apply, only advice" in str(error)


def test_a_remedy_that_disconnects_needs_confirm_and_says_what_it_would_do():
    error = refusal(ApplyRemedy(finding=CLOSE.id), CLOSE)
    assert error.code == "bad_request" and "would close connection conn-1 (meshgate close conn-1" in str(error)
    assert "confirm" in str(error)
    confirmed = remedy_request(ApplyRemedy(finding=CLOSE.id, confirm=True), report(CLOSE))
    assert isinstance(confirmed, CloseConnection) and confirmed.remedy_of == CLOSE.id


@pytest.mark.parametrize("request_", [ScaleDownNode(node=NODE), Nodes(), ApplyRemedy(finding="x", confirm=True)])
def test_a_remedy_request_a_remedy_may_not_be_is_refused(request_: Request):
    odd = finding("odd", Remedy(label="odd", command="meshgate odd", request=as_json(request_)))
    error = refusal(ApplyRemedy(finding=odd.id, confirm=True), odd)
    assert error.code == "bad_request" and "not one a remedy may be" in str(error)


def test_a_remedy_request_that_is_no_request_is_a_bad_request():
    odd = finding("odd", Remedy(label="odd", command="meshgate odd", request={"action": "move"}))
    assert refusal(ApplyRemedy(finding=odd.id), odd).code == "bad_request"


def test_the_audit_of_a_remedy_says_it_came_from_the_doctor():
    event = admin_action(Move(queue="orders", to_node="B", on_behalf_of="carol", remedy_of=MOVE.id), "console",
                         True, "20 message(s)")
    assert (event.user, event.action, event.target) == ("console for carol", "move", "/queue/orders")
    assert event.result == f"doctor {MOVE.id}: 20 message(s)"
    refused = admin_action(ApplyRemedy(finding=MOVE.id), "tester", False, "no finding")
    assert (refused.action, refused.target, refused.result) == ("apply_remedy", f"finding {MOVE.id}", "no finding")


def test_the_report_offers_doctor_fix_where_a_remedy_has_a_request():
    printed = format_diagnosis(report(MOVE, CLOSE, ADVICE))
    assert f"     or: meshgate doctor --fix {MOVE.id}\n" in printed + "\n", printed
    assert f"     or: meshgate doctor --fix {CLOSE.id} --yes" in printed
    assert printed.count("meshgate doctor --fix") == 2  # not for advice
