"""The management plane against real nodes: the whole mesh seen from any node,
and every admin action done on a remote node through another, with the CLI and
the management client."""

from __future__ import annotations

import json

import pytest
from e2e_support import HOST, manage, manage_result, run_meshgate, unique
from mesh_support import mesh_fixture, send_many, wait_until  # noqa: F401  (the fixture)

from model.requests import (
    ALL,
    Browse,
    Connections,
    DeleteQueue,
    Events,
    Move,
    Nodes,
    Purge,
    Queues,
    Send,
    Summary,
)


def cli(node, *args: str):
    return run_meshgate([*args, "--stomp", f"{HOST}:{node.stomp}"])


def node_id(node) -> str:
    return manage_result(node.stomp, Summary()).node.id


def depths(node, queue: str) -> dict[str, int]:
    """Waiting messages of ``queue`` per node name, asked through ``node``."""
    names = {s.node.id: s.node.name for s in manage_result(node.stomp, Nodes()).nodes}
    return {names[q.node]: q.depth for q in manage_result(node.stomp, Queues(node=ALL, name=queue))}


def test_a_chain_is_seen_whole_and_fresh_from_its_far_end(mesh):
    """a -> b -> c with max_hops = 2 and a consumer on c: asked at once, a's view has c
    and c's queue, and stat --cluster has a line for c."""
    a, b, c = mesh(3, topology="chain", max_hops=2)
    queue = unique("chain")
    consumer = c.client()
    consumer.subscribe("/queue/" + queue)
    wait_until(lambda: any(s.node.name == "C" for s in manage_result(a.stomp, Nodes(fresh=False)).nodes),
               "a to hear of c", describe=mesh.describe)
    nodes = cli(a, "nodes")
    assert nodes.returncode == 0, nodes.stderr
    assert "3 node(s), 3 up, as seen from A" in nodes.stdout
    section = nodes.stdout[nodes.stdout.index("  C ("):]
    assert f"/queue/{queue}: 0 queued, 0 in flight, 1 consumer(s)" in section, nodes.stdout
    assert "answered now" in section
    stat = cli(a, "stat", "--cluster")
    assert stat.returncode == 0, stat.stderr
    lines = [line.split() for line in stat.stdout.splitlines()]
    at = lines.index([f"/queue/{queue}", "0", "1"])
    assert ["C", "0", "1"] in lines[at + 1:at + 4], stat.stdout


def test_every_admin_action_on_a_remote_node_through_another(mesh):
    a, b, c = mesh(3)
    queue = unique("admin")
    send_many(c.client(), "/queue/" + queue, [f"m{i}" for i in range(30)])  # nobody consumes: they stay on c
    assert depths(a, queue) == {"C": 30}

    # browse, paged, on c through a
    page = manage_result(a.stomp, Browse(node="C", queue=queue, offset=10, limit=5, preview=1))
    assert [m.body for m in page[0].messages] == ["m"] * 5 and page[0].total == 30 and page[0].offset == 10
    assert all(m.truncated and m.persistent and m.size == len("m10") for m in page[0].messages)
    browsed = cli(a, "browse", queue, "--node", "C", "--limit", "2")
    assert browsed.returncode == 0 and "'m0'" in browsed.stdout and "'m1'" in browsed.stdout, browsed.stdout

    # move within a node: to another queue
    other = unique("other")
    result = manage_result(a.stomp, Move(node="C", queue=queue, to_queue=other, count=5))
    assert result[0].count == 5
    assert depths(a, other) == {"C": 5}

    # move 10 of c's messages to b, with the CLI
    moved = cli(a, "move", queue, "--node", "C", "--to-node", "B", "--count", "10")
    assert moved.returncode == 0 and "C: moved 10 message(s)" in moved.stdout, (moved.stdout, moved.stderr)
    wait_until(lambda: depths(a, queue) == {"C": 15, "B": 10}, "10 messages on b", describe=mesh.describe)

    # send a test message to b through a
    assert manage_result(a.stomp, Send(node="B", destination="/queue/" + other, body="probe"))[0].count == 1
    assert depths(a, other)["B"] == 1

    # purge everywhere, asked at b
    purged = cli(b, "purge", queue, "--all")
    assert purged.returncode == 0, purged.stderr
    assert "C: purged 15 message(s)" in purged.stdout and "B: purged 10 message(s)" in purged.stdout, purged.stdout
    assert sum(depths(a, queue).values()) == 0

    # delete on b and c through a: gone from both
    for name in ("B", "C"):
        assert manage_result(a.stomp, DeleteQueue(node=name, queue=other))[0].node
    assert depths(a, other) == {}

    # close a connection on c through a
    before = {conn.id for conn in manage_result(a.stomp, Connections(node="C"))}
    victim = c.client()
    (victim_id,) = {conn.id for conn in manage_result(a.stomp, Connections(node="C"))} - before
    closed = cli(a, "close", victim_id, "--reason", "maintenance")
    assert closed.returncode == 0, closed.stderr
    error = victim.listener.wait_error()
    assert "maintenance" in error.headers.get("message", "")

    # every action is in the events, done where it was done
    events = manage_result(a.stomp, Events(node=ALL, kinds=["admin_action"]))
    done = {(e.action, e.node) for e in events if e.ok}
    ids = {name: node_id(n) for name, n in (("A", a), ("B", b), ("C", c))}
    for action, where in (("move", "C"), ("send", "B"), ("purge", "C"), ("delete_queue", "B"),
                          ("close_connection", "C")):
        assert (action, ids[where]) in done, (action, where, done)


def test_a_backlog_moved_to_another_node_is_consumed_there(mesh):
    a, b, c = mesh(3)
    queue = unique("moved")
    sent = send_many(c.client(), "/queue/" + queue, [f"m{i}" for i in range(10)])
    moved = manage_result(a.stomp, Move(node="C", queue=queue, to_node="B"))
    assert moved[0].count == 10
    wait_until(lambda: depths(a, queue).get("B") == 10, "c's backlog on b", describe=mesh.describe)
    assert depths(a, queue).get("C") == 0
    consumer = b.client()
    consumer.subscribe("/queue/" + queue)
    assert sorted(m.body for m in consumer.listener.wait_for(10)) == sorted(sent)
    assert all(m.headers.get("redelivered") != "true" for m in consumer.listener.messages)


def test_actions_name_what_went_wrong(mesh):
    a, b = mesh(2)
    queue = unique("missing")
    reply = manage(a.stomp, Purge(node="B", queue=queue))
    assert not reply.ok and reply.error.code == "not_found" and queue in reply.error.message
    reply = manage(a.stomp, Purge(node="nobody", queue=queue))
    assert reply.error.code == "not_found" and "nobody" in reply.error.message
    send_many(a.client(), "/queue/" + queue, ["x"])
    reply = manage(a.stomp, Move(queue=queue, to_queue=queue))
    assert reply.error.code == "bad_request"
    consumer = a.client()
    consumer.subscribe("/queue/" + queue, ack="client-individual")
    consumer.listener.wait_for(1)
    reply = manage(a.stomp, DeleteQueue(queue=queue))
    assert reply.error.code == "conflict" and "consumer" in reply.error.message
    bad = cli(a, "browse", queue, "--limit", "0")
    assert bad.returncode == 1 and "limit" in bad.stderr
    # a request that is not JSON gets an answer saying so; the node carries on
    client_reply = run_meshgate(["queues", "--stomp", f"{HOST}:{a.stomp}", "--json"])
    assert client_reply.returncode == 0 and json.loads(client_reply.stdout)["ok"] is True


@pytest.mark.slow
def test_a_node_asked_to_scale_down_hands_its_messages_over_and_stops(mesh):
    a, b, c = mesh(3)
    queue = unique("leave")
    sent = send_many(c.client(), "/queue/" + queue, [f"s{i}" for i in range(20)])
    result = cli(a, "scale-down", "--node", "C")
    assert result.returncode == 0 and "scaling down" in result.stdout, result.stderr
    assert c.proc.proc.wait(30) == 0
    wait_until(lambda: sum(depths(a, queue).values()) == 20, "c's messages on a or b", describe=mesh.describe)
    consumer = b.client()
    consumer.subscribe("/queue/" + queue)
    assert sorted(m.body for m in consumer.listener.wait_for(20)) == sorted(sent)
    names = {s.node.name: s.node.state for s in manage_result(a.stomp, Nodes()).nodes}
    assert names.get("C") in (None, "leaving"), names  # it left for good: not shown down


def test_the_view_commands_print_what_each_node_has(mesh):
    a, b = mesh(2)
    queue = unique("views")
    consumer = b.client(headers={"client-id": "watcher"})
    consumer.subscribe("/queue/" + queue, ack="client-individual")
    consumer.subscribe("/topic/" + queue, id="t", headers={"activemq.subscriptionName": "keep"})
    wait_until(lambda: any(q.remote_demand for q in manage_result(a.stomp, Queues(name=queue))),
               "a to know of b's consumer", describe=mesh.describe)  # else the first messages wait, then move
    send_many(a.client(), "/queue/" + queue, ["v1", "v2"])
    for message in consumer.listener.wait_for(2):
        consumer.ack(message)
    queues = cli(a, "queues", queue)
    row = next(line.split() for line in queues.stdout.splitlines() if line.split()[:2] == ["/queue/" + queue, "B"])
    # depth, in-flight, forwarding, in-doubt, consumers, remote, enqueued, acked, fwd-out, fwd-in
    assert row[2:12] == ["0", "0", "0", "0", "1", "0", "2", "2", "0", "2"], queues.stdout
    links = cli(a, "links")
    assert links.returncode == 0 and sum(" up " in line for line in links.stdout.splitlines()) == 2, links.stdout
    subscriptions = cli(a, "subscriptions")
    assert "watcher.keep" in subscriptions.stdout and "durable" in subscriptions.stdout, subscriptions.stdout
    connections = cli(a, "connections", "--node", "B")
    assert "stomp 1.2" in connections.stdout and "anonymous" in connections.stdout, connections.stdout
    events = cli(a, "events", "--kind", "consumer_attached")
    assert f"destination=/queue/{queue}" in events.stdout, events.stdout
    as_json = json.loads(cli(a, "links", "--json").stdout)
    assert as_json["ok"] and {link["state"] for link in as_json["result"]} == {"up"}
