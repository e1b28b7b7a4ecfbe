"""Redis killed under a running ``meshgate pipeline``: the job notices, retries
from its checkpoint once Redis is back, and the rollups come out exact — nothing
applied twice, nothing lost (Redis itself is append-only, fsync always)."""

from __future__ import annotations

import time

import msgspec
import redis
from rollup_support import assert_rollups_agree
from test_pipeline_rollups import drive
from traffic import started_mesh

from meshgate.redis_server import RedisServer
from model.rollups import PipelineStatus, status_key


def applied_entries(url: str) -> int:
    """What the pipeline's status says it applied (0 while Redis is away or before a batch)."""
    try:
        with redis.Redis.from_url(url, socket_timeout=2) as connection:
            raw = connection.get(status_key("meshgate"))
    except redis.RedisError:
        return 0
    return msgspec.json.decode(raw, type=PipelineStatus).entries if raw else 0


def await_condition(condition, what: str, process, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.process.poll() is None, f"the pipeline exited: {process.log()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {process.log()}"
        time.sleep(0.2)


def test_redis_restarting_mid_job_loses_nothing_and_counts_nothing_twice(
        client, redis_server, tmp_path, pipeline_process):
    mesh, base = started_mesh(client, 300, seed=5)
    written = drive(mesh, base, 40)
    job = pipeline_process(redis_server.url, "--trigger", "0.5", "--max-entries", "40",
                           "--checkpoint", str(tmp_path / "checkpoint"), "--log-level", "info")
    await_condition(lambda: applied_entries(redis_server.url) > 0, "a first batch", job)
    assert applied_entries(redis_server.url) < written, "the job applied everything before Redis was killed"

    redis_server.kill()
    await_condition(lambda: "restarting from its checkpoint" in job.log(), "the job to notice Redis gone", job)
    revived = RedisServer(redis_server.directory, port=redis_server.port, persistent=True).start()
    try:
        fresh = redis.Redis.from_url(revived.url)
        mesh.client = fresh
        await_condition(lambda: applied_entries(revived.url) == written, "the backlog applied", job)
        written += drive(mesh, base + 40, 20)
        await_condition(lambda: applied_entries(revived.url) == written, "the new traffic applied", job)
        assert_rollups_agree(fresh, mesh.expected)
        fresh.close()
    finally:
        revived.stop()
