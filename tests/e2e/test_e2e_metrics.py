"""Every node's snapshots and events in Redis streams (a real redis-server), and
the broker carrying on when Redis goes away."""

from __future__ import annotations

import statistics
import time

import msgspec
import redis
from e2e_support import manage, manage_result, unique
from mesh_support import mesh_fixture, send_many, wait_until  # noqa: F401  (the fixture)
from vhost_support import TEAM_A, VHOSTS, VhostClients

from model.events import AnyEvent
from model.mesh import Snapshot
from model.requests import Nodes, Purge, Summary

INTERVAL_MS = 200


def metrics_sets(redis_server, interval_ms: int = INTERVAL_MS, *more: str) -> list[str]:
    return [f"metrics.redis_url={redis_server.url}", f"metrics.interval_ms={interval_ms}", *more]


def snapshots(client: redis.Redis, node_id: str | None = None) -> list[tuple[dict, Snapshot]]:
    entries = []
    for _, fields in client.xrange("meshgate:snapshots"):
        if node_id is None or fields[b"node"].decode() == node_id:
            entries.append((fields, msgspec.json.decode(fields[b"data"], type=Snapshot)))
    return entries


def events(client: redis.Redis, kind: str) -> list:
    return [msgspec.json.decode(fields[b"data"], type=AnyEvent) for _, fields in client.xrange("meshgate:events")
            if fields[b"kind"].decode() == kind]


def test_snapshots_come_at_the_interval_with_the_counts_of_what_was_done(broker_factory, redis_server, connect):
    broker = broker_factory(sets=metrics_sets(redis_server))
    node_id = manage_result(broker.port, Summary()).node.id
    queue = unique("counted")
    producer = connect(broker)
    for i in range(20):
        producer.send("/queue/" + queue, f"m{i}", headers={"persistent": "true"}, receipt=True)
    consumer = connect(broker)
    consumer.subscribe("/queue/" + queue, ack="client-individual", headers={"activemq.prefetchSize": "15"})
    for message in consumer.listener.wait_for(15):
        consumer.ack(message)
    client = redis.Redis.from_url(redis_server.url)

    def counted():
        for _, snapshot in reversed(snapshots(client, node_id)):
            for partial in snapshot.queues:
                if partial.name == queue:
                    return partial
        return None

    wait_until(lambda: (counted() or Snapshot).acked == 15 if counted() else False, "a snapshot with 15 acks")
    partial = counted()
    assert (partial.enqueued, partial.acked, partial.depth + partial.in_flight) == (20, 15, 5)
    assert sum(partial.latency) == 15 and partial.consumers == 1
    entries = snapshots(client, node_id)
    fields, last = entries[-1]
    assert fields[b"schema"] == b"1" and int(fields[b"seq"]) == last.seq and last.node.id == node_id
    assert [s.seq for _, s in entries] == list(range(entries[0][1].seq, last.seq + 1))  # none missing
    gaps = [b.taken_at - a.taken_at for (_, a), (_, b) in zip(entries, entries[1:], strict=False)]
    assert 0.15 <= statistics.median(gaps) <= 0.4, gaps
    assert last.node.metrics.state == "ok" and last.node.metrics.dropped == 0


def test_events_for_redistribution_dead_letters_admin_actions_and_a_lost_link(mesh, redis_server):
    a, b = mesh(2, sets=metrics_sets(redis_server, 200, "broker.max_delivery_attempts=1"))
    ids = {node.name: manage_result(node.stomp, Summary()).node.id for node in (a, b)}
    queue = unique("events")
    send_many(a.client(), "/queue/" + queue, [f"r{i}" for i in range(10)])
    consumer = b.client()
    consumer.subscribe("/queue/" + queue)
    consumer.listener.wait_for(10)
    client = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: sum(e.count for e in events(client, "redistribution") if e.queue == queue) == 10,
               "redistribution events covering 10 messages", describe=mesh.describe)
    moves = [e for e in events(client, "redistribution") if e.queue == queue]
    assert {(e.node, e.source, e.target) for e in moves} == {(ids["A"], ids["A"], ids["B"])}

    poison = unique("poison")
    nacker = a.client()
    nacker.subscribe("/queue/" + poison, ack="client-individual")
    send_many(a.client(), "/queue/" + poison, ["bad"])
    nacker.nack(nacker.listener.wait_for(1)[0])
    wait_until(lambda: any(e.queue == poison for e in events(client, "dead_letter")), "a dead_letter event")
    (dead,) = [e for e in events(client, "dead_letter") if e.queue == poison]
    assert (dead.count, dead.reason, dead.dead_letter_queue) == (1, "max-delivery-attempts", "DLQ")

    assert manage(a.stomp, Purge(node="B", queue=queue)).ok
    wait_until(lambda: any(e.target == "/queue/" + queue for e in events(client, "admin_action")),
               "an admin_action event")
    (purge,) = [e for e in events(client, "admin_action") if e.target == "/queue/" + queue]
    assert purge.node == ids["B"] and purge.action == "purge" and purge.ok and purge.user == "anonymous"

    b.kill9()
    wait_until(lambda: any(e.node == ids["A"] and e.peer == ids["B"] for e in events(client, "link_down")),
               "a link_down event from a", describe=mesh.describe)
    (down,) = [e for e in events(client, "link_down") if e.node == ids["A"]]
    assert down.reason and down.peer_name == "B"


def _rate(client, destination: str, seconds: float) -> float:
    """Persistent sends per second, each batch waiting for its receipts (a fresh
    client each time: stomp.py's receipt list slows a long-lived one down)."""
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        sent += len(send_many(client, destination, [f"x{sent + i}" for i in range(100)]))
    return sent / (time.monotonic() - start)


def test_redis_killed_under_load_costs_the_broker_nothing_and_publishing_resumes(broker_factory, redis_server,
                                                                                    connect):
    broker = broker_factory(sets=metrics_sets(redis_server, 100, "metrics.buffer=10"))
    destination = "/queue/" + unique("load")
    up = _rate(connect(broker), destination, 2.0)
    redis_server.kill()
    down = _rate(connect(broker), destination, 2.0)
    status = manage_result(broker.port, Nodes(fresh=False)).nodes[0].node.metrics
    assert status.state == "behind" and status.buffered <= 10 and status.dropped > 0, status
    assert status.last_error
    assert down >= 0.5 * up, (up, down)  # a timed check with a wide margin; bench/metrics_overhead.sh measures it
    dropped = status.dropped

    redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: len(snapshots(client)) >= 3, "snapshots written again once Redis is back")
    wait_until(lambda: manage_result(broker.port, Nodes(fresh=False)).nodes[0].node.metrics.state == "ok",
               "the node to say it is no longer behind")
    latest = snapshots(client)[-1][1]
    assert latest.node.metrics.dropped >= dropped
    assert broker.running


def test_every_vhosts_partial_queues_are_in_the_snapshots_with_their_vhost(broker_factory, redis_server, connect):
    broker = broker_factory(config=VHOSTS, sets=metrics_sets(redis_server))
    queue = unique("orders")
    clients = VhostClients()
    try:
        send_many(connect(broker), "/queue/" + queue, ["m0"])
        send_many(clients.stomp_on(broker, TEAM_A), "/queue/" + queue, ["t0", "t1"])  # one queue name, two vhosts
        client = redis.Redis.from_url(redis_server.url)
        wait_until(lambda: {(p.vhost, p.depth) for _, s in snapshots(client)[-1:] for p in s.queues
                            if p.name == queue} == {("/", 1), (TEAM_A, 2)}, "both vhosts' partial queues in a snapshot")
    finally:
        clients.close_all()
    fields, _ = snapshots(client)[-1]
    raw = [partial for partial in msgspec.json.decode(fields[b"data"])["queues"] if partial["name"] == queue]
    assert sorted(partial.get("vhost", "-") for partial in raw) == ["-", TEAM_A]  # "/" left out, as before


def test_a_vhosts_queues_and_events_name_it_and_the_default_vhosts_stay_as_they_were(broker_factory, redis_server,
                                                                                      connect):
    broker = broker_factory(config=VHOSTS, sets=metrics_sets(redis_server, 200, "broker.max_delivery_attempts=1"))
    queue = unique("orders")
    clients = VhostClients()
    try:
        for consumer in (connect(broker), clients.stomp_on(broker, TEAM_A)):  # one queue name in two vhosts
            consumer.subscribe("/queue/" + queue, ack="client-individual")
            send_many(consumer, "/queue/" + queue, ["bad"])
            consumer.nack(consumer.listener.wait_for(1)[0])
        client = redis.Redis.from_url(redis_server.url)
        wait_until(lambda: len([e for e in events(client, "dead_letter") if e.queue == queue]) == 2,
                   "a dead_letter event per vhost")
    finally:
        clients.close_all()
    dead = {e.vhost: e for e in events(client, "dead_letter") if e.queue == queue}
    assert set(dead) == {"/", TEAM_A} and all(e.count == 1 for e in dead.values())
    attached = {e.vhost for e in events(client, "consumer_attached") if e.destination == "/queue/" + queue}
    assert attached == {"/", TEAM_A}
    raw = [msgspec.json.decode(fields[b"data"]) for _, fields in client.xrange("meshgate:events")
           if fields[b"kind"] == b"dead_letter"]
    assert sorted(entry.get("vhost", "-") for entry in raw if entry["queue"] == queue) == ["-", TEAM_A]  # "/" left out
    wait_until(lambda: {(p.vhost, p.dead_lettered) for _, s in snapshots(client)[-1:] for p in s.queues
                        if p.name == queue} == {("/", 1), (TEAM_A, 1)}, "both vhosts' partial queues in a snapshot")
