"""GET /api/v1/schema/: the API's OpenAPI description (drf-spectacular; YAML by default,
``?format=json`` for JSON), with the model's shapes as components. Checked against the
endpoints the API has and against what the API really answers."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest
import yaml
from e2e_support import unique

pytestmark = pytest.mark.django_db

P = "/api/v1/"
ENDPOINTS = {
    "health": {"get"}, "overview": {"get"}, "overview/history": {"get"}, "nodes": {"get"}, "nodes/{node}": {"get"},
    "links": {"get"}, "queues": {"get"}, "queues/{name}": {"get", "delete"}, "queues/{name}/history": {"get"},
    "queues/{name}/purge": {"post"}, "queues/{name}/move": {"post"}, "queues/{name}/browse": {"post"},
    "queues/{name}/send": {"post"}, "connections": {"get"}, "connections/{connection}": {"delete"},
    "events": {"get"}, "diagnosis": {"get"}, "diagnosis/{finding_id}/remedy": {"post"}, "messages": {"get"},
    "messages/{message_id}/journey": {"get"}, "pipeline": {"get"},
    "definitions": {"get"},
    "definitions/queues/{name}": {"put", "delete"},
    "definitions/durable/{name}": {"delete"}, "definitions/traces/{destination}": {"get", "put", "delete"},
    "vhosts": {"get", "post"}, "vhosts/{name}": {"get", "delete"},
    "vhosts/{name}/limits": {"put"}, "vhosts/{name}/permissions": {"get"},
    "vhosts/{name}/permissions/{user}": {"put", "delete"}, "vhosts/{name}/permissions/group/{group}": {"put", "delete"},
}
_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


@pytest.fixture
def document(viewer) -> dict:
    response = viewer.get(P + "schema/")
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"].startswith("application/vnd.oai.openapi")
    return yaml.safe_load(response.content)


def _refs(node) -> list[str]:
    if isinstance(node, dict):
        return ([node["$ref"]] if isinstance(node.get("$ref"), str) else []) + \
            [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def _validator(document: dict, component: str, many: bool = False) -> jsonschema.Draft202012Validator:
    """A validator of one component (``many``: of a page of them) as JSON Schema 2020-12,
    the dialect msgspec writes the model's components in."""
    ref = {"$ref": f"#/components/schemas/{component}"}
    schema = {"type": "object", "required": ["items", "total_count"], "properties": {"items": {
        "type": "array", "items": ref}}} if many else ref
    return jsonschema.Draft202012Validator({**schema, "components": document["components"]})


def _valid(document: dict, component: str, instance, many: bool = False) -> None:
    errors = sorted(_validator(document, component, many).iter_errors(instance), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])


def test_the_schema_is_openapi_3_with_every_endpoint(document):
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == "Meshgate management API" and document["info"]["version"] == "1"
    paths = {path: {m for m in operations if m in _METHODS} for path, operations in document["paths"].items()}
    assert paths == {P + path: methods for path, methods in ENDPOINTS.items()}
    operation_ids = [op["operationId"] for ops in document["paths"].values() for m, op in ops.items()
                     if m in _METHODS]
    assert len(operation_ids) == len(set(operation_ids))


def test_the_schema_holds_the_models_shapes_and_every_reference_resolves(document):
    schemas = document["components"]["schemas"]
    assert {"PartialQueue", "Snapshot", "QueueRow", "Overview", "NodeRow", "LinkRow", "Connection", "Event",
            "Done", "BrowsePage"} <= set(schemas)
    assert {"depth", "in_flight", "latency", "latency_sum_ms"} <= set(schemas["PartialQueue"]["properties"])
    snapshot = schemas["Snapshot"]["properties"]
    assert snapshot["queues"]["items"] == {"$ref": "#/components/schemas/PartialQueue"}
    refs = set(_refs(document))
    assert "#/components/schemas/QueueRow" in refs and "#/components/schemas/Overview" in refs
    missing = {ref for ref in refs if ref.rpartition("/")[2] not in schemas or not ref.startswith(
        "#/components/schemas/")}
    assert not missing


def test_the_json_format_is_the_same_document(viewer, document):
    response = viewer.get(P + "schema/", {"format": "json"})
    assert response.status_code == 200 and response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    assert json.loads(response.content) == document


def test_a_bad_token_is_refused(anonymous):
    anonymous.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    response = anonymous.get(P + "schema/", {"format": "json"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_the_schema_is_valid_for_the_openapi_version_it_declares(document):
    from drf_spectacular.validation import validate_schema

    validate_schema(document)  # the official OpenAPI JSON Schema for document["openapi"]


def test_what_the_api_answers_matches_the_schema(mesh, viewer, document):
    queue = unique("sc")
    mesh.send(mesh.b, queue, ["one", "two"])
    row = mesh.wait(lambda: (r := viewer.get(f"{P}queues/{queue}")).status_code == 200 and r.json(),
                    "the queue in the view")
    _valid(document, "QueueRow", row)
    _valid(document, "Overview", viewer.get(P + "overview").json())
    _valid(document, "NodeRow", viewer.get(P + "nodes").json(), many=True)
    _valid(document, "LinkRow", viewer.get(P + "links").json(), many=True)
    _valid(document, "Event", viewer.get(P + "events").json(), many=True)
    # A wrong answer is caught: the check is not vacuous.
    with pytest.raises(AssertionError):
        _valid(document, "QueueRow", {**row, "depth": "two"})


def test_a_node_detail_matches_the_schema(mesh, viewer, document):
    _valid(document, "NodeDetail", viewer.get(P + "nodes/B").json())


def test_a_page_of_queues_matches_the_schema(mesh, viewer, document):
    queue = unique("sc")
    mesh.send(mesh.b, queue, ["one"])
    page = mesh.wait(lambda: (p := viewer.get(P + "queues", {"name": queue}).json())["items"] and p,
                     "the queue in the list")
    _valid(document, "QueueRow", page, many=True)


def _response_validator(document: dict, path: str) -> jsonschema.Draft202012Validator:
    schema = document["paths"][P + path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    return jsonschema.Draft202012Validator({**schema, "components": document["components"]})


def test_the_pipeline_and_the_charts_match_the_schema(mesh, viewer, document):
    import redis

    from tests.console.pipeline_support import LATENCY, clear, write_status, write_windows

    client = redis.Redis.from_url(mesh.redis.url)
    history = _response_validator(document, "overview/history")
    try:
        clear(client)
        _valid(document, "Pipeline", viewer.get(P + "pipeline").json())  # no status
        snapshots = viewer.get(P + "overview/history", {"seconds": "60"}).json()
        assert snapshots["source"] == "snapshots" and not list(history.iter_errors(snapshots))
        now = time.time()
        write_windows(client, "10s", now - 300, now, latency=LATENCY)
        write_status(client)
        answer = viewer.get(P + "pipeline").json()
        assert answer["running"]
        _valid(document, "Pipeline", answer)
        charted = viewer.get(P + "overview/history", {"seconds": "300"}).json()
        assert charted["source"] == "pipeline" and not list(history.iter_errors(charted))
        assert list(history.iter_errors({**charted, "resolution": "5m"}))  # not vacuous
        with pytest.raises(AssertionError):
            _valid(document, "Pipeline", {**answer, "running": "yes"})
    finally:
        clear(client)
        client.close()


def test_the_definitions_match_the_schema(mesh, admin, document):
    queue = unique("scd")
    response = admin.put(f"{P}definitions/queues/{queue}", {"max_length": 10, "expiry_queue": ""}, format="json")
    assert response.status_code == 200, response.content[:500]
    page = admin.get(P + "definitions", {"name": queue}).json()
    assert [row["queue"] for row in page["items"]] == [{"max_length": 10, "expiry_queue": ""}]
    validator = _response_validator(document, "definitions")
    assert not list(validator.iter_errors(page)), list(validator.iter_errors(page))[:3]
    assert list(validator.iter_errors({**page, "items": [{**page["items"][0], "origin_name": 7}]}))  # not vacuous


def test_the_diagnosis_matches_the_schema(mesh, viewer, document):
    params = document["paths"][P + "diagnosis"]["get"]["parameters"]
    assert {p["name"] for p in params} == {"older_than", "waiting", "in_doubt", "unacked"}
    answer = viewer.get(P + "diagnosis", {"older_than": "0"}).json()
    assert len(answer["nodes"]) == 3, answer
    _valid(document, "DiagnosisReport", answer)
    finding = {"id": "unacked_old/x///B-1", "kind": "unacked_old", "severity": "warning", "node": "x",
               "subject": "B-1", "summary": "s", "evidence": "e", "explanation": "why",
               "remedy": {"label": "close", "command": "meshgate close B-1", "request": {"action": "close_connection"}}}
    _valid(document, "DiagnosisReport", {**answer, "findings": [finding]})
    with pytest.raises(AssertionError):  # not vacuous
        _valid(document, "DiagnosisReport", {**answer, "findings": [{**finding, "severity": "bad"}]})
