"""A Celery app per vhost (issue 25): two teams' apps with the same task name and the same
queue (Celery's default ``celery``), their broker URLs naming vhosts ``team-a`` and
``team-b`` of one node; each team's worker runs its own team's tasks and no other. Real
Celery worker processes, results in a Redis of the test's own, kombu underneath.

On a 2-node mesh each team's app sends on one node and its worker runs on the other
(team-a A to B, team-b B to A, and an app of the default vhost ``/`` A to B): the mesh
carries each vhost's tasks to that vhost's worker alone, though every queue is ``celery``."""

from __future__ import annotations

import textwrap
from pathlib import Path

from amqp_support import AMQP_ON, CeleryWorker, amqp_url
from celery import Celery
from e2e_support import unique
from mesh_support import mesh_fixture, wait_until  # noqa: F401  (the fixture)

TEAM_VHOSTS = '[vhosts]\n[[vhosts.host]]\nname = "team-a"\n[[vhosts.host]]\nname = "team-b"\n'
TASKS_PER_APP = 12

# Both teams run this same module: one task name, one queue; only the environment differs.
CELERY_APP = """
    import os
    from celery import Celery
    app = Celery("teamtasks", broker=os.environ["BROKER"], backend=os.environ["BACKEND"])
    app.conf.update(broker_connection_retry_on_startup=True, worker_prefetch_multiplier=1,
                    broker_heartbeat=0, result_expires=600)

    @app.task(name="teamtasks.record")
    def record(tag):
        with open(os.environ["RAN"], "a") as ran:  # what this worker ran, beside the result
            ran.write(tag + "\\n")
        return os.environ["TEAM"] + ":" + tag
"""


class Worker(CeleryWorker):
    """A team's worker: its name is the team's; each task it ran is a line of ``runs()``."""

    def __init__(self, workdir: Path, team: str, broker_url: str, backend: str) -> None:
        self.team = team
        super().__init__(workdir, "teamtasks", team, broker_url, backend, env={"TEAM": team})


def run_teams(tmp_path: Path, backend: str, teams: dict[str, tuple[str, str]]) -> None:
    """``teams``: team -> (the URL its app sends on, the URL its worker consumes on). Every
    team's worker is up before any task is sent, so all of them compete for the tasks if
    the vhosts do not keep them apart; then each team's tasks must come back from its own
    worker, which ran nothing else."""
    (tmp_path / "teamtasks.py").write_text(textwrap.dedent(CELERY_APP))
    workers = []
    apps = []
    try:
        for team, (_, worker_url) in teams.items():
            workers.append(Worker(tmp_path, team, worker_url, backend))
        for worker in workers:
            worker.wait_ready()
        sent: dict[str, list[str]] = {}
        results = {}
        for team, (send_url, _) in teams.items():
            app = Celery("teamtasks", broker=send_url, backend=backend)
            app.conf.update(broker_heartbeat=0)
            apps.append(app)
            sent[team] = [unique(team) for _ in range(TASKS_PER_APP)]
            results[team] = [app.send_task("teamtasks.record", args=[tag]) for tag in sent[team]]
        for team, pending in results.items():
            # Who ran each task: a task of another vhost's app would come back with that team's name.
            assert [r.get(timeout=60) for r in pending] == [f"{team}:{tag}" for tag in sent[team]]
        for worker in workers:
            assert sorted(worker.runs()) == sorted(sent[worker.team]), worker.output()[-3000:]
    finally:
        for app in apps:
            app.close()
        for worker in workers:
            worker.stop()


def test_a_celery_app_per_vhost_on_one_node_runs_each_teams_tasks_on_its_own_worker(
        broker_factory, redis_server, tmp_path):
    node = broker_factory(config=TEAM_VHOSTS, sets=[AMQP_ON])
    run_teams(tmp_path, redis_server.url, {
        "team-a": (amqp_url(node, "team-a"), amqp_url(node, "team-a")),
        "team-b": (amqp_url(node, "team-b"), amqp_url(node, "team-b")),
    })


def test_on_a_mesh_each_teams_tasks_cross_to_that_teams_worker_alone(mesh, redis_server, tmp_path):
    a, b = mesh(2, extra="\n" + TEAM_VHOSTS, sets=[AMQP_ON])
    run_teams(tmp_path, redis_server.url, {
        "team-a": (amqp_url(a.proc, "team-a"), amqp_url(b.proc, "team-a")),
        "team-b": (amqp_url(b.proc, "team-b"), amqp_url(a.proc, "team-b")),
        "default": (amqp_url(a.proc, "/"), amqp_url(b.proc, "/")),
    })
