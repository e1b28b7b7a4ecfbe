"""The process-wide sources the API, the pages and the live worker read: one Redis
connection pool, one view of the mesh, one management client, as settings say."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings

from console.mesh.actions import Management
from console.mesh.view import MeshView

VIEW_REFRESH = 0.5  # seconds between the web process's looks at the snapshot stream


@cache
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.MESHGATE["REDIS_URL"], socket_timeout=5.0, socket_connect_timeout=2.0)


@cache
def _view() -> MeshView:
    return MeshView(redis_client, settings.MESHGATE["STREAM_PREFIX"])


def mesh_view(fresh: bool = False) -> MeshView:
    """The view of the mesh, kept fresh by a thread of this process (at most
    ``VIEW_REFRESH`` seconds old); ``fresh`` reads the stream now (the worker, tests)."""
    view = _view()
    if fresh:
        view.refresh()
    else:
        view.start(VIEW_REFRESH)
    return view


@cache
def management() -> Management:
    config = settings.MESHGATE
    return Management(config["STOMP"], config["LOGIN"], config["PASSCODE"])


def stream(kind: str) -> str:
    return f"{settings.MESHGATE['STREAM_PREFIX']}:{kind}"
