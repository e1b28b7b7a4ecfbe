"""GET /api/v1/nodes/<node>: a node's ``node.certificates`` (each TLS listener's subject
and expiry) and GET /api/v1/events?kind=certificate_expiring, beside the real mesh.

A real broker "T" with a STOMP TLS listener whose certificate ends in 5 days reports it
and fires the event itself; node "D" (tls_node_support) holds several certificates at
once (snapshots and event written with the node's own metrics code)."""

from __future__ import annotations

import msgspec
import pytest

from tests.console.api_support import expect_ok
from tests.console.tls_node_support import T_SUBJECT, TlsNode, tls_broker

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def tls_node(mesh):
    from console.mesh.sources import mesh_view

    node = TlsNode(mesh.redis.url).start()
    try:
        mesh.wait(lambda: any(row.name == "D" and row.state == "up" for row in mesh_view(fresh=True).frame.nodes),
                  "node D up in the console's view")
        yield node
    finally:
        node.stop()


def test_a_node_detail_carries_its_listeners_certificates(mesh, viewer, tls_node):
    detail = expect_ok(viewer.get("/api/v1/nodes/D"))
    assert detail["node"]["certificates"] == msgspec.to_builtins(tls_node.certificates)
    (row,) = [row for row in expect_ok(viewer.get("/api/v1/nodes"))["items"] if row["name"] == "D"]
    assert row["node"]["certificates"] == detail["node"]["certificates"]


def test_a_node_without_tls_has_no_certificates(mesh, viewer, tls_node):
    assert expect_ok(viewer.get("/api/v1/nodes/A"))["node"]["certificates"] == []


def test_the_schema_describes_the_certificates(viewer):
    schemas = expect_ok(viewer.get("/api/v1/schema/", {"format": "json"}))["components"]["schemas"]
    listed = schemas["Node"]["properties"]["certificates"]["items"]
    assert listed == {"$ref": "#/components/schemas/ListenerCertificate"}
    assert set(schemas["ListenerCertificate"]["required"]) == {"listener", "subject", "not_after"}
    assert {"$ref": "#/components/schemas/CertificateExpiring"} in schemas["Event"]["anyOf"]


def test_the_certificate_expiring_event_is_listed_by_kind(mesh, viewer, tls_node):
    soon = next(c for c in tls_node.certificates if c.listener == "stomp+ssl")
    event = tls_node.expiring(soon)
    items = mesh.wait(lambda: expect_ok(viewer.get("/api/v1/events", {"kind": "certificate_expiring"}))["items"],
                      "the certificate_expiring event in the stream")
    assert items == [msgspec.to_builtins(event)]
    assert items[0]["node"] == tls_node.node.id and items[0]["listener"] == "stomp+ssl"


@pytest.fixture(scope="module")
def broker_t(mesh, tmp_path_factory):
    broker, certificate = tls_broker(tmp_path_factory.mktemp("broker-t"), mesh.redis.url, days=5)
    try:
        yield certificate
    finally:
        broker.cleanup()


def test_a_real_tls_listeners_certificate_and_its_expiry_event_reach_the_console(mesh, viewer, broker_t):
    mesh.wait(lambda: viewer.get("/api/v1/nodes/T").status_code == 200, "node T's snapshots in the console's view")
    detail = expect_ok(viewer.get("/api/v1/nodes/T"))
    assert detail["node"]["certificates"] == [{"listener": "stomp+ssl", "subject": T_SUBJECT,
                                               "not_after": broker_t.not_valid_after_utc.timestamp()}]
    # 5 days left: under the 14 days of the warning, so T said so as it started.
    items = mesh.wait(lambda: expect_ok(viewer.get("/api/v1/events", {"kind": "certificate_expiring",
                                                                       "node": "T"}))["items"],
                      "node T's certificate_expiring event")
    assert [(e["listener"], e["subject"], e["not_after"], e["node"]) for e in items] == \
        [("stomp+ssl", T_SUBJECT, broker_t.not_valid_after_utc.timestamp(), detail["id"])]
