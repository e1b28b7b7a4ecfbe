"""OpenAPI: the shapes of the model (model/ and console.mesh.shapes) as components,
generated from the msgspec structs themselves, so the schema never drifts from them."""

from __future__ import annotations

import msgspec

from console.mesh import shapes
from model import definitions, diagnosis, events, journeys, requests, rollups
from model import mesh as model_mesh

_TYPES = [shapes.Overview, shapes.NodeRow, shapes.QueueRow, shapes.QueueDetail, shapes.LinkRow, model_mesh.Snapshot,
          model_mesh.Connection, model_mesh.TopicSubscription, requests.Done, requests.BrowsePage, events.AnyEvent,
          rollups.PipelineStatus, definitions.Definition, diagnosis.DiagnosisReport,
          journeys.JourneyStep, journeys.JourneySummary]
_REF = "#/components/schemas/{name}"


def _components() -> dict:
    _, components = msgspec.json.schema_components(_TYPES, ref_template=_REF)
    components["Event"] = {"anyOf": [{"$ref": _REF.format(name=t.__name__)} for t in events.EVENT_TYPES]}
    components["NodeDetail"] = {"allOf": [{"$ref": _REF.format(name="NodeRow")}, {
        "type": "object", "properties": {
            "links": {"type": "array", "items": {"$ref": _REF.format(name="Link")}},
            "partial_queues": {"type": "array", "items": {"$ref": _REF.format(name="PartialQueue")}},
            "subscriptions": {"type": "array", "items": {"$ref": _REF.format(name="TopicSubscription")}}}}]}
    # GET definitions: a Definition, whether it is a deletion, its origin's name, and for a
    # durable subscription where a subscriber is attached and how many messages wait for it.
    components["DefinitionRow"] = {"allOf": [{"$ref": _REF.format(name="Definition")}, {
        "type": "object", "required": ["deleted", "origin_name"], "properties": {
            "deleted": {"type": "boolean", "description": "a deletion, kept so that nodes away learn of it"},
            "origin_name": {"type": ["string", "null"], "description": "the name of the node that made the change"},
            "subscribers": {"type": "array", "description": "durable only: where a subscriber is attached",
                            "items": {"type": "object", "required": ["node", "node_name"], "properties": {
                                "node": {"type": "string"}, "node_name": {"type": "string"},
                                "connection": {"type": ["string", "null"]}}}},
            "waiting": {"type": "integer", "description": "durable only: its messages waiting on every node"}}}]}
    # GET pipeline: the PipelineStatus's fields (absent when the pipeline never wrote one),
    # whether it runs, the age of its last batch and the age after which it does not.
    status = components["PipelineStatus"]
    components["Pipeline"] = {"type": "object", "required": ["running", "age", "stale_after"], "properties": {
        **status["properties"],
        "running": {"type": "boolean", "description": "its status was written within stale_after seconds"},
        "age": {"anyOf": [{"type": "number"}, {"type": "null"}],
                "description": "seconds since its last batch was applied; null without a status"},
        "stale_after": {"type": "number", "description": "seconds after its last batch when it counts as stopped"}}}
    return components


def model_ref(name: str, many: bool = False) -> dict:
    """A 200 response of a model shape (``many``: a page of them), for extend_schema."""
    ref = {"$ref": _REF.format(name=name)}
    if not many:
        return {200: ref}
    return {200: {"type": "object", "required": ["items", "page", "page_size", "page_count", "total_count"],
                  "properties": {"items": {"type": "array", "items": ref}, "page": {"type": "integer"},
                                 "page_size": {"type": "integer"}, "page_count": {"type": "integer"},
                                 "total_count": {"type": "integer"}}}}


def reply_schema(name: str) -> dict:
    """A 200 response of an action: what each node did, and the nodes that did not answer."""
    return {200: {"type": "object", "properties": {
        "result": {"type": "array", "items": {"$ref": _REF.format(name=name)}},
        "failures": {"type": "array", "items": {"type": "object", "properties": {
            "code": {"type": "string"}, "message": {"type": "string"}, "node": {"type": "string"}}}}}}}


def add_model(result: dict, generator, request, public) -> dict:
    """drf-spectacular post-processing hook: add the model's components."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(_components())
    return result
