"""The mesh carries every vhost, each inside itself: a message of team-a sent on one
node reaches team-a's consumers on another, never a queue or topic of the same name
in "/" or team-b; a backlog follows consumers inside its vhost across three nodes;
AMQP clients see the same; and a receiver killed with -9 while a vhost's messages
cross loses none of them."""

from __future__ import annotations

import time

import pika
from amqp_support import AMQP_ON
from e2e_support import manage_result, unique
from mesh_support import QUIET, mesh_fixture, send_many, wait_until  # noqa: F401
from vhost_support import TEAM_A, TEAM_B, VHOSTS, clients_fixture  # noqa: F401  (the fixture)

from model.definitions import DURABLE_SUBSCRIPTION
from model.requests import Definitions


def test_a_vhosts_queue_message_crosses_to_that_vhosts_consumer_alone(mesh, clients):
    a, b = mesh(2, extra="\n" + VHOSTS)
    queue, topic = "/queue/" + unique("orders"), "/topic/" + unique("news")
    far = {host: clients.stomp_on(b.proc, host) for host in (TEAM_A, TEAM_B, "/")}
    for client in far.values():
        client.subscribe(queue)
        client.subscribe(topic)
    near = {host: clients.stomp_on(a.proc, host) for host in (TEAM_A, TEAM_B, "/")}
    for n in range(5):
        near[TEAM_A].send(queue, f"a{n}", receipt=True)
    far[TEAM_A].listener.wait_until(lambda: len(far[TEAM_A].listener.bodies()) == 5, "team-a's five messages")
    assert far[TEAM_A].listener.bodies() == [f"a{n}" for n in range(5)]
    # Topics: a publication reaches the subscribers of its vhost on the other node.
    wait_until(lambda: _published(near[TEAM_A], topic, far[TEAM_A]), "a team-a publication to cross", interval=0.2)
    for host in (TEAM_B, "/"):  # each vhost's own traffic crosses too, and nothing of team-a came with it
        fence = unique("fence")
        near[host].send(queue, fence, receipt=True)
        far[host].listener.wait_for_body(fence)
        time.sleep(QUIET)
        assert [body for body in far[host].listener.bodies() if not body.startswith("probe")] == [fence]


def _published(producer, topic: str, consumer) -> bool:
    body = unique("probe")
    producer.send(topic, body)
    return any(m.body.startswith("probe") for m in consumer.listener.messages)


def test_a_backlog_follows_consumers_inside_its_vhost_across_three_nodes(mesh, clients):
    a, b, c = mesh(3, topology="chain", max_hops=2, extra="\n" + VHOSTS)  # a - b - c: c's demand reaches a via b
    queue = "/queue/" + unique("backlog")
    producer = clients.stomp_on(a.proc, TEAM_A)
    send_many(producer, queue, [f"m{n}" for n in range(20)])
    other = clients.stomp_on(c.proc, TEAM_B)
    other.subscribe(queue)
    consumer = clients.stomp_on(c.proc, TEAM_A)
    consumer.subscribe(queue)
    consumer.listener.wait_until(lambda: len(consumer.listener.bodies()) == 20, "the backlog at c")
    assert consumer.listener.bodies() == [f"m{n}" for n in range(20)]
    fence = unique("fence")
    clients.stomp_on(a.proc, TEAM_B).send(queue, fence, receipt=True)
    other.listener.wait_for_body(fence)
    assert other.listener.bodies() == [fence]


def test_a_vhosts_durable_subscriber_gets_what_every_node_kept_for_it_inside_its_vhost(mesh, clients):
    a, b, c = mesh(3, extra="\n" + VHOSTS)
    client_id, topic = unique("app"), "/topic/" + unique("news")
    connect, subscribe = {"client-id": client_id}, {"activemq.subscriptionName": "feed"}
    reader = clients.stomp_on(a.proc, TEAM_A, connect)
    reader.subscribe(topic, headers=subscribe)
    reader.disconnect()
    # The same client id and name in team-b: another subscription, which keeps nothing of team-a's.
    other = clients.stomp_on(b.proc, TEAM_B, connect)
    other.subscribe(topic, headers=subscribe)
    other.disconnect()
    name = client_id + ".feed"
    for node in (a, b, c):  # a message published where the subscription is not known yet goes to nobody
        wait_until(lambda node=node: name in _durables(node, TEAM_A), f"team-a's subscription known on {node.name}")
    sent = []
    for node in (a, b, c):
        sent += send_many(clients.stomp_on(node.proc, TEAM_A), topic, [f"{node.name}{n}" for n in range(3)])
    clients.stomp_on(a.proc, TEAM_B).send(topic, "team-b's", receipt=True)
    back = clients.stomp_on(c.proc, TEAM_A, connect)
    back.subscribe(topic, headers=subscribe)
    back.listener.wait_until(lambda: set(back.listener.bodies()) >= set(sent), "every message kept for the reader")
    assert sorted(back.listener.bodies()) == sorted(sent)
    team_b = clients.stomp_on(a.proc, TEAM_B, connect)
    team_b.subscribe(topic, headers=subscribe)
    assert team_b.listener.wait_for_body("team-b's") and team_b.listener.bodies() == ["team-b's"]


def _durables(node, vhost: str) -> set[str]:
    return {r.name for r in manage_result(node.stomp, Definitions(vhost=vhost)) if r.kind == DURABLE_SUBSCRIPTION
            and not r.deleted}


def test_amqp_clients_of_one_vhost_meet_across_the_mesh(mesh, clients):
    a, b = mesh(2, extra="\n" + VHOSTS, sets=[AMQP_ON])
    queue = unique("jobs")
    consumer = clients.pika_on(b.proc, TEAM_A).channel()
    consumer.queue_declare(queue, durable=True)
    stranger = clients.pika_on(b.proc, TEAM_B).channel()
    stranger.queue_declare(queue, durable=True)
    got: list[bytes] = []
    consumer.basic_consume(queue, lambda ch, method, props, body: got.append(body), auto_ack=True)
    producer = clients.pika_on(a.proc, TEAM_A).channel()
    producer.confirm_delivery()
    for n in range(5):
        producer.basic_publish("", queue, f"j{n}".encode(), pika.BasicProperties(delivery_mode=2))
    deadline = time.monotonic() + 15
    while len(got) < 5 and time.monotonic() < deadline:
        consumer.connection.process_data_events(time_limit=0.1)
    assert got == [f"j{n}".encode() for n in range(5)]
    assert stranger.basic_get(queue, auto_ack=True)[0] is None


def test_a_receiver_killed_while_a_vhosts_messages_cross_loses_none(mesh, clients):
    a, b = mesh(2, extra="\n" + VHOSTS)
    queue = "/queue/" + unique("custody")
    receiver = clients.stomp_on(b.proc, TEAM_A)
    receiver.subscribe(queue, ack="client-individual")  # never acked: each waits at b, stored
    producer = clients.stomp_on(a.proc, TEAM_A)
    sent = send_many(producer, queue, [f"k{n}" for n in range(300)], receipts=False)
    receiver.listener.wait_until(lambda: len(receiver.listener.messages) >= 20, "the first messages at b")
    b.kill9()
    producer.send(queue, "fence", receipt=True)
    b.restart(graceful=False)
    a.wait_linked(b, count=2)
    late = clients.stomp_on(b.proc, TEAM_A)
    late.subscribe(queue)
    received = lambda: {m.body for m in late.listener.messages}  # noqa: E731
    wait_until(lambda: received() >= {*sent, "fence"}, "every message at b after its restart", timeout=60,
               describe=lambda: f"lost so far: {sorted(set(sent) - received())[:10]}")
    deliveries = [(m.body, m.headers.get("redelivered") == "true") for m in late.listener.messages]
    seen: set[str] = set()
    for body, redelivered in deliveries:
        assert body not in seen or redelivered, f"{body} delivered twice, the second time not marked redelivered"
        seen.add(body)
    # "/" has none of them.
    default = clients.stomp_on(b.proc, "/")
    default.subscribe(queue)
    default.send(queue, "default fence", receipt=True)
    assert default.listener.wait_for_body("default fence") and default.listener.bodies() == ["default fence"]
