"""``meshgate local-mesh``: Meshgate on one machine, on embedded defaults — a few
nodes that find each other by multicast on 127.0.0.1 (each a ``meshgate broker``
process of its own), a redis-server for their metrics, the web console with its
live worker, and the metrics pipeline on local Spark. For trying the mesh out;
Ctrl-C stops everything."""

from __future__ import annotations

import importlib.util
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from meshgate.redis_server import RedisServer, free_port

CONSOLE_PORT = 8161  # ActiveMQ's web console port, where its users look first


class _Processes:
    """What the local mesh started, stopped in the reverse order."""

    def __init__(self) -> None:
        self.running: list[tuple[str, subprocess.Popen]] = []
        self.optional: set[str] = set()  # their exit is reported; the rest carries on
        self.stopping = False

    def start(self, name: str, command: list[str], env: dict | None = None, quiet: bool = False,
              log: Path | None = None, optional: bool = False) -> None:
        if self.stopping:
            return
        if optional:
            self.optional.add(name)
        # A session of its own: a Ctrl-C reaches only the local mesh, which stops each
        # process once (two signals made a node stop its reactor twice).
        if log is not None:
            with open(log, "ab") as output:
                process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT,
                                           start_new_session=True)
        else:
            process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL if quiet else None,
                                       start_new_session=True)
        self.running.append((name, process))

    def stop(self) -> None:
        for _, process in reversed(self.running):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    def wait(self, started: float, grace: float = 10.0) -> int:
        """Until every process has ended. One failing as things start (a port taken, a
        bad config) stops the rest; a node that dies later (killed to see what the mesh
        does) is reported, and the others carry on."""
        status = 0
        reported: set[str] = set()
        while any(process.poll() is None for _, process in self.running):
            for name, process in self.running:
                code = process.poll()
                if code in (None, 0) or self.stopping or name in reported:
                    continue
                reported.add(name)
                if name in self.optional:
                    print(f"meshgate local mesh: {name} exited with status {code}; the others carry on", flush=True)
                elif time.monotonic() - started < grace or not name.startswith("node"):
                    print(f"meshgate local mesh: {name} exited with status {code}; stopping everything", flush=True)
                    status = code
                    self.stop()
                else:
                    print(f"meshgate local mesh: {name} exited with status {code}; the others carry on", flush=True)
            time.sleep(0.2)
        return status


def _secret(path: Path, make) -> str:
    if not path.exists():
        path.write_text(make())
        path.chmod(0o600)
    return path.read_text().strip()


def run(nodes: int, base_port: int, data: Path, redis_url: str | None = None, console_port: int | None = None,
        console: bool = True, pipeline: bool = True) -> int:
    """``redis_url``: where nodes write their metrics; None starts a redis-server of
    our own (if one is installed), "none" turns metrics off (and the console)."""
    data.mkdir(parents=True, exist_ok=True)
    processes = _Processes()
    started = time.monotonic()

    def stop(signum: int, frame: object) -> None:
        processes.stopping = True
        processes.stop()

    # From the start: a Ctrl-C while things start stops what has started.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    redis = None
    if redis_url is None and RedisServer.available():
        redis = RedisServer(data / "redis").start()
        redis_url = redis.url
    elif redis_url == "none":
        redis_url = None
    password = _secret(data / "cluster-password", lambda: secrets.token_urlsafe(24))
    # Each local mesh has a group of its own, so two on one machine never meet.
    group = _secret(data / "discovery-group",
                    lambda: f"udp://239.255.{random.randint(0, 255)}.{random.randint(1, 254)}:"
                            f"{random.randint(40000, 60000)}")
    stomp_ports = [base_port + 10 * i for i in range(nodes)]
    # AMQP on RabbitMQ's 5672 (5682, …) with the default ports, else beside each node's STOMP port.
    amqp_ports = [(5672 if base_port == 61613 else base_port + 2) + 10 * i for i in range(nodes)]
    for i, port in enumerate(stomp_ports):
        name = f"node{i + 1}"
        config = data / f"{name}.toml"
        metrics = f'\n[metrics]\nredis_url = "{redis_url}"\n' if redis_url else ""
        config.write_text(
            f'name = "{name}"\ndata_dir = "{data / name}"\n\n[stomp]\nbind = "127.0.0.1:{port}"\n\n'
            f'[stomp.websocket]\nbind = "127.0.0.1:{port + 1}"\n\n'
            f'[amqp]\nbind = "127.0.0.1:{amqp_ports[i]}"\n\n'
            f'[mesh]\nbind = "127.0.0.1:{port + 3}"\ncluster_password = "{password}"\n\n'
            f'[mesh.discovery]\ngroup = "{group}"\ninterface = "127.0.0.1"\n' + metrics
        )
        processes.start(name, [sys.executable, "-m", "meshgate", "broker", "--config", str(config),
                               "--log-level", "WARNING"], quiet=True)
    print(f"meshgate local mesh: {nodes} nodes finding each other on {group} (127.0.0.1), data under {data}",
          flush=True)
    for i, port in enumerate(stomp_ports):
        print(f"  node{i + 1}: stomp://127.0.0.1:{port}, ws://127.0.0.1:{port + 1}/ws, "
              f"amqp://127.0.0.1:{amqp_ports[i]}  (mesh link 127.0.0.1:{port + 3})", flush=True)
    print("  access: anonymous, any client may connect (the local default, on 127.0.0.1 only); to require "
          "logins add [security.users] to the nodes' configs: docs/configuration.md", flush=True)
    if redis_url:
        print(f"  metrics: every node writes to {redis_url} (streams meshgate:snapshots, meshgate:events)",
              flush=True)
    else:
        print("  metrics: off (no redis-server installed; give --redis URL to use one)", flush=True)
    if console and redis_url and not processes.stopping:
        _start_console(processes, data / "console", redis_url, stomp_ports, console_port)
    if pipeline and redis_url and not processes.stopping:
        _start_pipeline(processes, data / "pipeline", redis_url)
    print(f"  command line: meshgate nodes --stomp 127.0.0.1:{stomp_ports[0]}; Ctrl-C stops everything", flush=True)
    status = processes.wait(started)
    if redis is not None:
        redis.stop()
    return status


def _start_console(processes: _Processes, data: Path, redis_url: str, stomp_ports: list[int],
                   port: int | None) -> None:
    if importlib.util.find_spec("daphne") is None or importlib.util.find_spec("django") is None:
        print("  console: not installed (pip install 'meshgate[console]')", flush=True)
        return
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="console.settings", MESHGATE_CONSOLE_DATA=str(data),
               MESHGATE_REDIS_URL=redis_url, MESHGATE_CONSOLE_STOMP=",".join(f"127.0.0.1:{p}" for p in stomp_ports))
    django = [sys.executable, "-m", "django"]
    subprocess.run([*django, "migrate", "--verbosity", "0"], env=env, check=True)
    sign_in = subprocess.run([*django, "ensureadmin"], env=env, check=True, capture_output=True, text=True)
    port = port or (CONSOLE_PORT if _port_free(CONSOLE_PORT) else free_port())
    processes.start("console", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                "console.asgi:application"], env=env, quiet=True)
    processes.start("console worker", [*django, "meshwatch"], env=env, quiet=True)
    print(f"  console: http://127.0.0.1:{port}/ — {sign_in.stdout.strip()}", flush=True)


def _start_pipeline(processes: _Processes, data: Path, redis_url: str) -> None:
    if importlib.util.find_spec("pyspark") is None:
        print("  pipeline: not installed (pip install 'meshgate[pipeline]')", flush=True)
        return
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("  pipeline: no Java runtime for Spark (Debian: apt-get install default-jre-headless)", flush=True)
        return
    data.mkdir(parents=True, exist_ok=True)
    log = data / "pipeline.log"
    processes.start("pipeline", [sys.executable, "-m", "meshgate", "pipeline", "--redis", redis_url,
                                 "--checkpoint", str(data / "checkpoint"), "--log-level", "WARNING"],
                    log=log, optional=True)
    print(f"  pipeline: starting on local Spark (local[2]); the console's charts switch to its rollups once "
          f"its first batch lands, in ~20 s. Log: {log}", flush=True)
    threading.Thread(target=_announce_pipeline, args=(redis_url, processes), daemon=True).start()


def _announce_pipeline(redis_url: str, processes: _Processes, timeout: float = 180.0) -> None:
    """Say when the pipeline's first micro-batch is applied (its status appears)."""
    import redis

    from model.rollups import status_key

    client = redis.Redis.from_url(redis_url, socket_timeout=2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not processes.stopping:
        try:
            if client.exists(status_key("meshgate")):
                print("meshgate local mesh: pipeline running (rollups in Redis; docs/pipeline.md)", flush=True)
                return
        except redis.RedisError:
            pass
        time.sleep(1.0)


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def default_data() -> Path:
    return Path(os.environ.get("MESHGATE_DATA", "data")) / "local-mesh"
