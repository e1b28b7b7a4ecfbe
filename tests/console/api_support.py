"""Checks the API tests share: an answer that must succeed, an error that must be
JSON with the right status and code, and a log without tracebacks."""

from __future__ import annotations

import logging


def expect_ok(response) -> dict:
    assert response.status_code == 200, (response.status_code, response.content[:500])
    return response.json()


def expect_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["error"] and body["error"]["code"] == code and body["error"]["message"], body
    return body["error"]


def expect_no_traceback(caplog) -> None:
    """Nothing was logged at ERROR or with a traceback: what a 500 logs, and what Django logs
    when it refuses a request itself (a body over the limit, too many parameters)."""
    logged = [record for record in caplog.records if record.levelno >= logging.ERROR or record.exc_info]
    assert not logged, [f"{record.name}: {record.getMessage()[:200]}" for record in logged]
