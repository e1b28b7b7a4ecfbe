"""The process-wide sources the API, the pages and the live worker read: one Redis
connection pool, the view of the mesh, one management client, as settings say.

Web processes read the frame the live worker shares (console.mesh.shared); when
there is none, or it is stale (no worker running), they compute one themselves
from the snapshot stream, in a thread of their own."""

from __future__ import annotations

import threading
import time
from functools import cache

import redis
from django.conf import settings

from console.mesh import shared
from console.mesh.actions import Management
from console.mesh.snapshots import latest
from console.mesh.view import MeshView
from management.client import TlsFiles
from model.mesh import Snapshot
from model.names import DEFAULT_VHOST
from model.rollups import queue_key

VIEW_REFRESH = 0.5  # seconds between a web process's looks at the snapshot stream (no worker)
SHARED_CHECK = 0.25  # seconds between looks at the worker's frame version
SHARED_STALE = 10.0  # seconds after which a shared frame is the worker's last word, not the mesh's


@cache
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.MESHGATE["REDIS_URL"], socket_timeout=5.0, socket_connect_timeout=2.0)


def stream(kind: str) -> str:
    return f"{settings.MESHGATE['STREAM_PREFIX']}:{kind}"


@cache
def _view() -> MeshView:
    return MeshView(redis_client, settings.MESHGATE["STREAM_PREFIX"])


class MeshReader:
    """The current frame, whichever way it was made, and what the API asks of it."""

    def __init__(self) -> None:
        self._shared: shared.SharedFrame | None = None
        self._checked = 0.0
        self._lock = threading.Lock()

    @property
    def frame(self):
        now = time.monotonic()
        if now - self._checked >= SHARED_CHECK:
            with self._lock:
                if now - self._checked >= SHARED_CHECK:
                    self._shared = shared.read(redis_client(), settings.MESHGATE["STREAM_PREFIX"], self._shared)
                    self._checked = now
        frame = self._shared
        if frame is not None and time.time() - frame.taken_at < SHARED_STALE:
            return frame
        view = _view()
        view.start(VIEW_REFRESH)
        return view.frame

    def nodes(self):
        return self.frame.nodes

    def links(self):
        return self.frame.links

    def queues(self):
        return self.frame.queues

    def overview(self):
        return self.frame.overview

    def names(self) -> dict[str, str]:
        return self.frame.names

    def queue(self, name: str, vhost: str = DEFAULT_VHOST):
        frame = self.frame
        row = frame.queue_index.get(queue_key(name, vhost))
        return frame.detail(row) if row is not None else None

    def snapshots(self, node_ids: set[str]) -> dict[str, Snapshot]:
        """The nodes' latest snapshots: from the frame when it holds them, else the stream."""
        frame = self.frame
        held = getattr(frame, "snapshots", None)
        if held is not None:
            return {node_id: held[node_id].latest for node_id in node_ids if node_id in held}
        return latest(redis_client(), stream("snapshots"), node_ids)


@cache
def _reader() -> MeshReader:
    return MeshReader()


def mesh_view(fresh: bool = False):
    """The view of the mesh for requests (the worker's shared frame, or this process's
    own); ``fresh`` reads the stream here and now (the worker itself, tests)."""
    if fresh:
        view = _view()
        view.refresh()
        return view
    return _reader()


@cache
def management() -> Management:
    config = settings.MESHGATE
    tls = TlsFiles(config.get("CA"), config.get("CERT"), config.get("KEY"), config.get("VERIFY_HOSTNAME", True))
    return Management(config["STOMP"], config["LOGIN"], config["PASSCODE"], tls=tls)
