"""The same job on a real Spark standalone cluster: a master and one worker on
loopback (the pyspark package's ``spark-class``), then ``meshgate pipeline
--master spark://…`` and ``spark-submit deploy/spark/meshgate_pipeline.py`` over
generated traffic. The rollups must equal what the traffic did, and the master
must have run the application (so a job that quietly ran on local Spark fails).

The executors' Python is a venv that has the third-party packages (pyarrow,
redis, msgspec) but not Meshgate, as on a worker machine: the code they import
is the zip the session ships (pipeline/spark.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest
from rollup_support import assert_rollups_agree, status
from test_pipeline_rollups import drive
from traffic import Mesh, started_mesh

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "deploy" / "spark" / "meshgate_pipeline.py"
APP = "meshgate-pipeline"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class Daemon:
    """A Spark daemon (``spark-class``) in a process group of its own, logging to a file."""

    def __init__(self, log_path: Path, *args: str, env: dict[str, str]) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=log,
                                            stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log_path.read_text(errors="replace"))
            if found:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in {self.log_path.name}:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """SIGTERM to the group (the daemon, and a worker's executors and their Python workers), then SIGKILL."""
        for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                continue
            try:  # the group may outlive its leader for a moment
                os.killpg(self.process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)


class Standalone:
    """A standalone master and one worker on 127.0.0.1, on ports the OS picks."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.work_dir = root / "work"
        self.work_dir.mkdir(parents=True)
        self.daemons: list[Daemon] = []
        self.url = self.web_url = ""

    def start(self) -> Standalone:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(spark_home()),
               "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}  # else it opens the fixed port 6066
        env.pop("SPARK_CONF_DIR", None)
        master = Daemon(self.root / "master.log", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", "0", "--webui-port", "0", env=env)
        self.daemons.append(master)
        self.url = master.wait_for(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")[1]
        self.web_url = "http://127.0.0.1:" + master.wait_for(r"MasterWebUI.*started at http://[\w.]+:(\d+)")[1]
        worker = Daemon(self.root / "worker.log", "org.apache.spark.deploy.worker.Worker", self.url, "--host",
                        "127.0.0.1", "--cores", "2", "--memory", "1g", "--webui-port", "0", "--work-dir",
                        str(self.work_dir), env=env)
        self.daemons.append(worker)
        deadline = time.monotonic() + 90
        while not [w for w in self.state().get("workers", []) if w["state"] == "ALIVE"]:
            if worker.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the worker did not register:\n{worker.log()}\n{master.log()}")
            time.sleep(0.3)
        return self

    def state(self) -> dict:
        """The master's JSON (its web UI's ``/json/``): workers, activeapps, completedapps."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            return json.load(response)

    def applications(self) -> dict[str, dict]:
        state = self.state()
        return {app["id"]: app for app in state.get("activeapps", []) + state.get("completedapps", [])}

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = Standalone(tmp_path_factory.mktemp("spark-standalone"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def worker_python(tmp_path_factory) -> str:
    """A Python for the executors with pyarrow, redis and msgspec (this venv's
    site-packages, added as a plain path, so its editable-install hook does not
    run) but not Meshgate's packages."""
    root = tmp_path_factory.mktemp("worker-venv")
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(root)],
                   check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    check = ("import importlib.util, pyarrow, redis, msgspec; "
             "print([p for p in ('pipeline', 'model', 'meshgate') if importlib.util.find_spec(p)])")
    found = subprocess.run([str(python), "-c", check], check=True, capture_output=True, text=True, cwd=root).stdout
    assert found.strip() == "[]", f"the executors' Python sees Meshgate already: {found}"
    return str(python)


def submit_env(tmp_path: Path, worker_python: str) -> dict[str, str]:
    """What a driver on this machine gets: loopback, the executors' Python, small executors."""
    conf = tmp_path / "spark-conf"
    conf.mkdir(exist_ok=True)
    (conf / "spark-defaults.conf").write_text("spark.executor.memory 512m\n")
    return {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_CONF_DIR": str(conf), "PYSPARK_PYTHON": worker_python,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def traffic(client) -> tuple[Mesh, int]:
    """90 s of three nodes' snapshots and events (the rollups test's traffic), ending a minute ago."""
    mesh, base = started_mesh(client, 180)
    return mesh, drive(mesh, base, 90)


def ran_on_the_cluster(standalone: Standalone, before: set[str]) -> dict:
    """The one application the master ran since ``before``: it finished, had
    cores and memory there, and one of its executors ran tasks (its log in the
    worker's work dir) with the shipped code."""
    new = {id_: app for id_, app in standalone.applications().items() if id_ not in before}
    assert len(new) == 1, f"expected one new application on the master, got {new}"
    (app,) = new.values()
    assert app["name"] == APP and app["state"] == "FINISHED", app
    assert app["cores"] >= 1 and app["memoryperexecutor"] == 512, app
    executors = [path for path in (standalone.work_dir / app["id"]).glob("*") if path.is_dir()]
    assert executors, f"no executor of {app['id']} in the worker's work dir"
    logs = "".join((path / "stderr").read_text(errors="replace") for path in executors if (path / "stderr").exists())
    assert re.search(r"Finished task \S+ in stage", logs), logs[-3000:]
    assert any((path / "meshgate-pipeline-code.zip").exists() for path in executors)
    return app


def check_rollups(client, mesh: Mesh, written: int, master: str) -> None:
    assert_rollups_agree(client, mesh.expected)
    applied = status(client)
    assert (applied.entries, applied.malformed, applied.late) == (written, 0, 0)
    assert applied.master == master


def finish(process: subprocess.Popen, log_path: Path, timeout: float = 150, group: bool = False) -> int:
    """Its exit status; a job still running after ``timeout`` (it retries a failing query) is killed."""
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        if group:  # spark-submit's JVM and the Python driver it started
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
        process.wait()
        log = log_path.read_text(errors="replace")[-4000:]
        raise AssertionError(f"still running after {timeout} s:\n{log}") from None


def test_meshgate_pipeline_with_a_spark_master_runs_on_the_cluster(standalone, worker_python, client, redis_server,
                                                                   tmp_path, pipeline_process):
    mesh, written = traffic(client)
    before = set(standalone.applications())
    job = pipeline_process(redis_server.url, "--master", standalone.url, "--once", "--checkpoint",
                           str(tmp_path / "checkpoint"), env=submit_env(tmp_path, worker_python))
    assert finish(job.process, job.log_path) == 0, job.log()
    assert f"on {standalone.url}" in job.log()
    check_rollups(client, mesh, written, standalone.url)
    ran_on_the_cluster(standalone, before)


def test_spark_submit_of_the_deploy_entry_runs_on_the_cluster(standalone, worker_python, client, redis_server,
                                                             tmp_path):
    mesh, written = traffic(client)
    before = set(standalone.applications())
    log_path = tmp_path / "spark-submit.log"
    command = [str(Path(sys.executable).parent / "spark-submit"), "--master", standalone.url, str(ENTRY),
               "--redis", redis_server.url, "--once", "--checkpoint", str(tmp_path / "checkpoint")]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                                   env={**os.environ, **submit_env(tmp_path, worker_python)}, start_new_session=True)
    assert finish(process, log_path, group=True) == 0, log_path.read_text(errors="replace")[-4000:]
    check_rollups(client, mesh, written, standalone.url)
    ran_on_the_cluster(standalone, before)
