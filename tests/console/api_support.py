"""Checks the API tests share: an answer that must succeed, an error that must be
JSON with the right status and code, and a log without tracebacks; and a consumer's
demand awaited on another node."""

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


def subscribe_seen_on_a(mesh, viewer, consumer, queue: str) -> None:
    """Subscribe ``consumer`` (a client of another node) to ``queue`` and wait until A lists
    its demand: until then A keeps what it is sent for a while instead of forwarding it."""
    consumer.subscribe(f"/queue/{queue}")
    mesh.wait(lambda: any(d["node"] for q in viewer.get("/api/v1/nodes/A").json()["partial_queues"]
                          if q["name"] == queue for d in q["remote_demand"]) or None,
              f"the demand for {queue} seen on A")


def vhost_url(name: str, *rest: str) -> str:
    """/api/v1/vhosts/NAME/REST…, the vhost's name and each part percent-encoded ("/" is %2F)."""
    from urllib.parse import quote

    return "/api/v1/vhosts/" + quote(name, safe="") + "".join("/" + quote(part, safe="") for part in rest)


def permission_rows(mesh, client, vhost: str, count: int) -> list[dict]:
    """GET vhosts/VHOST/permissions once ``count`` rows are listed (every node has heard)."""
    url = vhost_url(vhost, "permissions")
    mesh.wait(lambda: len(expect_ok(client.get(url))["items"]) == count, f"{count} permission rows of {vhost}")
    return expect_ok(client.get(url))["items"]
