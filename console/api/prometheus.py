"""``GET /metrics``: every node, link and partial queue in the Prometheus text
format (metrics.prometheus), from the nodes' latest snapshots (nodes down are
``meshgate_node_up 0``).

It names every queue, node and link of the mesh, so like the API it needs a console
user's API token (``Authorization: Bearer <token>``, Prometheus's ``authorization``
setting; ``Token <token>`` too) or a signed-in session, unless
``MESHGATE_CONSOLE_METRICS_OPEN=1`` opens it (docs/security.md)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from console.mesh.sources import mesh_view
from metrics.prometheus import CONTENT_TYPE, NodeUp
from metrics.prometheus import exposition as render


def exposition() -> str:
    view = mesh_view()
    rows = view.frame.nodes
    up = [NodeUp(row.name, row.id, row.state in ("up", "leaving")) for row in rows]
    held = view.snapshots({node.id for node in up if node.up})
    return render(up, [held[row.id] for row in rows if row.id in held])


def _may_scrape(request) -> bool:
    if settings.CONSOLE_METRICS_OPEN or request.user.is_authenticated:
        return True
    keyword, _, key = request.headers.get("Authorization", "").partition(" ")
    if keyword.lower() not in ("bearer", "token") or not key.strip():
        return False
    try:
        TokenAuthentication().authenticate_credentials(key.strip())  # a token of an active user
    except AuthenticationFailed:
        return False
    return True


def metrics(request) -> HttpResponse:
    if not _may_scrape(request):
        response = HttpResponse("send a console user's API token: Authorization: Bearer <token>\n",
                                status=401, content_type="text/plain; charset=utf-8")
        response["WWW-Authenticate"] = 'Bearer realm="meshgate"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)
