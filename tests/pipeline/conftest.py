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
            item.add_marker(pytest.mark.timeout(300))  # a JVM per pipeline process; slow on a busy machine


@pytest.fixture
def redis_server(redis_servers):
    """A persistent one: the pipeline's tests restart Redis and expect its streams back."""
    return redis_servers(persistent=True)


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


class PipelineProcess:
    """``meshgate pipeline`` as a process of its own, its output in a log file."""

    def __init__(self, tmp_path: Path, redis_url: str, *args: str, env: dict | None = None) -> None:
        import os
        import subprocess

        self.log_path = tmp_path / f"pipeline-{len(list(tmp_path.glob('pipeline-*.log')))}.log"
        environment = {**os.environ, **(env or {})}
        command = [sys.executable, "-m", "meshgate.cli", "pipeline", "--redis", redis_url, *args]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                            cwd=tmp_path)

    def wait(self, timeout: float = 120) -> int:
        return self.process.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except Exception:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def pipeline_process(tmp_path):
    """``pipeline_process(redis_url, *args, env=None)`` starts ``meshgate pipeline``;
    every one started is stopped at teardown."""
    started: list[PipelineProcess] = []

    def start(redis_url: str, *args: str, env: dict | None = None) -> PipelineProcess:
        process = PipelineProcess(tmp_path, redis_url, *args, env=env)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
