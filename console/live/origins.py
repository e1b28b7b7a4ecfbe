"""Who may open the live WebSocket: a page of the console's own origin — the scheme,
host and port it is served on — or of an origin in ``CONSOLE_ALLOWED_ORIGINS``.

Browsers send the session cookie (SameSite=Lax) to every port of the console's host and
over either scheme, and a WebSocket is not bound by the same-origin policy: Channels'
AllowedHostsOriginValidator, which compares the host alone, let a page on another port
of the same machine read the mesh with a signed-in user's session. A connection without
exactly one Origin (or Host) header is refused too: every browser sends one."""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an origin such as ``https://console.example:8443``, else None."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port out of range or not a number
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username is not None \
            or parts.path or parts.query or parts.fragment:
        return None
    return parts.scheme, parts.hostname, port or _DEFAULT_PORTS[parts.scheme]


def _header(scope, name: bytes) -> str | None:
    values = [value for key, value in scope.get("headers", ()) if key == name]
    return values[0].decode("latin-1") if len(values) == 1 else None


def _scheme(scope) -> str:
    """The scheme pages are served on, as Django tells it for HTTP requests: the proxy's
    header where ``SECURE_PROXY_SSL_HEADER`` says to trust it, else the socket's own."""
    if settings.SECURE_PROXY_SSL_HEADER:
        meta_name, secure = settings.SECURE_PROXY_SSL_HEADER
        forwarded = _header(scope, meta_name.removeprefix("HTTP_").replace("_", "-").lower().encode())
        if forwarded is not None:
            return "https" if forwarded.split(",", 1)[0].strip() == secure else "http"
    return "https" if scope.get("scheme") in ("wss", "https") else "http"


def _own_origin(scope) -> tuple[str, str, int] | None:
    """The console's origin as this connection reached it, if its Host is an allowed one."""
    host = _header(scope, b"host")
    if host is None:
        return None
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    return _origin(f"{_scheme(scope)}://{host}")


def origin_allowed(scope) -> bool:
    origin = _origin(_header(scope, b"origin") or "")
    if origin is None:
        return False
    return origin == _own_origin(scope) or origin in {_origin(url) for url in settings.CONSOLE_ALLOWED_ORIGINS}


class SameOriginOnly:
    """ASGI middleware: refuses a WebSocket handshake (HTTP 403) from any other origin."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
