"""Fixtures shared by every test directory."""

from __future__ import annotations

import pytest


@pytest.fixture
def redis_servers(tmp_path):
    """``redis_servers(port=None, persistent=False)``: a redis-server of the test's own on a
    loopback port (``.url``, ``.kill()``, ``.start()`` again on the same port); every one
    started is stopped at teardown."""
    from meshgate.redis_server import RedisServer

    started: list[RedisServer] = []

    def start(port: int | None = None, persistent: bool = False) -> RedisServer:
        server = RedisServer(tmp_path / "redis", port=port, persistent=persistent)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def redis_server(redis_servers):
    """One redis-server of the test's own (see ``redis_servers``)."""
    return redis_servers()
