"""GET /metrics: every node, link and partial queue in the Prometheus text format, from
the nodes' latest snapshots, for a scraper with a console user's API token (as
Prometheus's ``authorization`` sends it) unless MESHGATE_CONSOLE_METRICS_OPEN opens it.
Checked with promtool."""

from __future__ import annotations

import re
import subprocess

import pytest
from django.test import Client
from e2e_support import HOST, run_meshgate, unique
from mesh_support import send_many
from vhost_support import VhostClients

PROMTOOL = "/usr/bin/promtool"
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@pytest.fixture
def client(users):
    """Prometheus: ``authorization: {credentials: <a viewer's API token>}`` (type Bearer)."""
    return Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION="Bearer " + users["viewer"][1])


def _scrape(client) -> str:
    response = client.get("/metrics")
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return response.content.decode()


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = dict(_LABEL.findall(match.group(2) or ""))
        samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def _value(text: str, name: str, **labels: str) -> float | None:
    found = [v for n, ls, v in _samples(text) if n == name and all(ls.get(k) == w for k, w in labels.items())]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def _promtool(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)


def test_metrics_need_a_token_or_a_session(mesh, users, settings):
    def status(**headers) -> int:
        return Client(HTTP_HOST="127.0.0.1", **headers).get("/metrics").status_code

    refused = Client(HTTP_HOST="127.0.0.1").get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    assert b"meshgate_" not in refused.content
    token = users["viewer"][1]
    assert status(HTTP_AUTHORIZATION="Bearer " + "0" * 40) == 401
    assert status(HTTP_AUTHORIZATION="Basic " + token) == 401
    assert status(HTTP_AUTHORIZATION="Bearer " + token) == 200
    assert status(HTTP_AUTHORIZATION="Token " + token) == 200  # as the API takes it
    signed_in = Client(HTTP_HOST="127.0.0.1")
    signed_in.force_login(users["viewer"][0])
    assert signed_in.get("/metrics").status_code == 200
    users["viewer"][0].is_active = False
    users["viewer"][0].save()
    assert status(HTTP_AUTHORIZATION="Bearer " + token) == 401  # a disabled user's token
    settings.CONSOLE_METRICS_OPEN = True  # MESHGATE_CONSOLE_METRICS_OPEN=1
    assert status() == 200


def test_metrics_pass_promtool(mesh, client):
    text = _scrape(client)
    checked = _promtool(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # promtool is a real check here: the same text with a counter's suffix cut off fails it.
    broken = text.replace("meshgate_link_forwarded_out_total", "meshgate_link_forwarded_out")
    assert "meshgate_link_forwarded_out_total{" in text and _promtool(broken).returncode != 0


def test_every_node_is_up(mesh, client):
    text = mesh.wait(lambda: (t := _scrape(client)) and all(
        _value(t, "meshgate_node_up", node=name) == 1 for name in "ABC") and t, "every node up in /metrics")
    ups = [(labels["node"], labels["node_id"], value) for n, labels, value in _samples(text) if n == "meshgate_node_up"]
    assert sorted(name for name, _, _ in ups) == ["A", "B", "C"] and len({node_id for _, node_id, _ in ups}) == 3
    for name in "ABC":
        assert _value(text, "meshgate_node_start_time_seconds", node=name) > 0
        assert _value(text, "meshgate_node_connections", node=name) is not None


def test_counters_end_in_total_and_every_family_has_help_and_type(mesh, client):
    text = _scrape(client)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    helps = set(re.findall(r"^# HELP (\S+) ", text, re.M))
    assert set(types) == helps and len(types) > 20
    counters = [name for name, kind in types.items() if kind == "counter"]
    assert counters and all(name.endswith("_total") for name in counters), counters
    assert {"meshgate_queue_enqueued_total", "meshgate_queue_acked_total", "meshgate_link_forwarded_out_total",
            "meshgate_node_metrics_dropped_total"} <= set(counters)
    assert types["meshgate_queue_latency_seconds"] == "histogram"
    assert all(kind in ("counter", "gauge", "histogram") for kind in types.values())


def test_queue_depth_is_what_was_sent_on_that_node(mesh, client):
    queue = unique("pm")
    mesh.send(mesh.b, queue, [f"m{i}" for i in range(7)])
    text = mesh.wait(lambda: (t := _scrape(client)) and _value(t, "meshgate_queue_messages", node="B", queue=queue)
                     == 7 and t, "the depth of the queue on B")
    assert f'meshgate_queue_messages{{node="B",vhost="/",queue="{queue}"}} 7\n' in text
    assert _value(text, "meshgate_queue_enqueued_total", node="B", queue=queue) == 7
    assert _value(text, "meshgate_queue_consumers", node="B", queue=queue) == 0
    assert _value(text, "meshgate_queue_oldest_message_age_seconds", node="B", queue=queue) >= 0
    assert _value(text, "meshgate_queue_messages", node="A", queue=queue) is None  # nothing on A
    checked = _promtool(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_latency_histogram_counts_acked_messages(mesh, client):
    queue = unique("pl")
    sender = mesh.b.client()
    consumer = mesh.b.client()
    try:
        send_many(sender, f"/queue/{queue}", [f"m{i}" for i in range(5)])
        consumer.subscribe(f"/queue/{queue}", ack="client-individual")
        for message in consumer.listener.wait_for(5):
            consumer.ack(message)
        consumer.sync()
        text = mesh.wait(lambda: (t := _scrape(client)) and _value(
            t, "meshgate_queue_latency_seconds_count", node="B", queue=queue) == 5 and t, "5 acks in the histogram")
    finally:
        sender.disconnect()
        consumer.disconnect()
    buckets = [(labels["le"], value) for name, labels, value in _samples(text)
               if name == "meshgate_queue_latency_seconds_bucket" and labels.get("node") == "B"
               and labels.get("queue") == queue]
    assert buckets[-1] == ("+Inf", 5)
    bounds = [float(le) for le, _ in buckets]
    counts = [count for _, count in buckets]
    assert bounds == sorted(bounds) and counts == sorted(counts) and counts[0] < 5  # cumulative
    assert 0 < _value(text, "meshgate_queue_latency_seconds_sum", node="B", queue=queue) < 60
    assert _value(text, "meshgate_queue_acked_total", node="B", queue=queue) == 5
    checked = _promtool(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_links_are_exported_from_both_ends(mesh, client):
    text = mesh.wait(lambda: (t := _scrape(client)) and all(
        _value(t, "meshgate_link_up", node=a, peer=b) == 1 for a in "ABC" for b in "ABC" if a != b) and t,
        "every link up at both ends")
    assert _value(text, "meshgate_link_messages_in_flight", node="A", peer="B") is not None


def test_two_vhosts_with_the_same_queue_name_are_two_series_told_apart_by_vhost(mesh, client):
    vhost, queue = unique("team"), unique("orders")
    added = run_meshgate(["vhost", "add", vhost, "--stomp", f"{HOST}:{mesh.b.stomp}"])
    assert added.returncode == 0, added.stdout + added.stderr
    mesh.send(mesh.b, queue, ["m0", "m1"])  # the default vhost's queue
    clients = VhostClients()
    try:
        send_many(clients.stomp_on(mesh.b.proc, vhost), f"/queue/{queue}", ["t0", "t1", "t2"])
        text = mesh.wait(lambda: (t := _scrape(client)) and _value(
            t, "meshgate_queue_messages", node="B", vhost=vhost, queue=queue) == 3 and t, "the vhost's queue on B")
    finally:
        clients.close_all()
    assert _value(text, "meshgate_queue_messages", node="B", vhost="/", queue=queue) == 2
    assert _value(text, "meshgate_queue_enqueued_total", node="B", vhost=vhost, queue=queue) == 3
    assert _value(text, "meshgate_queue_enqueued_total", node="B", vhost="/", queue=queue) == 2
    counts = [labels for name, labels, _ in _samples(text)
              if name == "meshgate_queue_latency_seconds_count" and labels.get("queue") == queue]
    assert sorted(labels["vhost"] for labels in counts) == sorted(["/", vhost])
    checked = _promtool(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
