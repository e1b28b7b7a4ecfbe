"""Who may ask the management address what: the principal is the authenticated
connection, replies go only where the requester may write, and the address is
no queue anyone can subscribe to or fill."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from e2e_support import manage, module_broker, run_meshgate, security_config, unique
from raw_stomp import RawClient

from model.requests import ADMIN_ACTIONS, Browse, Events, Nodes, Purge, Queues, Send

USERS = {"alice": ["admins"], "dave": ["operators"]}
RULES = [
    {"destination": ">", "read": ["admins"], "write": ["admins"], "admin": ["admins"]},
    {"destination": "/queue/meshgate.management", "write": ["operators"]},
    {"destination": "/temp-queue/>", "read": ["operators"], "write": ["operators"]},
]
ALICE = ("alice", "alice-secret")
DAVE = ("dave", "dave-secret")
ADDRESS = "/queue/meshgate.management"


@pytest.fixture(scope="module")
def node(tmp_path_factory, hashes):
    with module_broker(tmp_path_factory, "guarded", security_config(hashes, USERS, RULES)) as broker:
        yield broker


def raw_as(node, user: tuple[str, str]) -> RawClient:
    client = RawClient.to(node)
    client.connect("1.2", {"login": user[0], "passcode": user[1]})
    return client


def test_a_user_without_admin_may_look_but_not_act(node):
    queue = unique("guarded")
    assert manage(node.port, Send(destination="/queue/" + queue, body="x"), *ALICE).ok
    assert manage(node.port, Queues(name=queue), *DAVE).result[0].depth == 1
    assert manage(node.port, Nodes(), *DAVE).ok
    refused = manage(node.port, Purge(queue=queue), *DAVE)
    assert refused.error.code == "forbidden" and "admin permission" in refused.error.message
    assert manage(node.port, Browse(queue=queue), *DAVE).error.code == "forbidden"
    assert manage(node.port, Queues(name=queue), *ALICE).result[0].depth == 1  # nothing was purged
    assert manage(node.port, Purge(queue=queue), *ALICE).result[0].count == 1
    audit = [e for e in manage(node.port, Events(kinds=["admin_action"]), *ALICE).result if queue in e.target]
    assert [(e.user, e.action, e.ok) for e in audit] == [
        ("alice", "send", True), ("dave", "purge", False), ("dave", "browse", False), ("alice", "purge", True)]


@pytest.mark.parametrize("action", sorted(ADMIN_ACTIONS))
def test_every_admin_action_is_refused_without_admin(node, action):
    raw = raw_as(node, DAVE)
    reply_to = "/temp-queue/" + unique("r")
    raw.send_frame("SUBSCRIBE", {"id": "1", "destination": reply_to})
    # The client cannot grant itself admin with a header.
    raw.send_frame("SEND", {"destination": ADDRESS, "reply-to": reply_to, "meshgate-admin": "true",
                            "correlation-id": "c1"},
                   json.dumps({"action": action, "queue": "q", "destination": "/queue/q", "connection": "x",
                               "forget": "n", "kind": "queue", "name": "q", "vhost": "/", "user": "u", "ids": ["m"],
                               "finding": "f", "permission": {"vhost": "/", "user": "u", "configure": "", "write": "",
                                              "read": ""}}))
    reply = json.loads(raw.expect("MESSAGE").body)
    assert reply["ok"] is False and reply["error"]["code"] == "forbidden", reply


def test_the_cli_says_why_it_was_refused(node):
    result = run_meshgate(["purge", "anything", "--stomp", f"{node.host}:{node.port}", "--login", DAVE[0],
                           "--passcode", DAVE[1]])
    assert result.returncode == 1 and "purge needs the admin permission" in result.stderr, result.stderr


def test_a_reply_goes_only_where_the_requester_may_write(node):
    victim = unique("victim")
    watcher = raw_as(node, ALICE)
    watcher.send_frame("SUBSCRIBE", {"id": "w", "destination": "/queue/" + victim, "receipt": "w"})
    watcher.expect("RECEIPT")
    raw = raw_as(node, DAVE)
    frames = raw.closed_after("SEND", {"destination": ADDRESS, "reply-to": "/queue/" + victim}, '{"action": "nodes"}')
    assert [f.command for f in frames] == ["ERROR"], frames
    assert "reply-to /queue/" + victim in frames[0].headers["message"]
    assert watcher.poll(0.5) == []  # nothing was written there
    # alice may write there, so her reply goes there
    alice = raw_as(node, ALICE)
    alice.send_frame("SEND", {"destination": ADDRESS, "reply-to": "/queue/" + victim}, '{"action": "nodes"}')
    assert json.loads(watcher.expect("MESSAGE").body)["action"] == "nodes"


def test_a_request_without_reply_to_is_an_error(node):
    raw = raw_as(node, ALICE)
    frames = raw.closed_after("SEND", {"destination": ADDRESS}, '{"action": "nodes"}')
    assert [f.command for f in frames] == ["ERROR"] and "needs a reply-to" in frames[0].headers["message"]


def test_a_malformed_request_gets_an_answer_naming_the_problem(node):
    raw = raw_as(node, ALICE)
    raw.send_frame("SUBSCRIBE", {"id": "1", "destination": "/temp-queue/r"})
    for body, expected in (("not json", "not JSON"), ('{"action": "explode"}', "explode"),
                           ('{"action": "purge"}', "queue"), ('{"action": "browse", "queue": 7}', "queue")):
        raw.send_frame("SEND", {"destination": ADDRESS, "reply-to": "/temp-queue/r"}, body)
        reply = json.loads(raw.expect("MESSAGE").body)
        assert reply["ok"] is False and reply["error"]["code"] == "bad_request", reply
        assert expected in reply["error"]["message"], reply
    assert manage(node.port, Nodes(), *ALICE).ok  # the node carries on


def test_nobody_may_subscribe_to_the_management_address(node):
    raw = raw_as(node, ALICE)
    frames = raw.closed_after("SUBSCRIBE", {"id": "1", "destination": ADDRESS})
    assert [f.command for f in frames] == ["ERROR"], frames
    assert "service address" in frames[0].headers["message"]
    assert manage(node.port, Nodes(), *ALICE).ok


def test_a_management_queue_left_in_the_store_does_not_hide_the_service(broker_factory):
    """Older versions let a SUBSCRIBE create a durable queue of that name; from then
    on every request was queued and never answered, even after a restart."""
    broker = broker_factory()
    broker.stop()
    catalog = broker.data_dir / "catalog.json"
    saved = json.loads(catalog.read_text()) if catalog.exists() else {}
    saved["queues"] = sorted({*saved.get("queues", []), "meshgate.management"})
    catalog.write_text(json.dumps(saved))
    broker.start()
    reply = manage(broker.port, Nodes())
    assert reply.ok and reply.result.nodes[0].answered


def test_a_failed_login_is_an_event(node):
    intruder = unique("mallory")
    raw = RawClient.to(node)
    raw.send_frame("CONNECT", {"accept-version": "1.2", "host": "h", "login": intruder, "passcode": "guess"})
    assert [f.command for f in raw.wait_closed()] == ["ERROR"]
    failures = manage(node.port, Events(kinds=["authentication_failed"]), *ALICE).result
    assert [e.user for e in failures if e.user == intruder] == [intruder]
    assert failures[-1].remote.startswith("127.0.0.1:")


# --- the CLI's credential off its command line: $MESHGATE_LOGIN, --passcode-file, $MESHGATE_PASSCODE


def cli_env(**variables: str) -> dict[str, str]:
    """This process's environment without a MESHGATE_LOGIN or MESHGATE_PASSCODE of its own, and ``variables``."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("MESHGATE_LOGIN", "MESHGATE_PASSCODE")}
    return {**inherited, **variables}


def cli_purge(node, *options: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, list[tuple[str, bool]]]:
    """``meshgate purge`` of a fresh queue with ``options`` in ``env``: its result, and who
    the node's audit says asked for it (user, allowed) — nobody when the login was refused."""
    queue = unique("cli-login")
    assert manage(node.port, Send(destination="/queue/" + queue, body="x"), *ALICE).ok
    result = run_meshgate(["purge", queue, "--stomp", f"{node.host}:{node.port}", *options], env=env)
    events = manage(node.port, Events(kinds=["admin_action"]), *ALICE).result
    return result, [(e.user, e.ok) for e in events if queue in e.target and e.action == "purge"]


def passcode_file(tmp_path, text: str) -> str:
    path = tmp_path / unique("passcode")
    path.write_bytes(text.encode())
    return str(path)


def test_the_cli_logs_in_with_the_login_and_passcode_in_its_environment(node):
    result, audit = cli_purge(node, env=cli_env(MESHGATE_LOGIN=ALICE[0], MESHGATE_PASSCODE=ALICE[1]))
    assert result.returncode == 0 and audit == [("alice", True)], (result.stderr, audit)
    # --login names the user over $MESHGATE_LOGIN; the passcode still comes from the environment.
    result, audit = cli_purge(node, "--login", DAVE[0], env=cli_env(MESHGATE_LOGIN=ALICE[0], MESHGATE_PASSCODE=DAVE[1]))
    assert result.returncode == 1 and "purge needs the admin permission" in result.stderr, result.stderr
    assert audit == [("dave", False)]


def test_a_wrong_passcode_in_the_environment_is_refused_as_on_the_command_line(node):
    right, audit = cli_purge(node, "--login", ALICE[0], env=cli_env(MESHGATE_PASSCODE=ALICE[1]))
    assert right.returncode == 0 and audit == [("alice", True)], (right.stderr, audit)
    in_env, env_audit = cli_purge(node, "--login", ALICE[0], env=cli_env(MESHGATE_PASSCODE="not-" + ALICE[1]))
    on_line, line_audit = cli_purge(node, "--login", ALICE[0], "--passcode", "not-" + ALICE[1], env=cli_env())
    assert in_env.returncode == on_line.returncode == 1, (in_env.stderr, on_line.stderr)
    assert in_env.stderr == on_line.stderr, (in_env.stderr, on_line.stderr)
    assert "access refused for user 'alice': wrong login or passcode" in in_env.stderr, in_env.stderr
    assert env_audit == line_audit == []  # refused at login: nothing was asked


@pytest.mark.parametrize("text", ["alice-secret\n", "alice-secret", "alice-secret\r\n", "alice-secret\nline two\n"],
                         ids=["newline", "no-newline", "crlf", "two-lines"])
def test_the_cli_reads_the_passcode_from_the_first_line_of_a_file(node, tmp_path, text):
    result, audit = cli_purge(node, "--login", ALICE[0], "--passcode-file", passcode_file(tmp_path, text),
                              env=cli_env())
    assert result.returncode == 0 and audit == [("alice", True)], (result.stderr, audit)


def test_a_passcode_file_that_cannot_be_read_is_a_bad_argument(node, tmp_path):
    missing = str(tmp_path / "no-such-passcode")
    for path, words in ((missing, f"--passcode-file: cannot read {missing}: No such file or directory"),
                        (str(tmp_path), f"--passcode-file: cannot read {tmp_path}: Is a directory"),
                        (passcode_file(tmp_path, "\nalice-secret\n"), "is empty")):
        result, audit = cli_purge(node, "--login", ALICE[0], "--passcode-file", path,
                                  env=cli_env(MESHGATE_PASSCODE=ALICE[1]))  # no falling back on the environment
        assert result.returncode == 2 and words in result.stderr, (path, result.stderr)
        assert audit == []


def test_passcode_beats_passcode_file_beats_the_environment(node, tmp_path):
    right, wrong = passcode_file(tmp_path, ALICE[1] + "\n"), passcode_file(tmp_path, "not-" + ALICE[1] + "\n")
    for options, env_passcode, allowed in (
            (["--passcode", ALICE[1], "--passcode-file", wrong], "not-" + ALICE[1], True),
            (["--passcode", "not-" + ALICE[1]], ALICE[1], False),
            (["--passcode-file", right], "not-" + ALICE[1], True),
            (["--passcode-file", wrong], ALICE[1], False)):
        result, audit = cli_purge(node, *options, env=cli_env(MESHGATE_LOGIN=ALICE[0], MESHGATE_PASSCODE=env_passcode))
        if allowed:
            assert result.returncode == 0 and audit == [("alice", True)], (options, result.stderr, audit)
        else:
            assert result.returncode == 1 and audit == [], (options, result.stderr, audit)
