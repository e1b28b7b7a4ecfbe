"""``meshgate local-mesh``: Meshgate on one machine, on embedded defaults — a few
nodes that find each other by multicast on 127.0.0.1 (each a ``meshgate broker``
process of its own), a redis-server for their metrics, the web console with its
live worker, and the metrics pipeline on local Spark. For trying the mesh out;
Ctrl-C stops everything. With ``--tls`` the mesh links, a TLS client port per
protocol and the console's management requests use certificates of a throw-away CA
made under the data dir (meshgate/throwaway_ca.py)."""

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

from meshgate import throwaway_ca
from meshgate.redis_server import RedisServer, free_port

CONSOLE_PORT = 8161  # ActiveMQ's web console port, where its users look first
# Beside a node's STOMP port (base+10*i): +1 WebSocket, +2 AMQP, +3 mesh link, and with
# --tls +4 STOMP over TLS, +5 AMQPS (ActiveMQ's 61614 is taken by the WebSocket port).
STOMP_TLS_OFFSET = 4
AMQPS_OFFSET = 5


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
        console: bool = True, pipeline: bool = True, tls: bool = False) -> int:
    """``redis_url``: where nodes write their metrics; None starts a redis-server of
    our own (if one is installed), "none" turns metrics off (and the console)."""
    data.mkdir(parents=True, exist_ok=True)
    pki = None
    if tls:
        try:
            pki = throwaway_ca.ensure(data / "tls", [f"node{i + 1}" for i in range(nodes)])
        except OSError as problem:
            print(f"meshgate local mesh: cannot write the throw-away certificates under {data / 'tls'}: "
                  f"{problem.strerror or problem}", file=sys.stderr)
            return 2
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
    # AMQPS likewise on RabbitMQ's 5671 (5681, …), else beside the STOMP port.
    amqps_ports = [(5671 if base_port == 61613 else base_port + AMQPS_OFFSET) + 10 * i for i in range(nodes)]
    for i, port in enumerate(stomp_ports):
        name = f"node{i + 1}"
        config = data / f"{name}.toml"
        metrics = f'\n[metrics]\nredis_url = "{redis_url}"\n' if redis_url else ""
        tables = {"stomp": "", "amqp": "", "mesh": ""}
        if pki is not None:
            tables = _tls_tables(pki.nodes[name], pki.ca_certificate, port + STOMP_TLS_OFFSET, amqps_ports[i])
        config.write_text(
            f'name = "{name}"\ndata_dir = "{data / name}"\n\n[stomp]\nbind = "127.0.0.1:{port}"\n\n'
            f'{tables["stomp"]}[stomp.websocket]\nbind = "127.0.0.1:{port + 1}"\n\n'
            f'[amqp]\nbind = "127.0.0.1:{amqp_ports[i]}"\n\n{tables["amqp"]}'
            f'[mesh]\nbind = "127.0.0.1:{port + 3}"\ncluster_password = "{password}"\n\n{tables["mesh"]}'
            f'[mesh.discovery]\ngroup = "{group}"\ninterface = "127.0.0.1"\n' + metrics
        )
        processes.start(name, [sys.executable, "-m", "meshgate", "broker", "--config", str(config),
                               "--log-level", "WARNING"], quiet=True)
    print(f"meshgate local mesh: {nodes} nodes finding each other on {group} (127.0.0.1), data under {data}",
          flush=True)
    for i, port in enumerate(stomp_ports):
        secured = (f", stomp+ssl://127.0.0.1:{port + STOMP_TLS_OFFSET}, amqps://127.0.0.1:{amqps_ports[i]}"
                   if pki is not None else "")
        print(f"  node{i + 1}: stomp://127.0.0.1:{port}, ws://127.0.0.1:{port + 1}/ws, "
              f"amqp://127.0.0.1:{amqp_ports[i]}{secured}  (mesh link 127.0.0.1:{port + 3}"
              f"{', TLS only' if pki is not None else ''})", flush=True)
    if pki is not None:
        _print_tls(pki, stomp_ports[0] + STOMP_TLS_OFFSET)
    print("  access: anonymous, any client may connect (the local default, on 127.0.0.1 only); to require "
          "logins add [security.users] to the nodes' configs: docs/configuration.md", flush=True)
    if redis_url:
        print(f"  metrics: every node writes to {redis_url} (streams meshgate:snapshots, meshgate:events)",
              flush=True)
    else:
        print("  metrics: off (no redis-server installed; give --redis URL to use one)", flush=True)
    if console and redis_url and not processes.stopping:
        management = {"MESHGATE_CONSOLE_STOMP": ",".join(f"127.0.0.1:{port}" for port in stomp_ports)}
        if pki is not None:
            management = {"MESHGATE_CONSOLE_CA": str(pki.ca_certificate), "MESHGATE_CONSOLE_STOMP": ",".join(
                f"stomp+ssl://127.0.0.1:{port + STOMP_TLS_OFFSET}" for port in stomp_ports)}
        _start_console(processes, data / "console", redis_url, management, console_port)
    if pipeline and redis_url and not processes.stopping:
        _start_pipeline(processes, data / "pipeline", redis_url)
    node = (f"stomp+ssl://127.0.0.1:{stomp_ports[0] + STOMP_TLS_OFFSET} --ca {pki.ca_certificate}"
            if pki is not None else f"127.0.0.1:{stomp_ports[0]}")
    print(f"  command line: meshgate nodes --stomp {node}; Ctrl-C stops everything", flush=True)
    status = processes.wait(started)
    if redis is not None:
        redis.stop()
    return status


def _tls_tables(files: throwaway_ca.KeyPair, ca_certificate: Path, stomp_tls_port: int,
                amqps_port: int) -> dict[str, str]:
    """A node's [stomp.tls], [amqp.tls] and [mesh.tls] tables. The client ports ask for no
    client certificate (any client that trusts the CA connects, as on a broker's usual
    TLS port); the mesh links are mutual TLS, the only way [mesh.tls] works."""
    keys = f'certificate = "{files.certificate}"\nprivate_key = "{files.private_key}"\n'
    return {"stomp": f'[stomp.tls]\nbind = "127.0.0.1:{stomp_tls_port}"\n{keys}\n',
            "amqp": f'[amqp.tls]\nbind = "127.0.0.1:{amqps_port}"\n{keys}\n',
            "mesh": f'[mesh.tls]\n{keys}ca_certificate = "{ca_certificate}"\n\n'}


def _print_tls(pki: throwaway_ca.ThrowawayPki, port: int) -> None:
    """Where the CA is and how to see TLS from a client, for a newcomer."""
    state = "made now" if pki.made else "reused"
    print(f"  TLS: certificates of a throw-away CA ({state}; valid until {pki.not_after:%Y-%m-%d}, remade when "
          f"less than a day is left), naming 127.0.0.1 and localhost. CA: {pki.ca_certificate}\n"
          f"    mesh links: mutual TLS only; the console asks the nodes over stomp+ssl; the plaintext client "
          f"ports stay open on 127.0.0.1 for tools without TLS\n"
          f"    see it: openssl s_client -connect 127.0.0.1:{port} -CAfile {pki.ca_certificate} -brief "
          f"</dev/null\n"
          f"    or: python -c \"import stomp; c = stomp.Connection([('127.0.0.1', {port})]); "
          f"c.set_ssl([('127.0.0.1', {port})], ca_certs='{pki.ca_certificate}'); c.connect(wait=True); "
          f"print('connected over TLS')\"", flush=True)


def _start_console(processes: _Processes, data: Path, redis_url: str, management: dict[str, str],
                   port: int | None) -> None:
    """``management``: the console's MESHGATE_CONSOLE_STOMP and, for TLS entries, its CA."""
    if importlib.util.find_spec("daphne") is None or importlib.util.find_spec("django") is None:
        print("  console: not installed (pip install 'meshgate[console]')", flush=True)
        return
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="console.settings", MESHGATE_CONSOLE_DATA=str(data),
               MESHGATE_REDIS_URL=redis_url, **management)
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
