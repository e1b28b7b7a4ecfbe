"""``apply_remedy`` (docs/doctor.md, "Applying a remedy"): the asked node diagnoses the
mesh again, finds the finding by its id, and sends its remedy's request through the
service's own path (ManagementService.run) in the asker's name and with the asker's
permission. So the action is routed, refused or done, and audited, as itself; its
``admin_action`` event's result begins "doctor FINDING: " (Request.remedy_of)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from twisted.internet import defer

from management.audit import admin_action
from model.diagnosis import DiagnosisReport
from model.requests import ApplyRemedy, Diagnosis, ManagementError, Reply, Request, action_of, decode_request

if TYPE_CHECKING:
    from management.service import ManagementService

# The admin actions a remedy may be (the doctor's remedies are these): anything else a
# finding's remedy asked for would be refused, whatever the asker may do.
REMEDY_ACTIONS = frozenset({"move", "redistribute", "forget", "close_connection", "browse", "purge",
                            "delete_definition"})


def apply_remedy(service: ManagementService, asked: ApplyRemedy, user: str, admin: bool) -> defer.Deferred:
    """Fires with the remedy's own Reply, or apply_remedy's refusal (audited) when the
    finding is gone, is advice only, or needs ``confirm``."""
    # Every threshold at 0: a finding the asker saw, whatever thresholds showed it, is found
    # again while its problem lasts. Only a problem that is gone makes its id stale.
    diagnosed = service.run(Diagnosis(older_than_s=0), user, admin)

    def remedied(reply: Reply) -> Reply | defer.Deferred:
        if not reply.ok:
            return Reply(action="apply_remedy", ok=False, error=reply.error)
        try:
            remedy = remedy_request(asked, reply.result)
        except ManagementError as error:
            service.events.emit(admin_action(asked, user, False, str(error)))
            return Reply(action="apply_remedy", ok=False, error=error.failure())
        return service.run(remedy, user, admin)

    return diagnosed.addCallback(remedied)


def remedy_request(asked: ApplyRemedy, report: DiagnosisReport) -> Request:
    """The request that does the remedy of ``asked.finding``, in the asker's name and marked
    as the doctor's; a ManagementError saying why there is none to do."""
    finding = next((f for f in report.findings if f.id == asked.finding), None)
    if finding is None:
        raise ManagementError("not_found", f"no finding {asked.finding} now: its problem is gone, or it is no id "
                                           "meshgate doctor gave (run it again for the findings of now)")
    remedy = finding.remedy
    if remedy is None or remedy.request is None:
        raise ManagementError("conflict", f"{finding.id} has no remedy to apply, only advice: "
                                          f"{remedy.command if remedy is not None else finding.explanation}")
    if remedy.confirm and not asked.confirm:
        raise ManagementError("bad_request", f"the remedy of {finding.id} would {remedy.label} ({remedy.command}): "
                                             "it drops or disconnects something, so ask again with confirm "
                                             "(meshgate doctor --fix ID --yes)")
    request = decode_request(msgspec.json.encode(remedy.request))
    if action_of(request) not in REMEDY_ACTIONS:
        raise ManagementError("bad_request", f"the remedy of {finding.id} is a {action_of(request)} request, not one "
                                             f"a remedy may be ({', '.join(sorted(REMEDY_ACTIONS))})")
    return msgspec.structs.replace(request, on_behalf_of=asked.on_behalf_of, remedy_of=finding.id)
