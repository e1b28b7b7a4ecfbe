"""Celery on the mesh (issue 26): the producer's app sends on node A, the only worker
consumes on node B, so every task crosses the mesh; each runs exactly once and its
result comes back. A task that rejects its message with requeue the first time
(``Reject(requeue=True)``: kombu's basic.reject requeue=true) is delivered again by the
broker, marked redelivered, and succeeds; nothing else runs twice. Real Celery worker
processes, results in a Redis of the test's own, a real 2-node mesh."""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from amqp_support import AMQP_ON, CeleryWorker, amqp_url
from celery import Celery
from e2e_support import unique
from mesh_support import mesh_fixture  # noqa: F401  (the fixture)

TASKS = 20
RESULT_TIMEOUT = 30  # each result normally comes back in well under a second

# Every task notes what it ran in the worker's RAN file (a line each): executions, counted
# beside the results.
CELERY_APP = """
    import os
    from pathlib import Path
    from celery import Celery
    from celery.exceptions import Reject
    app = Celery("meshcelery", broker=os.environ["BROKER"], backend=os.environ["BACKEND"])
    app.conf.update(broker_connection_retry_on_startup=True, worker_prefetch_multiplier=1,
                    broker_heartbeat=0, result_expires=600)

    def note(*words):
        with open(os.environ["RAN"], "a") as ran:
            ran.write(" ".join(words) + "\\n")

    @app.task(name="meshcelery.echo")
    def echo(tag):
        note("echo", tag)
        return tag

    @app.task(name="meshcelery.flaky", bind=True, acks_late=True)
    def flaky(self, tag):
        # The first delivery of a tag leaves a mark and rejects its message with requeue (the
        # worker's basic.reject requeue=true): only the broker delivering it again finishes it.
        redelivered = self.request.delivery_info["redelivered"]
        note("flaky", tag, self.request.id, "redelivered" if redelivered else "first")
        mark = Path(os.environ["MARKS"]) / tag
        if not mark.exists():
            mark.touch()
            raise Reject("first delivery of " + tag, requeue=True)
        return "done:" + tag
"""


@contextmanager
def worker_on_b_producer_on_a(mesh, backend: str, tmp_path: Path) -> Iterator[tuple[CeleryWorker, Celery]]:
    """A 2-node mesh; the app's one worker consuming on B (ready), a producer app sending on A."""
    a, b = mesh(2, sets=[AMQP_ON])
    (tmp_path / "meshcelery.py").write_text(textwrap.dedent(CELERY_APP))
    marks = tmp_path / "marks"
    marks.mkdir()
    worker = CeleryWorker(tmp_path, "meshcelery", "on-b", amqp_url(b.proc), backend, env={"MARKS": str(marks)})
    producer = Celery("meshcelery", broker=amqp_url(a.proc), backend=backend)
    producer.conf.update(broker_heartbeat=0)
    try:
        worker.wait_ready()
        yield worker, producer
    finally:
        producer.close()
        worker.stop()


def send_echoes(producer: Celery, count: int) -> dict[str, object]:
    """``count`` echo tasks with unique tags: tag -> its AsyncResult."""
    return {tag: producer.send_task("meshcelery.echo", args=[tag]) for tag in (unique("t") for _ in range(count))}


def fence(producer: Celery) -> str:
    """One more task, its result awaited: what ran twice before it is in the RAN file."""
    [(tag, result)] = send_echoes(producer, 1).items()
    assert result.get(timeout=RESULT_TIMEOUT) == tag
    return tag


def test_tasks_sent_on_one_node_run_once_each_on_a_worker_on_the_other(mesh, redis_server, tmp_path):
    with worker_on_b_producer_on_a(mesh, redis_server.url, tmp_path) as (worker, producer):
        sent = send_echoes(producer, TASKS)
        assert {tag: result.get(timeout=RESULT_TIMEOUT) for tag, result in sent.items()} == {tag: tag for tag in sent}
        last = fence(producer)
        runs = Counter(worker.runs())
        assert runs == Counter(f"echo {tag}" for tag in [*sent, last]), worker.output()[-3000:]


def test_a_task_rejected_with_requeue_is_delivered_again_redelivered_and_succeeds(mesh, redis_server, tmp_path):
    with worker_on_b_producer_on_a(mesh, redis_server.url, tmp_path) as (worker, producer):
        tag = unique("requeued")
        flaky = producer.send_task("meshcelery.flaky", args=[tag])
        others = send_echoes(producer, 5)
        # Lost on reject (or rejected without requeue) the task would never succeed: no result.
        assert flaky.get(timeout=RESULT_TIMEOUT) == "done:" + tag, worker.output()[-3000:]
        assert {t: result.get(timeout=RESULT_TIMEOUT) for t, result in others.items()} == {t: t for t in others}
        last = fence(producer)
        runs = worker.runs()
        # The same task (one id) twice: first as delivered, then as the broker delivered it again.
        assert [run for run in runs if run.startswith("flaky ")] == [
            f"flaky {tag} {flaky.id} first", f"flaky {tag} {flaky.id} redelivered"], worker.output()[-3000:]
        assert Counter(run for run in runs if run.startswith("echo ")) == Counter(
            f"echo {t}" for t in [*others, last]), worker.output()[-3000:]
