"""``meshgate local-mesh``: a few nodes on this machine, linked into one mesh,
each a ``meshgate broker`` process of its own — for trying the mesh out."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from meshgate.redis_server import RedisServer


def run(nodes: int, base_port: int, data: Path, redis_url: str | None = None) -> int:
    """``redis_url``: where nodes write their metrics; None starts a redis-server of
    our own (if one is installed), "none" turns metrics off."""
    data.mkdir(parents=True, exist_ok=True)
    redis = None
    if redis_url is None and RedisServer.available():
        redis = RedisServer(data / "redis").start()
        redis_url = redis.url
    elif redis_url == "none":
        redis_url = None
    password_file = data / "cluster-password"
    if not password_file.exists():
        password_file.write_text(secrets.token_urlsafe(24))
        password_file.chmod(0o600)
    password = password_file.read_text().strip()
    stomp_ports = [base_port + 10 * i for i in range(nodes)]
    link_ports = [port + 3 for port in stomp_ports]  # 61613 -> 61616, as ActiveMQ users expect
    processes = []
    for i in range(nodes):
        name = f"node{i + 1}"
        config = data / f"{name}.toml"
        peers = ", ".join(f'"127.0.0.1:{port}"' for j, port in enumerate(link_ports) if j != i)
        metrics = f'\n[metrics]\nredis_url = "{redis_url}"\n' if redis_url else ""
        config.write_text(
            f'name = "{name}"\ndata_dir = "{data / name}"\n\n[stomp]\nbind = "127.0.0.1:{stomp_ports[i]}"\n\n'
            f'[mesh]\nbind = "127.0.0.1:{link_ports[i]}"\nstatic = [{peers}]\ncluster_password = "{password}"\n'
            + metrics
        )
        processes.append(subprocess.Popen([sys.executable, "-m", "meshgate", "broker", "--config", str(config)]))
    print(f"meshgate local mesh: {nodes} nodes, data under {data}", flush=True)
    for i, port in enumerate(stomp_ports):
        print(f"  node{i + 1}: stomp://127.0.0.1:{port}  (mesh link 127.0.0.1:{link_ports[i]})", flush=True)
    if redis_url:
        print(f"  metrics: every node writes to {redis_url} (streams meshgate:snapshots, meshgate:events)",
              flush=True)
    else:
        print("  metrics: off (no redis-server installed; give --redis URL to use one)", flush=True)
    print(f"  see it: meshgate nodes --stomp 127.0.0.1:{stomp_ports[0]}; Ctrl-C stops every node", flush=True)

    def stop(signum: int, frame: object) -> None:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    status = 0
    while processes:
        for process in list(processes):
            code = process.poll()
            if code is not None:
                processes.remove(process)
                status = status or code
                if code != 0:
                    stop(signal.SIGTERM, None)  # one node failed to start or crashed: stop the rest
        time.sleep(0.2)
    if redis is not None:
        redis.stop()
    return status


def default_data() -> Path:
    return Path(os.environ.get("MESHGATE_DATA", "data")) / "local-mesh"
