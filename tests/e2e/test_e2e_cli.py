"""The `meshgate broker` command: configuration errors, the data dir lock, signals,
listener conflicts, connection limits; `meshgate passwd`; and the admin commands'
check of the names they are given."""

from __future__ import annotations

import signal
import socket
import subprocess

import pytest
from e2e_support import HOST, MESHGATE, manage_result, run_meshgate, unique

from model.requests import Events


def broker_args(tmp_path, *extra: str, data: str = "data") -> list[str]:
    return ["broker", "--name", "cli", "--stomp", f"{HOST}:0", "--data", str(tmp_path / data), *extra]


@pytest.mark.parametrize(
    "toml, key",
    [
        ("colour = 'blue'\n", "colour"),
        ("[stomp]\nmax_frame_sise = 5\n", "stomp.max_frame_sise"),
        ("[broker]\nmemory_limt = '1MiB'\n", "broker.memory_limt"),
        ("[store]\nsync = 'always'\nsyncc = 'never'\n", "store.syncc"),
        ("[stomp.tls]\nbnd = '127.0.0.1:0'\n", "stomp.tls.bnd"),
    ],
)
def test_unknown_config_key_exits_2_naming_it(tmp_path, toml, key):
    config = tmp_path / "node.toml"
    config.write_text(toml)
    result = run_meshgate(broker_args(tmp_path, "--config", str(config)), timeout=30)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert key in result.stderr, result.stderr
    assert "listening on" not in result.stdout


def test_unknown_user_key_exits_2_naming_it(tmp_path, hashes):
    config = tmp_path / "node.toml"
    config.write_text(f'[security.users.alice]\npasword = "{hashes["alice"]}"\n')
    result = run_meshgate(broker_args(tmp_path, "--config", str(config)), timeout=30)
    assert result.returncode == 2
    assert "security.users.alice.pasword" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "override, key",
    [
        ("stomp.max_frame_sise=5", "stomp.max_frame_sise"),
        ("stomp.max_frame_size=-5", "stomp.max_frame_size"),
        ("broker.max_delivery_attempts=0", "broker.max_delivery_attempts"),
        ("store.sync=sometimes", "store.sync"),
    ],
)
def test_bad_override_exits_2_naming_it(tmp_path, override, key):
    result = run_meshgate(broker_args(tmp_path, "--set", override), timeout=30)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert key in result.stderr, result.stderr


def test_invalid_toml_exits_2(tmp_path):
    config = tmp_path / "node.toml"
    config.write_text("[stomp\nbind = \n")
    result = run_meshgate(broker_args(tmp_path, "--config", str(config)), timeout=30)
    assert result.returncode == 2
    assert "node.toml" in result.stderr, result.stderr


def test_plain_password_is_refused(tmp_path):
    config = tmp_path / "node.toml"
    config.write_text('[security.users.alice]\npassword = "secret"\n')
    result = run_meshgate(broker_args(tmp_path, "--config", str(config)), timeout=30)
    assert result.returncode == 2
    assert "security.users.alice.password" in result.stderr
    assert "meshgate passwd" in result.stderr


def test_second_process_on_same_data_dir_refuses(broker_factory, connect, tmp_path):
    first = broker_factory()
    try:
        result = run_meshgate(["broker", "--name", "second", "--stomp", f"{HOST}:0", "--data", str(first.data_dir)],
                              timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("a second broker on the same data dir kept running")
    assert result.returncode != 0
    assert "listening on" not in result.stdout
    message = result.stderr.lower()
    assert str(first.data_dir).lower() in message and "in use" in message, result.stderr
    assert str(first.pid) in result.stderr, "the message should name the process holding the data dir"
    # The first one is unharmed.
    assert first.running
    client = connect(first)
    destination = "/queue/" + unique("still")
    client.subscribe(destination)
    client.send(destination, "first still works", receipt=True)
    assert client.listener.wait_for(1)[0].body == "first still works"
    first.stop()


def test_sigterm_exits_0(broker_factory):
    broker = broker_factory()
    assert broker.stop() == 0


def test_sigterm_with_connected_clients_exits_0_and_closes_them(broker_factory, connect, raw):
    broker = broker_factory()
    consumer = connect(broker)
    destination = "/queue/" + unique("term")
    consumer.subscribe(destination, ack="client")
    consumer.send(destination, "unacked", persistent="true", receipt=True)
    consumer.listener.wait_for(1)
    idle = raw(broker)
    idle.connect("1.2")
    broker.stop()
    consumer.listener.wait_disconnected()
    idle.wait_closed(timeout=5)
    # The unacked persistent message is still there after the restart.
    broker.start(port=broker.port)
    again = connect(broker)
    again.subscribe(destination)
    assert again.listener.wait_for(1)[0].body == "unacked"


def test_sigint_also_stops_cleanly(broker_factory):
    broker = broker_factory()
    broker.proc.send_signal(signal.SIGINT)
    assert broker.proc.wait(15) == 0, broker.describe()


def test_data_dir_reusable_after_sigterm_and_after_kill9(broker_factory):
    broker = broker_factory()
    broker.restart(graceful=True)
    broker.restart(graceful=False)
    assert broker.running and broker.starts == 3


def test_port_in_use_fails_with_message(tmp_path):
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            result = run_meshgate(["broker", "--name", "busy", "--stomp", f"{HOST}:{port}", "--data",
                                   str(tmp_path / "busy")], timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("broker kept running although its port was taken")
    assert result.returncode != 0
    assert "listening on" not in result.stdout
    assert str(port) in result.stderr or "address" in result.stderr.lower(), result.stderr


def test_max_connections(broker_factory, raw):
    broker = broker_factory(sets=["stomp.max_connections=2"])
    first, second = raw(broker), raw(broker)
    first.connect("1.2")
    second.connect("1.2")
    third = raw(broker)
    try:
        third.send_frame("CONNECT", {"accept-version": "1.2", "host": "h"})
    except OSError:
        pass
    frames = third.wait_closed()
    assert "CONNECTED" not in [f.command for f in frames], frames
    first.send_frame("DISCONNECT", {"receipt": "bye"})
    first.wait_closed()
    fourth = raw(broker)
    fourth.connect("1.2")  # a slot is free again


def test_passwd_stdin_prints_a_hash(tmp_path):
    result = run_meshgate(["passwd", "--stdin"], input="s3cret\n")
    assert result.returncode == 0
    assert result.stdout.strip().startswith("pbkdf2_sha256$200000$")
    empty = run_meshgate(["passwd", "--stdin"], input="\n")
    assert empty.returncode != 0


_BAD_NAMES = [
    (["purge", "q\x01x"], "argument queue: invalid queue name 'q\\x01x': it holds the character U+0001"),
    (["browse", "q\x7f"], "invalid queue name 'q\\x7f'"),
    (["delete", "q" * 300], "is 300 bytes long"),
    (["send", "/queue/a\nb", "body"], "invalid queue name 'a\\nb'"),
    (["send", "/topic/t\x1b", "body"], "invalid topic 't\\x1b'"),
    (["send", "/queue/q", "body", "--header", "a\nb=1"], "invalid header name 'a\\nb'"),
    (["move", "q", "--to-queue", "b\tc"], "argument --to-queue: invalid queue name 'b\\tc'"),
    (["define-queue", "q", "--dead-letter-queue", "d\x1b"], "invalid dead-letter queue name 'd\\x1b'"),
    (["undefine", "durable", "app.s\rx"], "invalid name 'app.s\\rx'"),
]


def test_admin_commands_refuse_a_bad_name_with_exit_2_and_ask_nothing(broker_factory):
    broker = broker_factory()
    for args, words in _BAD_NAMES:
        result = run_meshgate([*args, "--stomp", f"{broker.host}:{broker.port}"])
        assert result.returncode == 2 and words in result.stderr, (args, result.returncode, result.stderr)
    # No request reached the node: it records every admin action it is asked for, refused or not.
    assert manage_result(broker.port, Events(kinds=["admin_action"])) == []


def test_version_flag():
    result = subprocess.run([MESHGATE, "--version"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    assert result.stdout.startswith("meshgate ")


def test_sigterm_with_a_consumer_that_stopped_reading(broker_factory, raw):
    """A client whose socket buffer is full must not keep a SIGTERMed node alive."""
    broker = broker_factory()
    destination = "/queue/" + unique("stuck")
    stuck = raw(broker)
    stuck.connect("1.2")
    stuck.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.send_frame("SUBSCRIBE", {"destination": destination, "id": "s", "receipt": "r"})
    stuck.expect("RECEIPT")
    producer = raw(broker)
    producer.connect("1.2")
    body = b"x" * 65536
    producer.sendall(b"".join(
        f"SEND\ndestination:{destination}\ncontent-length:{len(body)}\n\n".encode() + body + b"\0"
        for _ in range(300)) + b"SEND\ndestination:/queue/x\nreceipt:done\n\n\0")
    assert producer.expect("RECEIPT", timeout=30).headers["receipt-id"] == "done"
    # ~20 MB queued for a client that reads nothing more.
    broker.stop()
