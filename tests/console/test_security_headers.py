"""Every answer of the console carries its Content-Security-Policy — pages, the sign-in
page, API answers and API errors, /metrics, a 404 — and the policy lets pages run only
the console's own script files: no inline script or style, no eval. (That the pages work
under it, with no violation, is test_browser_security.py's.)"""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def policy(response) -> dict[str, list[str]]:
    header = response.headers.get("Content-Security-Policy")
    assert header, (response.status_code, dict(response.headers))
    return {name: values for name, *values in (part.split() for part in header.split(";"))}


def test_the_policy_allows_only_the_consoles_own_scripts(client):
    directives = policy(client.get("/login/", HTTP_HOST="127.0.0.1"))
    assert directives["script-src"] == ["'self'"] and directives["style-src"] == ["'self'"]
    assert directives["default-src"] == ["'self'"] and directives["object-src"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"] and directives["base-uri"] == ["'none'"]


def test_every_kind_of_answer_carries_it(users, anonymous, viewer):
    browser = Client(HTTP_HOST="127.0.0.1")
    browser.force_login(users["viewer"][0])
    answers = {
        "a page": browser.get("/events/"),
        "a page, signed out": Client(HTTP_HOST="127.0.0.1").get("/events/"),  # the redirect to sign in
        "the API": viewer.get("/api/v1/schema/"),
        "an API error": anonymous.get("/api/v1/nodes"),
        "/metrics refused": anonymous.get("/metrics"),
        "a 404": browser.get("/nothing/here"),
    }
    assert {what: response.status_code for what, response in answers.items()} == {
        "a page": 200, "a page, signed out": 302, "the API": 200, "an API error": 401, "/metrics refused": 401,
        "a 404": 404}
    for what, response in answers.items():
        assert policy(response)["script-src"] == ["'self'"], what
