"""Vhost permissions set by command, mesh-wide (docs/vhosts.md, "Permissions"), seen by
pika and stomp.py on a 2-node mesh with users: ``meshgate vhost permissions`` on A
turns the map on (the first entry: a user without one is refused), lets bob open
team-a on B over AMQP and STOMP with what his patterns grant (403 for the rest),
``vhost permissions team-a`` lists them per node, and ``--clear`` refuses bob's next
connection with 530 on both nodes. Bad options exit 2, asking nothing."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from amqp_support import AMQP_ON, Pika
from e2e_support import HOST, run_meshgate, security_config
from mesh_support import mesh_fixture, wait_until  # noqa: F401  (the fixture)
from stomp_client import ConnectRefused
from vhost_support import TEAM_A, VHOSTS, VhostClients

USERS = {"alice": ["admins"], "bob": ["team"]}
SECRETS = {"alice": "alice-secret", "bob": "bob-secret"}
DENIED = f'ConnectionClosedByBroker: (530) "access to vhost \'{TEAM_A}\' refused for user \'bob\'"'


def cli(port: int, *args: str):
    return run_meshgate([*args, "--stomp", f"{HOST}:{port}", "--login", "alice", "--passcode", SECRETS["alice"]])


@pytest.fixture
def clients():
    amqp, stomp = Pika(), VhostClients()
    yield amqp, stomp
    amqp.close_all()
    stomp.close_all()


def bob_refused(amqp: Pika, node) -> str | None:
    """Why bob's new AMQP connection to team-a on ``node`` was refused; None: it opened."""
    try:
        amqp(node.proc, "bob", SECRETS["bob"], virtual_host=TEAM_A)
    except pika.exceptions.ProbableAccessDeniedError as error:
        return str(error)
    return None


def test_permissions_set_on_one_node_let_bob_in_on_another_and_clearing_them_shuts_him_out(mesh, hashes, clients):
    amqp, stomp = clients
    a, b = mesh(2, extra="\n" + security_config(hashes, USERS) + VHOSTS, sets=[AMQP_ON])
    assert bob_refused(amqp, b) is None  # no vhost permissions yet: every user opens every vhost

    alice = cli(a.stomp, "vhost", "permissions", "/", "--user", "alice", "--configure", ".*", "--write", ".*",
                "--read", ".*")
    assert alice.returncode == 0 and "NOW ON" in alice.stdout, (alice.stdout, alice.stderr)  # said loudly
    wait_until(lambda: bob_refused(amqp, b) == DENIED, "bob refused on b once the map is on",
               describe=mesh.describe)

    granted = cli(a.stomp, "vhost", "permissions", TEAM_A, "--user", "bob", "--configure", r"^bob\.",
                  "--write", r"^(amq\.default|bob\..*)$", "--read", r"^bob\.")
    assert granted.returncode == 0, (granted.stdout, granted.stderr)
    wait_until(lambda: bob_refused(amqp, b) is None, "bob let into team-a on b", describe=mesh.describe)
    channel = amqp(b.proc, "bob", SECRETS["bob"], virtual_host=TEAM_A).channel()
    channel.queue_declare("bob.q")
    channel.basic_publish("", "bob.q", b"hello")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare("other.q")  # what the regexes do not grant
    assert closed.value.reply_code == 403 and "queue 'other.q' in vhost 'team-a' refused" in closed.value.reply_text
    assert stomp.stomp_on(b.proc, TEAM_A, {"login": "bob", "passcode": SECRETS["bob"]}).connected_frame is not None

    listed = cli(b.stomp, "vhost", "permissions", TEAM_A)
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if "user bob" in line]
    assert len(rows) == 2 and all("command" in row for row in rows), listed.stdout  # one per node

    cleared = cli(a.stomp, "vhost", "permissions", TEAM_A, "--user", "bob", "--clear")
    assert cleared.returncode == 0, (cleared.stdout, cleared.stderr)
    for node in (b, a):
        wait_until(lambda node=node: bob_refused(amqp, node) == DENIED, f"bob refused again on {node!r}",
                   describe=mesh.describe)
        with pytest.raises(ConnectRefused) as denied:
            stomp.stomp_on(node.proc, TEAM_A, {"login": "bob", "passcode": SECRETS["bob"]})
        assert denied.value.frame.headers["message"] == f"access to vhost '{TEAM_A}' refused for user 'bob'"


@pytest.mark.parametrize(("args", "says"), [
    (("--user", "bob", "--configure", "(", "--write", "", "--read", ""), "not a valid regular expression"),
    (("--user", "bob", "--group", "g", "--configure", "", "--write", "", "--read", ""), "not allowed with"),
    (("--user", "bob", "--configure", ".*"), "give --configure, --write and --read"),
    (("--user", "bob", "--clear", "--read", ".*"), "--clear takes no pattern"),
    (("--configure", ".*", "--write", ".*", "--read", ".*"), "needs --user or --group"),
    (("--user", "b\x07ob", "--clear"), "invalid user name"),
])
def test_bad_permission_options_exit_2_asking_nothing(args, says):
    done = run_meshgate(["vhost", "permissions", TEAM_A, *args, "--stomp", f"{HOST}:1"])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert says in done.stderr, done.stderr
