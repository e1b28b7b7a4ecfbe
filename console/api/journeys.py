"""Traced messages (docs/journeys.md), for the API: one message's journey across the mesh,
every node's records of it (``journey_steps`` asked of every node) in causal order
(management.journey_view.timeline), and the search for traced messages (``journey_search``).
Admin, as ``meshgate trace`` and ``traces``: the records name users, connections and
destinations, and a search reads headers and bodies."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from console.api.inputs import MessageSearchParams, valid
from console.api.parsers import ApiView
from console.api.permissions import Admin
from console.api.replies import ask, builtins
from console.api.schema import model_ref
from management.journey_view import timeline
from model.journeys import MAX_FIELD
from model.requests import ALL, JourneySearch, JourneySteps


def valid_message_id(message_id: str) -> str:
    """A message id as a node makes them (``<node>-<boot>-<n>``, ``.N`` for a copy): at most
    MAX_FIELD printable characters, else a 400."""
    if not 0 < len(message_id) <= MAX_FIELD or not message_id.isprintable():
        raise ValidationError(f"a message id is 1 to {MAX_FIELD} printable characters (its message-id header)")
    return message_id


class MessageJourney(ApiView):
    permission_classes = [Admin]

    @extend_schema(operation_id="message_journey_retrieve", responses={200: {
        "type": "object", "required": ["id", "steps", "nodes", "failures"], "properties": {
            "id": {"type": "string"},
            "steps": {"type": "array", "items": model_ref("JourneyStep")[200]},
            "nodes": {"type": "object", "additionalProperties": {"type": "string"},
                      "description": "the name of each node id the steps name"},
            "failures": {"type": "array", "items": {"type": "object"},
                         "description": "nodes that could not say (journeys off there: conflict)"}}}})
    def get(self, request, message_id):
        message_id = valid_message_id(message_id)
        reply, failed = ask(request, JourneySteps(ids=[message_id], node=ALL))
        if failed is not None:
            return failed
        steps = timeline(list(reply.result))
        return Response({"id": message_id, "steps": builtins(steps),
                         "nodes": {step.node: step.node_name for step in steps},
                         "failures": builtins(reply.failures)})


class MessageSearch(ApiView):
    permission_classes = [Admin]

    @extend_schema(operation_id="message_search", parameters=[MessageSearchParams], responses={200: {
        "type": "object", "required": ["hits", "failures"], "properties": {
            "hits": {"type": "array", "items": model_ref("JourneySummary")[200],
                     "description": "one per journey, newest first"},
            "failures": {"type": "array", "items": {"type": "object"},
                         "description": "nodes that could not say (journeys off there: conflict)"}}}})
    def get(self, request):
        params = valid(MessageSearchParams, request.query_params)
        reply, failed = ask(request, JourneySearch(**params))
        if failed is not None:
            return failed
        return Response({"hits": builtins(reply.result), "failures": builtins(reply.failures)})
