"""Fixtures for the console's tests: a real redis-server, a real 3-node mesh writing
its snapshots there, and the console's Django settings pointed at both.

The mesh and Redis live for a whole module (starting them costs seconds); tests use
queue names of their own. Every node has an AMQP listener too (its port:
``amqp_support.amqp_port(node.proc)``). Clients sign in as a viewer or an admin with
API tokens."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parent.parent / "e2e"
sys.path.insert(0, str(E2E))

from amqp_support import AMQP_ON  # noqa: E402
from mesh_support import MeshFactory, send_many  # noqa: E402

SNAPSHOT_INTERVAL_MS = 200


class Mesh:
    """A running 3-node mesh (A, B, C), each with an AMQP listener too, and the Redis its
    snapshots go to."""

    def __init__(self, factory: MeshFactory, redis_server) -> None:
        self.factory = factory
        self.redis = redis_server
        self.nodes = factory(3, sets=[f"metrics.redis_url={redis_server.url}",
                                      f"metrics.interval_ms={SNAPSHOT_INTERVAL_MS}", AMQP_ON,
                                      "journeys.enabled=true"])
        self.a, self.b, self.c = self.nodes

    def client(self, node):
        return node.client()

    def send(self, node, queue: str, bodies: list[str]) -> None:
        """``bodies`` sent to ``/queue/<queue>`` on ``node`` (receipted), by a client closed after."""
        sender = node.client()
        try:
            send_many(sender, f"/queue/{queue}", bodies)
        finally:
            sender.disconnect()

    def wait(self, predicate, what: str, timeout: float = 15.0):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.factory.describe()}")
            time.sleep(0.05)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    from django.conf import settings

    from console.mesh import sources
    from meshgate.redis_server import RedisServer

    workdir = tmp_path_factory.mktemp("console-mesh")
    redis_server = RedisServer(workdir / "redis").start()
    factory = MeshFactory(workdir)
    saved = dict(settings.MESHGATE)
    try:
        running = Mesh(factory, redis_server)
        settings.MESHGATE.update(REDIS_URL=redis_server.url,
                                 STOMP=[f"127.0.0.1:{node.stomp}" for node in running.nodes])
        settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [redis_server.url]
        _forget_sources(sources)
        from console.mesh.sources import mesh_view

        def whole(view) -> bool:
            frame = view.frame
            nodes_up = sum(node.state == "up" for node in frame.nodes)
            return nodes_up == 3 and sum(link.state == "up" for link in frame.links) == 3

        running.wait(lambda: whole(mesh_view(fresh=True)), "every node and link in the console's view")
        yield running
    finally:
        factory.cleanup()
        redis_server.stop()
        settings.MESHGATE.clear()
        settings.MESHGATE.update(saved)
        _forget_sources(sources)


@pytest.fixture(scope="module")
def redis_only(tmp_path_factory):
    """A real redis-server and the console pointed at it, without a mesh: for what reads
    Redis alone (the pipeline's rollups and status). Yields the server (``.url``)."""
    from django.conf import settings

    from console.mesh import sources
    from meshgate.redis_server import RedisServer

    redis_server = RedisServer(tmp_path_factory.mktemp("console-redis") / "redis").start()
    saved = dict(settings.MESHGATE)
    try:
        settings.MESHGATE.update(REDIS_URL=redis_server.url)
        _forget_sources(sources)
        yield redis_server
    finally:
        redis_server.stop()
        settings.MESHGATE.clear()
        settings.MESHGATE.update(saved)
        _forget_sources(sources)


def _forget_sources(sources) -> None:
    if sources._view.cache_info().currsize:
        sources._view().stop()
    for cached in (sources.redis_client, sources._view, sources.management):
        cached.cache_clear()
    try:
        from channels.layers import channel_layers

        channel_layers.backends.clear()
    except ImportError:
        pass


@pytest.fixture
def users(db):
    from django.contrib.auth.models import Group, User
    from rest_framework.authtoken.models import Token

    viewer = User.objects.create_user("viewer", password="viewer-secret")
    admin = User.objects.create_user("operator", password="operator-secret")
    admin.groups.add(Group.objects.get_or_create(name="admins")[0])
    return {"viewer": (viewer, Token.objects.create(user=viewer).key),
            "admin": (admin, Token.objects.create(user=admin).key)}


def _client(token: str | None):
    from rest_framework.test import APIClient

    client = APIClient(HTTP_HOST="127.0.0.1")
    if token:
        client.credentials(HTTP_AUTHORIZATION="Token " + token)
    return client


@pytest.fixture
def anonymous():
    return _client(None)


@pytest.fixture
def viewer(users):
    return _client(users["viewer"][1])


@pytest.fixture
def admin(users):
    return _client(users["admin"][1])


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server on loopback (tests/console/postgres_support.py) for the
    whole run; ``postgres.database(name)`` gives a test a database and role of its own (a
    URL). Skipped only where PostgreSQL is not installed (scripts/test.sh installs it)."""
    from tests.console.postgres_support import PostgresServer, binaries

    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; scripts/test.sh does)")
    server = PostgresServer(bin_dir).start()
    try:
        yield server
    finally:
        server.stop()
