"""ASGI entry point (daphne console.asgi:application): pages and the API over
HTTP, live updates over a WebSocket."""

import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
# The console's own scripts and the vendored libraries come from the same process:
# a few small files, no web server to configure.
django_application = ASGIStaticFilesHandler(get_asgi_application())  # before anything imports models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from console.live.origins import SameOriginOnly  # noqa: E402
from console.live.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter({
    "http": django_application,
    # The console's own origin only (scheme, host and port): see console/live/origins.py.
    "websocket": SameOriginOnly(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
})
