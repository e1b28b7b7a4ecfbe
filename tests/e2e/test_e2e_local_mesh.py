"""`meshgate local-mesh` (what scripts/run.sh runs): three linked nodes, one Ctrl-C."""

from __future__ import annotations

import random
import re
import signal
import socket
import subprocess
import sys
import time

import pika
import pytest
from e2e_support import HOST, manage

from management.client import ManagementClientError
from model.requests import Nodes


def _free_base() -> int:
    while True:
        base = random.randrange(20000, 30000, 10)
        ports = [base + 10 * i + offset for i in range(3) for offset in (0, 1, 2, 3)]
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
    import threading

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
