"""GET /api/v1/messages: traced messages found by queue, header, body text or time across
the console's real 3-node mesh (docs/journeys.md, "Finding a traced message"), one hit
per journey, newest first; admin only; a malformed or hostile parameter is a JSON 400,
and what the request carried never makes a log line longer."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest
from e2e_support import unique

from tests.console.api_support import expect_error, expect_no_traceback, expect_ok, subscribe_seen_on_a

pytestmark = pytest.mark.django_db
URL = "/api/v1/messages"


def search(client, **params) -> dict:
    return expect_ok(client.get(URL + "?" + urlencode(params)))


def roots(answer: dict) -> list[str]:
    return [hit["root"] for hit in answer["hits"]]


def test_traced_messages_are_found_by_queue_header_body_and_time(mesh, viewer, admin):
    queue = unique("search")
    consumer = mesh.c.client()
    subscribe_seen_on_a(mesh, viewer, consumer, queue)
    producer = mesh.a.client()
    started = time.time()
    try:
        producer.send(f"/queue/{queue}", "order <b>1042</b>", headers={"trace": "true", "customer": "c-42"},
                      receipt=True)
        producer.send(f"/queue/{queue}", "order 7", headers={"trace": "true", "customer": "c-7"}, receipt=True)
        producer.send(f"/queue/{queue}", "order <b>1042</b> again, untraced", headers={"customer": "c-42"},
                      receipt=True)
        first, second, _ = (m.headers["message-id"] for m in consumer.listener.wait_for(3))
    finally:
        producer.disconnect()
        consumer.disconnect()
    by_queue = mesh.wait(lambda: (a := search(admin, queue=queue))["hits"] and len(a["hits"]) == 2
                         and all(hit["steps"] >= 8 for hit in a["hits"]) and a, "both journeys on A and C")
    assert roots(by_queue) == [second, first] and by_queue["failures"] == []
    hit = by_queue["hits"][1]
    assert (hit["node_name"], hit["destination"]) == ("A", f"/queue/{queue}"), hit
    assert hit["last_step"] in ("acked", "peer_stored"), hit  # C's ack, or A's last: C has it
    assert roots(search(admin, header="customer=c-42")) == [first]
    assert roots(search(admin, body="<b>1042</b>", since=started - 1, until=time.time() + 1)) == [first]
    assert roots(search(admin, queue=queue, limit=1)) == [second]
    assert search(admin, queue=queue, until=started - 1)["hits"] == []


def test_a_search_is_for_admins(mesh, viewer, anonymous):
    expect_error(viewer.get(URL + "?body=x"), 403, "forbidden")
    expect_error(anonymous.get(URL), 401, "unauthenticated")


@pytest.mark.parametrize("query", [
    "limit=0", "limit=201", "limit=ten", "since=-1", "since=nan", "until=inf", "since=1e12", "since=5&until=1",
    "header=no-equals", "header=%3Dvalue", "header=k%3D" + "v" * 300, "body=", "body=" + "b" * 201,
    "queue=a%00b", "queue=" + "q" * 201, "vhost=%00",
])
def test_a_malformed_parameter_is_a_json_400(mesh, admin, query, caplog):
    expect_error(admin.get(f"{URL}?{query}"), 400, "bad_request")
    expect_no_traceback(caplog)


def test_a_huge_hostile_value_is_refused_without_growing_a_log_line(mesh, admin, caplog):
    hostile = "<script>" + "x" * 100_000 + "\n"
    error = expect_error(admin.get(URL + "?" + urlencode({"body": hostile, "header": hostile})), 400,
                         "bad_request")
    assert len(error["message"]) < 1000
    assert all(len(record.getMessage()) < 1000 for record in caplog.records), [
        record.getMessage()[:200] for record in caplog.records]
