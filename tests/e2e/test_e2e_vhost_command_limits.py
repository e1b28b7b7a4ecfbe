"""Limits of vhosts made by command, mesh-wide (docs/vhosts.md, "Limits"): set by
``meshgate vhost add --max-connections`` on one node they hold on another, changed by
``meshgate vhost limits`` they apply at once without a restart (a lowered limit
closes no connection), ``vhost list`` shows them, and bad values exit 2."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from amqp_support import AMQP_ON, amqp_port
from e2e_support import HOST, TIMEOUT, manage_result, run_meshgate, unique
from mesh_support import mesh_fixture, wait_until  # noqa: F401  (the fixture)

from model.requests import VhostList


def cli(port: int, *args: str):
    return run_meshgate([*args, "--stomp", f"{HOST}:{port}"])


def connect(process, vhost: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        HOST, amqp_port(process), virtual_host=vhost, connection_attempts=1, socket_timeout=TIMEOUT))


def refused(process, vhost: str) -> str | None:
    """The refusal of a new AMQP connection to ``vhost`` (None: it opened, and is closed again)."""
    try:
        connect(process, vhost).close()
    except pika.exceptions.ProbableAccessDeniedError as error:
        return str(error)
    return None


def limits_on(port: int, vhost: str) -> tuple[int | None, int | None, int | None]:
    row = next(row for row in manage_result(port, VhostList()) if row.name == vhost)
    return row.max_connections, row.max_queues, row.max_messages


def test_a_limit_set_on_one_node_holds_on_another_and_a_change_applies_at_once(mesh):
    a, b = mesh(2, sets=[AMQP_ON])
    name = unique("team")
    added = cli(a.stomp, "vhost", "add", name, "--max-connections", "1", "--max-queues", "5")
    assert added.returncode == 0, (added.stdout, added.stderr)
    wait_until(lambda: name in {row.name for row in manage_result(b.stomp, VhostList())}, f"vhost {name} on b",
               describe=mesh.describe)
    assert limits_on(b.stomp, name) == (1, 5, None)

    held = connect(b.proc, name)
    assert refused(b.proc, name) == (f'ConnectionClosedByBroker: (530) "connection limit (1) of vhost '
                                     f'\'{name}\' is reached"')

    raised = cli(a.stomp, "vhost", "limits", name, "--max-connections", "2")
    assert raised.returncode == 0, (raised.stdout, raised.stderr)
    wait_until(lambda: limits_on(b.stomp, name) == (2, 5, None), "the raised limit on b", describe=mesh.describe)
    assert refused(b.proc, name) is None  # one held, one more may open: no restart

    lowered = cli(a.stomp, "vhost", "limits", name, "--max-connections", "0", "--max-queues", "none")
    assert lowered.returncode == 0, (lowered.stdout, lowered.stderr)
    wait_until(lambda: limits_on(b.stomp, name) == (0, None, None), "the lowered limit on b", describe=mesh.describe)
    assert refused(b.proc, name) is not None
    held.channel().queue_declare("still-open")  # a lowered limit closes no connection (RabbitMQ's rule)
    held.close()

    listed = cli(b.stomp, "vhost", "list")
    assert listed.returncode == 0 and "max_connections=0" in listed.stdout, listed.stdout


@pytest.mark.parametrize("args", [
    ("vhost", "add", "v", "--max-connections", "-1"),
    ("vhost", "add", "v", "--max-queues", "none"),  # no limit is said by leaving it out
    ("vhost", "add", "v", "--max-messages", "1.5"),
    ("vhost", "limits", "v", "--max-connections", "lots"),
    ("vhost", "limits", "v", "--max-queues", str(2**31)),
])
def test_bad_limits_exit_2_asking_nothing(args):
    done = run_meshgate([*args, "--stomp", f"{HOST}:1"])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "expected a count" in done.stderr or "invalid" in done.stderr, done.stderr


def test_limits_of_a_vhost_not_made_by_command_are_refused(mesh):
    (a,) = mesh(1, sets=[AMQP_ON])
    missing = cli(a.stomp, "vhost", "limits", unique("nobody"), "--max-connections", "1")
    assert missing.returncode != 0 and "no vhost" in (missing.stdout + missing.stderr)
    default = cli(a.stomp, "vhost", "limits", "/", "--max-connections", "1")
    assert default.returncode != 0 and "configuration" in (default.stdout + default.stderr)
