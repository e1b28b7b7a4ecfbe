"""Mesh-wide definitions with real nodes: a durable subscription and queue settings
made on one node reach a node that was stopped at the time once it is back; what
is published anywhere while the subscriber is away waits where it was published
and reaches it, once each, on whichever node it reconnects to; the CLI lists,
refuses and deletes definitions for every node."""

from __future__ import annotations

from e2e_support import HOST, manage_result, run_meshgate, unique
from mesh_support import mesh_fixture, send_many, wait_until  # noqa: F401  (the fixture)

from model.requests import Definitions


def cli(node, *args: str):
    return run_meshgate([*args, "--stomp", f"{HOST}:{node.stomp}"])


def live(node) -> set[tuple[str, str]]:
    return {(r.kind, r.name) for r in manage_result(node.stomp, Definitions()) if not r.deleted}


def test_a_durable_subscriber_gets_what_every_node_kept_for_it_on_a_node_that_was_away(mesh):
    a, b, c = mesh(3)
    c.stop()  # away while the definitions are made
    client_id, topic = unique("app"), "/topic/" + unique("news")
    name, connect_headers, subscribe_headers = client_id + ".feed", {"client-id": client_id}, {
        "activemq.subscriptionName": "feed"}
    reader = a.client(headers=connect_headers)
    reader.subscribe(topic, headers=subscribe_headers)
    reader.disconnect()
    queue = unique("orders")
    defined = cli(b, "define-queue", queue, "--max-delivery-attempts", "3", "--dead-letter-queue", queue + ".dlq")
    assert defined.returncode == 0 and f"defined /queue/{queue}" in defined.stdout, (defined.stdout, defined.stderr)
    wanted = {("durable", name), ("queue", queue)}
    wait_until(lambda: live(a) >= wanted and live(b) >= wanted, "the definitions on a and b", describe=mesh.describe)

    sent = send_many(a.client(), topic, [f"a{i}" for i in range(5)])
    sent += send_many(b.client(), topic, [f"b{i}" for i in range(5)])
    c.start()
    mesh.wait_links([(a, c), (b, c)])
    wait_until(lambda: live(c) >= wanted, "the definitions on c, which was away", describe=mesh.describe)
    listed = cli(c, "definitions")
    assert listed.returncode == 0 and name in listed.stdout and "max_delivery_attempts=3" in listed.stdout, \
        listed.stdout
    sent += send_many(c.client(), topic, [f"c{i}" for i in range(5)])

    back = c.client(headers=connect_headers)  # back, on the node that was away
    back.subscribe(topic, headers=subscribe_headers)
    back.listener.wait_until(lambda: len(back.listener.messages) >= 15, "every message kept for the subscriber")
    bodies = [m.body for m in back.listener.messages]
    assert sorted(bodies) == sorted(sent)
    for node in "abc":  # each node's messages in the order they were published there
        assert [body for body in bodies if body[0] == node] == [f"{node}{i}" for i in range(5)]

    # Not deleted while its subscriber is connected; then deleted on every node.
    refused = cli(a, "undefine", "durable", name)
    assert refused.returncode == 1 and "subscriber" in refused.stderr, (refused.stdout, refused.stderr)
    back.disconnect()
    deleted = cli(a, "undefine", "durable", name)
    assert deleted.returncode == 0, deleted.stderr
    for node in (a, b, c):
        wait_until(lambda n=node: ("durable", name) not in live(n), f"the deletion on {node}", describe=mesh.describe)
    assert len(back.listener.messages) == 15  # nothing came twice
