"""The Content-Security-Policy of every answer, pages and API alike: a page runs only
the console's own script files and styles (no inline script, style or event handler,
no eval), talks only to the console (its API and its WebSocket) and sits in no frame.
An injected ``<script>`` or ``style=`` therefore does nothing even if one got through."""

from __future__ import annotations

from django.utils.deprecation import MiddlewareMixin

POLICY = "; ".join((
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",  # the pages' empty favicon is a data: URL
    "connect-src 'self'",  # the API and /ws/mesh (same host and port, ws: or wss:)
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
))


class ContentSecurityPolicy(MiddlewareMixin):
    """Sync and async alike (MiddlewareMixin), so daphne needs no thread hop for it."""

    def process_response(self, request, response):
        response.headers.setdefault("Content-Security-Policy", POLICY)
        return response
