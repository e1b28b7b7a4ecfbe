"""``meshgate local-mesh``: Meshgate on one machine, on embedded defaults — a few
nodes that find each other by multicast on 127.0.0.1 (each a ``meshgate broker``
process of its own), a redis-server for their metrics, and the web console with
its live worker. For trying the mesh out; Ctrl-C stops everything."""

from __future__ import annotations

import importlib.util
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from meshgate.redis_server import RedisServer, free_port

CONSOLE_PORT = 8161  # ActiveMQ's web console port, where its users look first


class _Processes:
    """What the local mesh started, stopped in the reverse order."""

    def __init__(self) -> None:
        self.running: list[tuple[str, subprocess.Popen]] = []
        self.stopping = False

    def start(self, name: str, command: list[str], env: dict | None = None, quiet: bool = False) -> None:
        if self.stopping:
            return
        output = subprocess.DEVNULL if quiet else None
        self.running.append((name, subprocess.Popen(command, env=env, stdout=output)))

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
                if time.monotonic() - started < grace or not name.startswith("node"):
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
        console: bool = True) -> int:
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
    for i, port in enumerate(stomp_ports):
        name = f"node{i + 1}"
        config = data / f"{name}.toml"
        metrics = f'\n[metrics]\nredis_url = "{redis_url}"\n' if redis_url else ""
        config.write_text(
            f'name = "{name}"\ndata_dir = "{data / name}"\n\n[stomp]\nbind = "127.0.0.1:{port}"\n\n'
            f'[mesh]\nbind = "127.0.0.1:{port + 3}"\ncluster_password = "{password}"\n\n'
            f'[mesh.discovery]\ngroup = "{group}"\ninterface = "127.0.0.1"\n' + metrics
        )
        processes.start(name, [sys.executable, "-m", "meshgate", "broker", "--config", str(config),
                               "--log-level", "WARNING"], quiet=True)
    print(f"meshgate local mesh: {nodes} nodes finding each other on {group} (127.0.0.1), data under {data}",
          flush=True)
    for i, port in enumerate(stomp_ports):
        print(f"  node{i + 1}: stomp://127.0.0.1:{port}  (mesh link 127.0.0.1:{port + 3})", flush=True)
    if redis_url:
        print(f"  metrics: every node writes to {redis_url} (streams meshgate:snapshots, meshgate:events)",
              flush=True)
    else:
        print("  metrics: off (no redis-server installed; give --redis URL to use one)", flush=True)
    if console and redis_url and not processes.stopping:
        _start_console(processes, data / "console", redis_url, stomp_ports, console_port)
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
