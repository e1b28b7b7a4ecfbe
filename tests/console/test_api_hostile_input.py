"""Hostile requests to the REST API, whatever the endpoint: bodies JSON cannot hold or
that nest deeper than any input needs, bodies over Django's DATA_UPLOAD_MAX_MEMORY_SIZE,
more query parameters than DATA_UPLOAD_MAX_NUMBER_FIELDS, forms instead of JSON, paths
and hosts the API does not serve. Each is a 4xx JSON error (never Django's HTML page
or a 500) and, where the API answers it, logs no traceback."""

from __future__ import annotations

import json

import pytest
from e2e_support import unique

from tests.console.api_support import expect_error, expect_no_traceback

pytestmark = pytest.mark.django_db


def _browse(client, content, content_type: str = "application/json"):
    return client.post(f"/api/v1/queues/{unique('qh')}/browse", content, content_type=content_type)


@pytest.mark.parametrize("content, words", [
    pytest.param("[" * 100_000, "nests deeper than 32 levels", id="100k-brackets"),
    pytest.param('{"offset": ' + "[" * 900 + "]" * 900 + "}", "nests deeper than 32 levels", id="900-deep-value"),
    pytest.param('{"offset": ' + "9" * 5000 + "}", "a number too long", id="5000-digit-number"),
])
def test_a_body_nested_too_deep_or_too_long_to_read_is_a_json_400(admin, caplog, content, words):
    error = expect_error(_browse(admin, content), 400, "bad_request")
    assert words in error["message"], error
    expect_no_traceback(caplog)


def test_a_body_over_the_upload_limit_is_a_json_413(admin, caplog, settings):
    body = json.dumps({"body": "x" * 3_000_000})
    response = admin.post(f"/api/v1/queues/{unique('qh')}/send", body, content_type="application/json")
    error = expect_error(response, 413, "too_large")
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in error["message"], error
    expect_no_traceback(caplog)


@pytest.mark.parametrize("path", ["/api/v1/queues", "/api/v1/events", "/api/v1/overview/history"])
def test_more_query_parameters_than_the_limit_is_a_json_400(viewer, caplog, settings, path):
    response = viewer.get(path, {f"p{i}": "1" for i in range(1500)})
    error = expect_error(response, 400, "bad_request")
    assert f"more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} parameters" in error["message"], error
    expect_no_traceback(caplog)


def test_a_form_instead_of_json_is_a_json_415(admin, caplog):
    expect_error(_browse(admin, "offset=1", "application/x-www-form-urlencoded"), 415, "unsupported_media_type")
    expect_error(admin.post(f"/api/v1/queues/{unique('qh')}/purge", {"node": "A"}), 415, "unsupported_media_type")
    expect_no_traceback(caplog)


def test_a_path_the_api_does_not_have_is_a_json_404(viewer):
    assert "schema" in expect_error(viewer.get("/api/v1/no-such-thing"), 404, "not_found")["message"]


def test_a_host_the_console_does_not_serve_is_a_json_400_and_logs_no_traceback(viewer, caplog):
    for _ in range(3):
        expect_error(viewer.get("/api/v1/queues", HTTP_HOST="elsewhere.example"), 400, "bad_request")
    expect_no_traceback(caplog)
