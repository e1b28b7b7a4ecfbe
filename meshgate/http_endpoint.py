"""The node's own HTTP endpoint (``[http] bind``, off by default): ``GET /healthz``
(the reactor answers: 200), ``GET /readyz`` (meshgate.health's rules: 200 or 503,
the reasons in JSON) and ``GET /metrics`` (this node in the Prometheus text format,
the families the console exports: metrics.prometheus). Nothing here is on the
message path: each request reads the node's state once, on the reactor."""

from __future__ import annotations

from typing import Callable

import msgspec
from twisted.web import resource, server

from meshgate.health import HealthFacts, readiness
from metrics.prometheus import CONTENT_TYPE

JSON = b"application/json"


class HealthResource(resource.Resource):
    isLeaf = True

    def __init__(self, facts: Callable[[], HealthFacts], metrics: Callable[[], str]) -> None:
        super().__init__()
        self._facts = facts
        self._metrics = metrics
        self._pages: dict[bytes, Callable[[server.Request], bytes]] = {
            b"/healthz": self._healthz, b"/readyz": self._readyz, b"/metrics": self._metrics_page}

    def render_GET(self, request: server.Request) -> bytes:
        page = self._pages.get(request.path)
        if page is None:
            return _json(request, 404, {"error": "not found: the node answers /healthz, /readyz and /metrics"})
        return page(request)

    def render_HEAD(self, request: server.Request) -> bytes:
        return self.render_GET(request)

    def render(self, request: server.Request) -> bytes:
        if request.method in (b"GET", b"HEAD"):
            return super().render(request)
        request.setHeader(b"allow", b"GET, HEAD")
        return _json(request, 405, {"error": "only GET and HEAD"})

    def _healthz(self, request: server.Request) -> bytes:
        return _json(request, 200, {"status": "ok"})

    def _readyz(self, request: server.Request) -> bytes:
        answer = readiness(self._facts())
        return _json(request, 200 if answer.ready else 503, answer)

    def _metrics_page(self, request: server.Request) -> bytes:
        request.setHeader(b"content-type", CONTENT_TYPE.encode())
        return self._metrics().encode()


def _json(request: server.Request, status: int, body: object) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", JSON)
    request.setHeader(b"cache-control", b"no-store")
    return msgspec.json.encode(body) + b"\n"


def site(facts: Callable[[], HealthFacts], metrics: Callable[[], str]) -> server.Site:
    endpoint = server.Site(HealthResource(facts, metrics))
    endpoint.displayTracebacks = False  # an error is the node's to log, not the caller's to read
    endpoint.noisy = False
    return endpoint
