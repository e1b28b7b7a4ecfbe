"""GET /api/v1/health: 200 while every node is up and no link is down, else 503
with the reasons (for load balancers and scripts; no sign-in needed)."""

from __future__ import annotations


def test_a_healthy_mesh_answers_ok(mesh, anonymous):
    response = anonymous.get("/api/v1/health")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_a_node_down_fails_the_health_check_naming_it(mesh, anonymous):
    mesh.c.kill9()
    try:
        failed = mesh.wait(lambda: (r := anonymous.get("/api/v1/health")).status_code == 503 and r,
                           "the health check to fail")
        body = failed.json()
        assert body["status"] == "failed"
        assert "node C is down" in body["reasons"], body
        assert any(reason.startswith("link ") and reason.endswith(" is down") for reason in body["reasons"]), body
    finally:
        mesh.c.start()
    mesh.wait(lambda: anonymous.get("/api/v1/health").status_code == 200, "the mesh to be healthy again",
              timeout=30)
