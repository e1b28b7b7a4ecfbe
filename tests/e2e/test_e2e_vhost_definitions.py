"""Vhosts made and deleted by command, mesh-wide (docs/vhosts.md, "Creating and
deleting vhosts"): ``meshgate vhost add`` on one node makes the vhost on every node,
a node that was away gets it when it is back, a restart keeps it; ``vhost delete``
is refused while the vhost holds messages on any node and, with ``--force``,
disconnects its clients (AMQP 320, STOMP ERROR) and drops its messages for good;
``vhost list`` and the queue commands' ``--vhost``."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from amqp_support import AMQP_ON, amqp_port
from e2e_support import HOST, TIMEOUT, manage_result, run_meshgate, unique
from mesh_support import mesh_fixture, wait_until  # noqa: F401  (the fixture)
from vhost_support import VHOSTS, clients_fixture, drain  # noqa: F401  (the fixture)

from model.requests import Connections, VhostList


def cli(port: int, *args: str):
    return run_meshgate([*args, "--stomp", f"{HOST}:{port}"])


def vhosts_of(port: int) -> dict[str, str]:
    """The asked node's vhosts and where each comes from."""
    return {row.name: row.origin for row in manage_result(port, VhostList())}


def opens(process, vhost: str) -> bool:
    """Whether an AMQP client of ``process`` may open ``vhost`` (refused: 530)."""
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            HOST, amqp_port(process), virtual_host=vhost, connection_attempts=1, socket_timeout=TIMEOUT))
    except pika.exceptions.ProbableAccessDeniedError:
        return False
    connection.close()
    return True


def closed_by_broker(connection: pika.BlockingConnection) -> pika.exceptions.ConnectionClosedByBroker:
    """The connection.close the broker sent, awaited."""
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        for _ in range(int(TIMEOUT * 10)):
            connection.process_data_events(time_limit=0.1)
    return closed.value


def test_a_vhost_added_on_one_node_is_on_every_node_and_on_one_that_was_away(mesh):
    a, b, c = mesh(3, sets=[AMQP_ON])
    c.stop()
    name = unique("team")
    assert not opens(b.proc, name)
    added = cli(a.stomp, "vhost", "add", name)
    assert added.returncode == 0 and name in added.stdout, (added.stdout, added.stderr)
    wait_until(lambda: opens(b.proc, name), f"vhost {name} on b", describe=mesh.describe)
    assert vhosts_of(b.stomp) == {"/": "default", name: "definition"}

    c.start()
    mesh.wait_links([(a, c), (b, c)])
    wait_until(lambda: name in vhosts_of(c.stomp), f"vhost {name} on c, which was away", describe=mesh.describe)
    assert opens(c.proc, name)

    listed = cli(c.stomp, "vhost", "list")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines() if line.startswith(name)]
    assert len(rows) == 4 and all(row[1] == "definition" for row in rows[:3]), listed.stdout  # 3 nodes, a total

    b.restart()  # a node's vhosts made by command come back with it
    mesh.wait_links([(a, b), (b, c)])
    assert vhosts_of(b.stomp)[name] == "definition" and opens(b.proc, name)


def test_deleting_a_vhost_is_refused_while_it_holds_messages_and_forced_drops_them_everywhere(mesh, clients):
    a, b = mesh(2, sets=[AMQP_ON])
    name, queue = unique("team"), unique("orders")
    assert cli(a.stomp, "vhost", "add", name).returncode == 0
    wait_until(lambda: opens(b.proc, name), f"vhost {name} on b", describe=mesh.describe)
    for node, bodies in ((a, ["a1", "a2"]), (b, ["b1"])):
        sender = clients.stomp_on(node.proc, name)
        for body in bodies:
            sender.send("/queue/" + queue, body, receipt=True, persistent="true")

    refused = cli(b.stomp, "vhost", "delete", name)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert f"it holds 3 message(s) (2 on {a.name}, 1 on {b.name})" in refused.stderr and "--force" in refused.stderr
    assert name in vhosts_of(a.stomp) and name in vhosts_of(b.stomp)

    amqp_client = clients.pika_on(a.proc, name)
    for _ in range(2):  # a session per channel, one connection.close
        amqp_client.channel().basic_consume(queue, lambda *delivery: None)
    stomp_client = clients.stomp_on(b.proc, name)
    deleted = cli(b.stomp, "vhost", "delete", name, "--force")
    assert deleted.returncode == 0, (deleted.stdout, deleted.stderr)
    closed = closed_by_broker(amqp_client)
    assert (closed.reply_code, closed.reply_text) == (320, "vhost deleted")
    error = stomp_client.listener.wait_error()
    assert "vhost deleted" in error.headers.get("message", "") + error.body
    for node in (a, b):
        wait_until(lambda n=node: not opens(n.proc, name), f"vhost {name} gone from {node}", describe=mesh.describe)

    for node in (a, b):  # gone for good: made again after a restart, the vhost is empty
        node.restart()
    mesh.wait_links([(a, b)])
    assert name not in vhosts_of(a.stomp)
    assert cli(a.stomp, "vhost", "add", name).returncode == 0
    for node in (a, b):
        wait_until(lambda n=node: opens(n.proc, name), f"vhost {name} again on {node}", describe=mesh.describe)
        channel = clients.pika_on(node.proc, name).channel()
        channel.queue_declare(queue, durable=True)  # made anew: nothing of the old one in it
        assert drain(channel, queue) == []


def test_queue_commands_take_a_vhost_and_name_an_unknown_one(broker_factory, clients):
    node = broker_factory(config=VHOSTS, sets=[AMQP_ON])
    queue = unique("orders")
    sent = cli(node.port, "send", "/queue/" + queue, "for team a", "--persistent", "--vhost", "team-a")
    assert sent.returncode == 0, sent.stderr
    listed = cli(node.port, "queues", "--vhost", "team-a")
    assert listed.returncode == 0 and queue in listed.stdout, (listed.stdout, listed.stderr)
    assert queue not in cli(node.port, "queues").stdout  # "/" has no such queue
    browsed = cli(node.port, "browse", queue, "--vhost", "team-a")
    assert browsed.returncode == 0 and "for team a" in browsed.stdout, (browsed.stdout, browsed.stderr)
    not_in_default = cli(node.port, "purge", queue)
    assert not_in_default.returncode == 1 and "no queue" in not_in_default.stderr
    purged = cli(node.port, "purge", queue, "--vhost", "team-a")
    assert purged.returncode == 0 and "1 message" in purged.stdout, (purged.stdout, purged.stderr)
    assert drain(clients.pika_on(node, "team-a").channel(), queue) == []

    unknown = cli(node.port, "queues", "--vhost", "nope")
    assert unknown.returncode == 1 and "no vhost 'nope'" in unknown.stderr, (unknown.stdout, unknown.stderr)
    invalid = cli(node.port, "queues", "--vhost", "bell\x07")
    assert invalid.returncode == 2 and "invalid vhost name" in invalid.stderr, invalid.stderr
    bad_add = cli(node.port, "vhost", "add", "")
    assert bad_add.returncode == 2 and "invalid vhost name" in bad_add.stderr, bad_add.stderr

    listed_before = len(manage_result(node.port, Connections()))
    clients.stomp_on(node, "team-a")
    assert len(manage_result(node.port, Connections())) == listed_before + 1  # a client of any vhost is listed

    configured = cli(node.port, "vhost", "delete", "team-a", "--force")
    assert configured.returncode == 1 and "configuration" in configured.stderr, configured.stderr
    assert vhosts_of(node.port) == {"/": "default", "team-a": "config", "team b/é": "config"}
