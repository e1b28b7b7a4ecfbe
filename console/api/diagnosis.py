"""The stuck-message doctor (docs/doctor.md) for the API: the report (``diagnosis``,
to any signed-in user) and a finding's remedy done (``apply_remedy``, admin): the node
asked diagnoses again and sends the remedy's own request in the console user's name,
audited as that action, from the doctor."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from console.api.inputs import DiagnosisParams, RemedyInput, valid
from console.api.parsers import ApiView
from console.api.permissions import Admin
from console.api.replies import ask, builtins
from console.api.schema import model_ref
from model.requests import ApplyRemedy, Diagnosis
from model.requests_doctor import MAX_FINDING_ID


class DiagnosisView(ApiView):
    """What is stuck in the mesh, why, and how to unstick it: the ``diagnosis`` management
    request, answered by the first node that takes it from every node's facts. It
    changes nothing; each finding's ``remedy.request`` is the request that would."""

    @extend_schema(operation_id="diagnosis_retrieve", parameters=[DiagnosisParams],
                   responses=model_ref("DiagnosisReport"))
    def get(self, request):
        params = valid(DiagnosisParams, request.query_params)
        thresholds = {f"{name}_s": params[name] for name in ("waiting", "in_doubt", "unacked") if name in params}
        reply, failed = ask(request, Diagnosis(older_than_s=params.get("older_than"), **thresholds))
        if failed is not None:
            return failed
        return Response(builtins(reply.result))


def valid_finding_id(finding_id: str) -> str:
    """A finding's id as the report gives it (``KIND/NODE/VHOST/SUBJECT``): at most
    MAX_FINDING_ID printable characters, else a 400."""
    if not 0 < len(finding_id) <= MAX_FINDING_ID or not finding_id.isprintable():
        raise ValidationError(f"a finding's id is 1 to {MAX_FINDING_ID} printable characters (its id in the "
                              "diagnosis)")
    return finding_id


class DiagnosisRemedy(ApiView):
    """Do a finding's remedy now (``apply_remedy``): 404 when the finding is gone, 409 when it
    has advice only, 400 when it drops or disconnects something and ``confirm`` is not given."""

    permission_classes = [Admin]

    @extend_schema(operation_id="diagnosis_remedy_create", request=RemedyInput, responses={200: {
        "type": "object", "required": ["action", "result", "failures"], "properties": {
            "action": {"type": "string", "description": "the remedy's action (move, forget, close_connection, …)"},
            "result": {"description": "what that action answers (its Done, or a page of a browse)"},
            "failures": {"type": "array", "items": {"type": "object"}}}}})
    def post(self, request, finding_id):
        finding_id = valid_finding_id(finding_id)
        data = valid(RemedyInput, request.data)
        reply, failed = ask(request, ApplyRemedy(finding=finding_id, confirm=data["confirm"]))
        if failed is not None:
            return failed
        return Response({"action": reply.action, "result": builtins(reply.result),
                         "failures": builtins(reply.failures)})
