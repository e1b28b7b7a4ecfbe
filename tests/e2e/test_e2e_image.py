"""The OCI image (deploy/container): built by deploy/container/build.sh (debootstrap base,
``buildah bud --isolation chroot``), then what it holds is run without ``podman run``
(which cannot start containers on this machine): ``buildah run --isolation chroot`` for
``meshgate --version``, and a node started as the image's non-root user by ``chroot`` from
the image's mounted file system, on loopback ports. It must serve STOMP, AMQP and /readyz,
and stop with exit status 0 on SIGTERM.

Slow: a cold build (base and dependencies) takes minutes; once
localhost/debian-base:bookworm and buildah's layer cache exist, a build is the project's
own layer only. Needs root and buildah, podman and debootstrap (installed with apt-get if
missing); skipped only when they cannot be installed."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from e2e_support import HOST, unique
from image_support import CHROOT, IMAGE_ENV, UNSHARE, VENV_MESHGATE, child_pid, http_status, image_user, run, wait_for
from mesh_support import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture
def container(image):
    """A working container of the image (``buildah from``), removed at teardown."""
    name = run("buildah", "from", "--name", unique("meshgate-image-test"), image).strip()
    yield name
    subprocess.run(["buildah", "umount", name], capture_output=True)
    subprocess.run(["buildah", "rm", name], capture_output=True)


def test_the_image_says_its_version(container):
    from gateway import __version__

    output = run("buildah", "run", "--isolation", "chroot", container, "--", "meshgate", "--version")
    assert output.strip() == f"meshgate {__version__}"


def test_the_image_config_is_what_it_runs_by_default(image):
    config = json.loads(run("buildah", "inspect", "--type", "image", image))["OCIv1"]["config"]
    assert config["User"] == "10001:10001"  # numeric, so Kubernetes' runAsNonRoot can check it
    assert config["Entrypoint"] == [VENV_MESHGATE]
    assert config["Cmd"] == ["broker", "--config", "/etc/meshgate/node.toml"]
    assert config["StopSignal"] == "SIGTERM"
    assert "/var/lib/meshgate" in config["Volumes"]
    assert {"61613/tcp", "5672/tcp", "61616/tcp", "15692/tcp", "8161/tcp"} <= set(config["ExposedPorts"])


def test_a_node_from_the_image_serves_and_stops_gracefully_as_pid_1(container, tmp_path):
    """As in a container: the node is PID 1 of a PID namespace of its own (unshare), where the
    kernel delivers only the signals it has a handler for; SIGTERM must still stop it, with 0."""
    import pika
    import stomp

    root = Path(run("buildah", "mount", container).strip())
    uid, gid = image_user(root)
    assert (root / "var/lib/meshgate").stat().st_uid == uid, "the data dir (the volume) is the meshgate user's"
    stomp_port, amqp_port, http_port = free_port(), free_port(), free_port()
    log = tmp_path / "node.log"
    with log.open("wb") as out:
        # The image's own default config, with loopback ports: what `podman run` would start.
        node = subprocess.Popen(
            [UNSHARE, "--pid", "--fork", "--kill-child",
             CHROOT, f"--userspec={uid}:{gid}", "--groups=", str(root), VENV_MESHGATE,
             "broker", "--config", "/etc/meshgate/node.toml", "--name", "image-test",
             "--stomp", f"{HOST}:{stomp_port}", "--amqp", f"{HOST}:{amqp_port}",
             "--set", f"http.bind={HOST}:{http_port}"],
            stdout=out, stderr=subprocess.STDOUT,
            env=IMAGE_ENV)
    try:
        wait_for(lambda: http_status(f"http://{HOST}:{http_port}/readyz") == 200, "200 from /readyz", 60, node, log)
        output = log.read_text()
        assert "/var/lib/meshgate/node" in output or (root / "var/lib/meshgate/node").is_dir(), output

        # STOMP: a persistent send with a receipt, received by a subscriber.
        queue = f"/queue/{unique('image')}"
        received: list[str] = []

        class Listener(stomp.ConnectionListener):
            def on_message(self, frame) -> None:
                received.append(frame.body)

        conn = stomp.Connection([(HOST, stomp_port)])
        conn.set_listener("", Listener())
        conn.connect(wait=True)
        conn.subscribe(queue, id="1", ack="auto")
        conn.send(queue, "from the image", headers={"persistent": "true"})
        wait_for(lambda: received, "a STOMP message back", 10, node, log)
        assert received == ["from the image"]
        conn.disconnect()

        # AMQP 0-9-1: publish to a queue, get it back.
        amqp = pika.BlockingConnection(pika.ConnectionParameters(HOST, amqp_port))
        channel = amqp.channel()
        name = unique("image-amqp")
        channel.queue_declare(name)
        channel.basic_publish("", name, b"amqp from the image")
        got = wait_for(lambda: channel.basic_get(name, auto_ack=True)[2], "an AMQP message back", 10, node, log)
        assert got == b"amqp from the image"
        amqp.close()

        # The node wrote its store into the image's volume, as the meshgate user.
        data = root / "var/lib/meshgate/node"
        assert data.is_dir() and data.stat().st_uid == uid

        # unshare's child is the node (chroot execs it), PID 1 in its namespace.
        pid = child_pid(node.pid)
        assert pid is not None
        nspid = re.search(r"^NSpid:\s*(.*)$", Path(f"/proc/{pid}/status").read_text(), re.M)
        assert nspid and nspid.group(1).split()[-1] == "1", nspid
        os.kill(pid, signal.SIGTERM)
        assert node.wait(timeout=30) == 0, log.read_text()[-3000:]  # unshare exits with the node's status
    finally:
        if node.poll() is None:
            node.kill()
            node.wait(timeout=10)
    assert not re.search(r"Traceback", log.read_text()), log.read_text()[-3000:]


def test_the_console_from_the_image_serves_its_pages_and_stops(container, tmp_path, redis_server):
    root = Path(run("buildah", "mount", container).strip())
    uid, gid = image_user(root)
    port = free_port()
    log = tmp_path / "console.log"
    with log.open("wb") as out:
        console = subprocess.Popen(
            [CHROOT, f"--userspec={uid}:{gid}", "--groups=", str(root), "/usr/local/bin/meshgate-console",
             "--bind", HOST, "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
            env={**IMAGE_ENV, "MESHGATE_CONSOLE_DATA": "/var/lib/meshgate/console",
                 "MESHGATE_REDIS_URL": redis_server.url})
    try:
        wait_for(lambda: http_status(f"http://{HOST}:{port}/login/") == 200, "the login page", 60, console, log)
        # Its scripts come from the source tree's static/ (console/settings.py), in the image too.
        assert http_status(f"http://{HOST}:{port}/static/console/console.css") == 200
        assert (root / "var/lib/meshgate/console/console.sqlite3").stat().st_uid == uid
        console.send_signal(signal.SIGTERM)
        assert console.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if console.poll() is None:
            console.kill()
            console.wait(timeout=10)


def test_the_pipeline_from_the_image_runs_spark(container, redis_server):
    """Java 17 and pyspark in the image: a pipeline run over the (empty) streams, as the
    image's user, with the host's network (buildah run shares it)."""
    done = subprocess.run(
        ["buildah", "run", "--isolation", "chroot", "--user", "meshgate", container, "--",
         "meshgate", "pipeline", "--redis", redis_server.url, "--once", "--checkpoint", "/tmp/checkpoint"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def test_the_witness_from_the_image_listens_and_stops(container, tmp_path):
    """The same image, another command: ``meshgate witness`` as the image's user, its state
    in the volume, stopped by SIGTERM with status 0."""
    root = Path(run("buildah", "mount", container).strip())
    uid, gid = image_user(root)
    port = free_port()
    log = tmp_path / "witness.log"
    with log.open("wb") as out:
        witness = subprocess.Popen(
            [CHROOT, f"--userspec={uid}:{gid}", "--groups=", str(root), VENV_MESHGATE, "witness",
             "--bind", f"{HOST}:{port}", "--state", "/var/lib/meshgate/witness.state"],
            stdout=out, stderr=subprocess.STDOUT, env={**IMAGE_ENV, "MESHGATE_HA_PASSWORD": unique("ha")})
    try:
        wait_for(lambda: f"listening on {HOST}:{port}" in log.read_text(), "the witness listening", 60, witness, log)
        socket.create_connection((HOST, port), timeout=5).close()
        witness.send_signal(signal.SIGTERM)
        assert witness.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if witness.poll() is None:
            witness.kill()
            witness.wait(timeout=10)
