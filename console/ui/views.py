"""Every page is a shell rendered for the signed-in user; its script reads the API
and listens on the WebSocket."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from console.api.permissions import is_admin

TITLES = {
    "overview": "Overview", "topology": "Topology", "queues": "Queues", "queue": "Queue", "definitions": "Definitions",
    "redistribution": "Redistribution", "connections": "Connections", "links": "Links", "events": "Events",
}


def page(name: str):
    @login_required
    @ensure_csrf_cookie
    def view(request, **kwargs):
        return render(request, f"ui/{name}.html", {
            "page": name, "title": TITLES[name], "is_admin": is_admin(request.user), **kwargs,
        })

    view.__name__ = f"{name}_page"
    return view
