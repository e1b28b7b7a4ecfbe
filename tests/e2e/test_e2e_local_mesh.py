"""`meshgate local-mesh` (what scripts/run.sh runs): three linked nodes, one Ctrl-C;
with --tls the links, TLS client ports and the console's requests on a throw-away CA."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pika
import pytest
import stomp
from e2e_support import HOST, manage

from management.client import ManagementClient, ManagementClientError, TlsFiles
from meshgate import throwaway_ca
from meshgate.redis_server import free_port
from model.requests import Nodes


def _free_base() -> int:
    while True:
        base = random.randrange(20000, 30000, 10)
        ports = [base + 10 * i + offset for i in range(3) for offset in range(6)]  # with --tls: +4, +5
        try:
            sockets = []
            for port in ports:
                sock = socket.socket()
                sock.bind((HOST, port))
                sockets.append(sock)
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()


def test_local_mesh_links_three_nodes_with_their_own_redis_and_stops_cleanly(tmp_path):
    base = _free_base()
    process = subprocess.Popen([sys.executable, "-m", "meshgate", "local-mesh", "--base-port", str(base),
                                "--data", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        nodes = {}
        while time.monotonic() < deadline:
            try:
                nodes = manage(base, Nodes(), timeout=2).result.nodes
            except ManagementClientError:
                nodes = []
            if len(nodes) == 3 and all(len(summary.links) == 2 and summary.node.metrics.state == "ok"
                                       for summary in nodes):
                break
            time.sleep(0.2)
        assert sorted(summary.node.name for summary in nodes) == ["node1", "node2", "node3"]
        assert all(len(summary.links) == 2 and summary.answered for summary in nodes), nodes
        # each node writes its snapshots to the redis-server the local mesh started
        assert all(summary.node.metrics.state == "ok" for summary in nodes), nodes
        # and speaks AMQP beside STOMP
        assert sorted(summary.node.addresses.amqp for summary in nodes) == [
            f"127.0.0.1:{base + 2 + 10 * i}" for i in range(3)]
        connection = pika.BlockingConnection(pika.ConnectionParameters(HOST, base + 2))
        channel = connection.channel()
        channel.queue_declare("hello")
        channel.basic_publish("", "hello", b"over amqp")
        assert channel.basic_get("hello", auto_ack=True)[2] == b"over amqp"
        connection.close()
    finally:
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=30)[0].decode()
    assert process.returncode == 0, output
    match = re.search(r"metrics: every node writes to redis://127\.0\.0\.1:(\d+)/0", output)
    assert match, output
    with pytest.raises(OSError):  # its redis-server stopped with it
        socket.create_connection((HOST, int(match.group(1))), timeout=1).close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_local_mesh_runs_the_pipeline_beside_the_nodes_and_says_when_it_is_up(tmp_path):

    import msgspec
    import redis

    from model.rollups import PipelineStatus, status_key

    base = _free_base()
    process = subprocess.Popen([sys.executable, "-m", "meshgate", "local-mesh", "--nodes", "1", "--no-console",
                                "--base-port", str(base), "--data", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not any("pipeline running" in line for line in lines):
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        url = re.search(r"writes to (redis://\S+)", "".join(lines)).group(1)
        with redis.Redis.from_url(url) as client:
            status = msgspec.json.decode(client.get(status_key("meshgate")), type=PipelineStatus)
        assert status.entries > 0 and status.master == "local[2]"
        assert (tmp_path / "pipeline" / "checkpoint" / "offsets").is_dir()
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        reader.join(timeout=5)
    output = "".join(lines)
    assert process.returncode == 0, output
    assert "pipeline: starting on local Spark" in output and "exited with status" not in output, output


class _Received(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.arrived = threading.Event()

    def on_message(self, frame) -> None:
        self.bodies.append(frame.body)
        self.arrived.set()


def _stomp_over_tls(port: int, ca: Path) -> stomp.Connection:
    connection = stomp.Connection([(HOST, port)])
    connection.set_ssl([(HOST, port)], ca_certs=str(ca))
    connection.connect(wait=True)
    return connection


def _mesh_peer_certificate(port: int, tls_dir: Path) -> dict:
    """The certificate a node's mesh listener presents to a dialler holding node2's certificate."""
    context = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
    context.load_cert_chain(str(tls_dir / "node2.crt"), str(tls_dir / "node2.key"))
    with socket.create_connection((HOST, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=HOST) as link:
        return link.getpeercert()


def _plaintext_answer(port: int) -> bytes:
    """What a node's mesh listener sends back to a plaintext peer, until it closes."""
    received = b""
    with socket.create_connection((HOST, port), timeout=10) as sock:
        sock.sendall(b"HELLO plaintext peer\n\n")
        while chunk := sock.recv(4096):
            received += chunk
    return received


def _console_environment(parent: int) -> dict[str, str]:
    """The environment of the console (daphne) the local mesh started."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
            environ = (stat.parent / "environ").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"daphne" in command:
            return dict(item.split("=", 1) for item in environ.decode().split("\0") if "=" in item)
    raise AssertionError("no console process under the local mesh")


def _console_get(port: int, path: str, token: str, timeout: float = 30) -> dict:
    """GET from the console's API, waiting for it to listen."""
    request = urllib.request.Request(f"http://{HOST}:{port}{path}", headers={"Authorization": f"Token {token}"})
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                return json.loads(response.read())
        except urllib.error.URLError as error:
            if isinstance(error, urllib.error.HTTPError) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.timeout(180)
def test_local_mesh_with_tls_links_serves_and_manages_over_a_throwaway_ca(tmp_path):
    base, console_port = _free_base(), free_port()
    ca = tmp_path / "tls" / "ca.crt"
    process = subprocess.Popen([sys.executable, "-m", "meshgate", "local-mesh", "--tls", "--no-pipeline",
                                "--base-port", str(base), "--data", str(tmp_path), "--console-port", str(console_port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    tls_ports = [base + 4 + 10 * i for i in range(3)]
    try:
        # Management over the TLS client port, verified against the throw-away CA.
        deadline = time.monotonic() + 60
        nodes = []
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with ManagementClient(HOST, tls_ports[0], timeout=2, tls=TlsFiles(ca=str(ca)).context()) as client:
                    nodes = client.ask(Nodes()).result.nodes
            except ManagementClientError:
                nodes = []
            if len(nodes) == 3 and all(len(summary.links) == 2 for summary in nodes):
                break
            time.sleep(0.2)
        assert sorted(summary.node.name for summary in nodes) == ["node1", "node2", "node3"], "".join(lines)
        assert all(len(summary.links) == 2 for summary in nodes), nodes

        # The links they made are TLS: the mesh listener presents the throw-away CA's certificate
        # and only drops (or alerts) a plaintext peer, never greets it.
        for i in range(3):
            presented = _mesh_peer_certificate(base + 3 + 10 * i, ca.parent)
            assert dict(item[0] for item in presented["subject"])["commonName"] == f"node{i + 1}"
            assert dict(item[0] for item in presented["issuer"])["commonName"] == throwaway_ca.CA_NAME
            assert ("IP Address", "127.0.0.1") in presented["subjectAltName"]
            answer = _plaintext_answer(base + 3 + 10 * i)
            assert answer == b"" or answer.startswith(b"\x15\x03"), answer  # nothing, or a TLS alert record

        # A client over TLS on node3 receives what a client over TLS sent on node1.
        received = _Received()
        consumer = _stomp_over_tls(tls_ports[2], ca)
        consumer.set_listener("received", received)
        consumer.subscribe("/queue/over-tls", id="1", ack="auto")
        producer = _stomp_over_tls(tls_ports[0], ca)
        producer.send("/queue/over-tls", "sealed in transit")
        assert received.arrived.wait(30), "nothing arrived on node3"
        assert received.bodies == ["sealed in transit"]

        # The console asks the nodes over stomp+ssl with the CA, and its API answers through them.
        deadline = time.monotonic() + 60
        while not any("command line:" in line for line in lines):  # printed once the console has started
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        environment = _console_environment(process.pid)
        assert environment["MESHGATE_CONSOLE_STOMP"].split(",") == [f"stomp+ssl://127.0.0.1:{p}" for p in tls_ports]
        assert environment["MESHGATE_CONSOLE_CA"] == str(ca)
        token = subprocess.run([sys.executable, "-m", "django", "drf_create_token", "admin"], check=True,
                               capture_output=True, text=True,
                               env=dict(os.environ, DJANGO_SETTINGS_MODULE="console.settings",
                                        MESHGATE_CONSOLE_DATA=str(tmp_path / "console"))).stdout.split()[2]
        connections = _console_get(console_port, "/api/v1/connections", token)
        assert connections["failures"] == [], connections
        assert "node3" in {row["node_name"] for row in connections["items"]}, connections  # the consumer's
        consumer.disconnect()
        producer.disconnect()
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        reader.join(timeout=5)
    output = "".join(lines)
    assert process.returncode == 0, output
    assert f"CA: {ca}" in output and f"openssl s_client -connect 127.0.0.1:{tls_ports[0]} -CAfile {ca}" in output, \
        output
    assert f"stomp+ssl://127.0.0.1:{tls_ports[0]}, amqps://127.0.0.1:{base + 5}" in output, output
    assert oct((tmp_path / "tls" / "node1.key").stat().st_mode & 0o777) == "0o600"
