"""Checks the API tests share: an answer that must succeed, and an error that must be
JSON with the right status and code."""

from __future__ import annotations


def expect_ok(response) -> dict:
    assert response.status_code == 200, (response.status_code, response.content[:500])
    return response.json()


def expect_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["error"] and body["error"]["code"] == code and body["error"]["message"], body
    return body["error"]
