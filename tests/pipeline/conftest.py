"""Fixtures for the pipeline suite: a redis-server per test, one local Spark
session for the module's in-process queries, and runners for the job as a
``meshgate pipeline`` process. Every test here runs real Spark: marked slow."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def redis_server(tmp_path):
    from meshgate.redis_server import RedisServer

    server = RedisServer(tmp_path / "redis", persistent=True).start()
    yield server
    server.stop()


@pytest.fixture
def client(redis_server):
    import redis

    connection = redis.Redis.from_url(redis_server.url)
    yield connection
    connection.close()


@pytest.fixture(scope="session")
def spark():
    from pipeline.spark import session

    spark = session("local[2]", app="meshgate-tests")
    yield spark
    spark.stop()
