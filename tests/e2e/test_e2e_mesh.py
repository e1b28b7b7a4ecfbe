"""End-to-end tests of the mesh: real ``meshgate broker`` processes on loopback, linked
by static connectors or multicast discovery, with stomp.py clients on each node.

Positive checks wait (bounded) for what must arrive; negative checks ("stays on A")
run a short quiet period after a fence and then prove it by draining the node the
messages must still be on: a queue is FIFO, so whatever is left there arrives before
a fence sent through the same node."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from e2e_support import unique
from mesh_support import QUIET, drain, mesh_fixture, send_many, wait_until  # noqa: F401

N = 50


def bodies_of(messages) -> list[str]:
    return [m.body for m in messages]


def dupes(bodies) -> dict[str, int]:
    return {body: count for body, count in Counter(bodies).items() if count > 1}


def besides_fence(consumer, fence: str) -> list[str]:
    """What ``consumer`` received so far, the fence left out."""
    return [body for body in consumer.listener.bodies() if body != fence]


# ---------------------------------------------------------------------------------------
# 1. Two nodes, static link
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("both_ways", [False, True], ids=["one-side-lists", "both-list-each-other"])
def test_two_nodes_static_forward_exactly_once(mesh, both_ways):
    a, b = mesh(2, both_ways=both_ways)
    q = "/queue/" + unique("two")
    consumer = b.subscriber(q)
    producer = a.client()
    sent = send_many(producer, q, [f"m{i:03d}" for i in range(200)], persistent=True)
    consumer.listener.wait_for(200, timeout=30)
    # A fence sent after the 200 through the same path: late duplicates would come before it.
    fence = unique("fence")
    producer.send(q, fence, receipt=True)
    got = [body for body in bodies_of(consumer.listener.wait_for_body(fence)) if body != fence]
    assert not dupes(got), f"duplicates at B: {dupes(got)}"
    assert sorted(got) == sorted(sent), f"missing at B: {sorted(set(sent) - set(got))[:20]}"
    assert got == sent, "one producer, one link, one consumer: order should be kept"
    for message in consumer.messages[:200]:
        assert message.headers.get("persistent") == "true", message.headers
        assert message.headers.get("redelivered", "false") != "true", message.headers
    consumer.disconnect()
    left = drain(a, q)
    assert left == [], f"messages left on A after B consumed them all: {bodies_of(left)[:20]}"


# ---------------------------------------------------------------------------------------
# 2. Three nodes found by multicast discovery only
# ---------------------------------------------------------------------------------------


def test_three_nodes_discovery_only(mesh):
    a, b, c = mesh(3, discovery=True)
    for node in (a, b, c):
        assert "static = []" in node.config
    q = "/queue/" + unique("disc")
    consumer = c.subscriber(q)
    sent = send_many(a.client(), q, [f"d{i}" for i in range(N)])
    got = bodies_of(consumer.listener.wait_for(N, timeout=20))
    assert sorted(got) == sorted(sent) and not dupes(got)
    consumer.disconnect()
    assert drain(a, q) == []


# ---------------------------------------------------------------------------------------
# 3. Chain A - B - C and max_hops
# ---------------------------------------------------------------------------------------


def test_chain_max_hops_2_reaches_the_far_end(mesh):
    a, b, c = mesh(3, "chain", max_hops=2)
    q = "/queue/" + unique("chain2")
    consumer = c.subscriber(q)
    sent = send_many(a.client(), q, [f"c{i}" for i in range(N)])
    got = bodies_of(consumer.listener.wait_for(N, timeout=20))
    assert sorted(got) == sorted(sent) and not dupes(got), f"dupes {dupes(got)}"
    consumer.disconnect()
    assert drain(a, q) == [] and drain(b, q) == []


def test_chain_max_hops_1_does_not_reach_the_far_end(mesh):
    a, b, c = mesh(3, "chain", max_hops=1)
    q = "/queue/" + unique("chain1")
    consumer = c.subscriber(q)
    # Fence: C's demand has reached B (one hop), and B forwards to C.
    fence = b.fence(q, consumer, "fenceB")
    sent = send_many(a.client(), q, [f"h{i}" for i in range(N)])
    time.sleep(QUIET)  # the negative check: nothing of A's may reach C (two hops)
    crossed = besides_fence(consumer, fence)
    assert crossed == [], f"with max_hops=1, C received {len(crossed)} messages sent on A: {crossed[:10]}"
    consumer.disconnect()
    left = bodies_of(drain(a, q))
    assert left == sent, f"A should still hold all {N} messages; a late consumer on A got {len(left)}: {left[:10]}"


@pytest.mark.parametrize("layout", ["chain", "ring", "hub"])
def test_explicit_topologies_with_direct_connections_only_deliver_everything(mesh, layout):
    """allow_direct_connections_only limits whom a node dials, not what crosses its
    links: demand and messages still travel the whole explicit topology."""
    n, edges, hops, source, target = {
        "chain": (3, "chain", 2, 0, 2),  # a -> b -> c, the consumer at the far end
        "ring": (4, "ring", 3, 0, 2),  # the consumer opposite the producer
        "hub": (4, [(1, 0), (2, 0), (3, 0)], 2, 1, 3),  # spokes dial the hub; spoke to spoke
    }[layout]
    nodes = mesh(n, edges, max_hops=hops, extra="allow_direct_connections_only = true")
    q = "/queue/" + unique("direct-" + layout)
    consumer = nodes[target].subscriber(q)
    sent = send_many(nodes[source].client(), q, [f"d{i}" for i in range(51)])
    got = bodies_of(consumer.listener.wait_for(len(sent), timeout=20))
    assert sorted(got) == sorted(sent) and not dupes(got), f"dupes {dupes(got)}"
    consumer.disconnect()
    assert drain(nodes[source], q) == []


# ---------------------------------------------------------------------------------------
# 4. Ring of four, max_hops 3
# ---------------------------------------------------------------------------------------


def test_ring_topic_one_copy_per_subscriber(mesh):
    nodes = mesh(4, "ring", max_hops=3)
    topic = "/topic/" + unique("ring")
    subscribers = [node.subscriber(topic) for node in nodes]
    publisher = nodes[0].client()

    # Warm-up until a message published on A reaches every subscriber (topic demand has
    # propagated round the ring); topic messages published before that are simply dropped.
    warmups = []
    deadline = time.monotonic() + 15
    while not all(any(b.startswith("warm") for b in s.listener.bodies()) for s in subscribers):
        assert time.monotonic() < deadline, "topic demand never reached A from every node: " + "; ".join(
            f"{n.name}: {s.listener.bodies()}" for n, s in zip(nodes, subscribers, strict=True))
        body = f"warm{len(warmups)}"
        warmups.append(body)
        publisher.send(topic, body, receipt=True)
        time.sleep(0.2)
    time.sleep(0.5)  # let demand over the long way round settle too

    sent = []
    for i in range(20):
        body = f"t{i:02d}-{'p' if i % 2 else 'np'}"
        headers = {"persistent": "true"} if i % 2 else {}
        publisher.send(topic, body, receipt=True, headers=headers)
        sent.append(body)
    fence = unique("fence")
    publisher.send(topic, fence, receipt=True)
    for sub in subscribers:
        sub.listener.wait_for_body(fence, timeout=15)
    time.sleep(QUIET)  # late extra copies (the long way round the ring) would arrive now

    problems = []
    for node, sub in zip(nodes, subscribers, strict=True):
        bodies = sub.listener.bodies()
        counts = Counter(bodies)
        missing = [b for b in sent if counts[b] == 0]
        extra = {b: c for b, c in counts.items() if c > 1}
        if missing or extra:
            problems.append(f"{node.name}: missing {missing}, copies {extra}")
    assert not problems, "each subscriber must get exactly one copy of each message:\n" + "\n".join(problems)


def test_ring_queue_consumed_exactly_once(mesh):
    nodes = mesh(4, "ring", max_hops=3)
    q = "/queue/" + unique("ringq")
    consumers = [node.subscriber(q) for node in nodes]
    sent = send_many(nodes[0].client(), q, [f"r{i:03d}" for i in range(100)])

    def total():
        return sum(len(c.listener.messages) for c in consumers)

    wait_until(lambda: total() >= len(sent), f"{len(sent)} messages in total", timeout=20,
               describe=lambda: f"got {total()}")
    time.sleep(QUIET)
    got = [body for c in consumers for body in c.listener.bodies()]
    per_node = {n.name: len(c.messages) for n, c in zip(nodes, consumers, strict=True)}
    assert not dupes(got), f"consumed more than once: {dupes(got)}; per node {per_node}"
    assert sorted(got) == sorted(sent), f"per node {per_node}"


# ---------------------------------------------------------------------------------------
# 5. The consumer moves from B to C
# ---------------------------------------------------------------------------------------


def test_consumer_moves_and_the_rest_follows(mesh):
    a, b, c = mesh(3)
    q = "/queue/" + unique("move")
    first = b.subscriber(q, ack="client-individual", headers={"activemq.prefetchSize": "5"})
    sent = send_many(a.client(), q, [f"v{i:03d}" for i in range(100)])
    acked = []
    for i in range(30):  # ack as they come: only 5 may be unacknowledged at a time
        message = first.listener.wait_for(i + 1, timeout=20)[i]
        first.ack(message, receipt=(i == 29))
        acked.append(message.body)
    first.disconnect()  # what B still holds (queued or unacked) must now move on to C

    second = c.subscriber(q)
    rest = len(sent) - len(acked)
    second.listener.wait_for(rest, timeout=20)
    time.sleep(QUIET)
    got = second.listener.bodies()
    assert not dupes(got), f"C got duplicates {dupes(got)}"
    assert not set(got) & set(acked), f"acked on B and delivered again on C: {sorted(set(got) & set(acked))}"
    assert sorted(got + acked) == sorted(sent), f"lost: {sorted(set(sent) - set(got) - set(acked))}"
    second.disconnect()
    assert drain(a, q) == [] and drain(b, q) == []


# ---------------------------------------------------------------------------------------
# 9. message_load_balancing modes
# ---------------------------------------------------------------------------------------


def test_load_balancing_off_keeps_messages_where_sent(mesh):
    a, b = mesh(2, load_balancing="OFF")
    q = "/queue/" + unique("off")
    consumer = b.subscriber(q)
    fence = b.fence(q, consumer, "fenceB")
    sent = send_many(a.client(), q, [f"o{i}" for i in range(20)])
    time.sleep(QUIET)
    crossed = besides_fence(consumer, fence)
    assert crossed == [], f"OFF: B's consumer received messages sent on A: {crossed}"
    consumer.disconnect()
    assert bodies_of(drain(a, q)) == sent


def test_load_balancing_on_demand_forwards_to_the_consumer(mesh):
    a, b = mesh(2, load_balancing="ON_DEMAND")
    q = "/queue/" + unique("ondemand")
    consumer = b.subscriber(q)
    sent = send_many(a.client(), q, [f"n{i}" for i in range(20)])
    got = bodies_of(consumer.listener.wait_for(20))
    assert got == sent
    consumer.disconnect()
    assert drain(a, q) == []


def test_load_balancing_on_demand_prefers_local_consumers(mesh):
    """docs: "local consumers with capacity (free prefetch) are preferred"."""
    a, b = mesh(2, load_balancing="ON_DEMAND")
    q = "/queue/" + unique("local")
    remote = b.subscriber(q)
    producer = a.client()
    probe = unique("probe")
    producer.send(q, probe, receipt=True)
    remote.listener.wait_for_body(probe)  # A knows B's demand and forwards to it
    local = a.subscriber(q)
    sent = send_many(producer, q, [f"l{i}" for i in range(20)])
    local.listener.wait_for(20)
    time.sleep(QUIET)
    assert remote.listener.bodies() == [probe], "a local consumer with free prefetch should get everything"
    assert local.listener.bodies() == sent


def test_load_balancing_strict_round_robins_to_nodes_with_the_queue(mesh):
    """docs: STRICT = "Round-robin across every node that has the queue, whether or not it
    has consumers. Messages can pile up on a node nobody consumes from."
    B has the queue (a message sent there, no consumer); A has a consumer. Sent on A, about
    half must go to B and pile up there."""
    a, b = mesh(2, load_balancing="STRICT")
    q = "/queue/" + unique("strict")
    seed = unique("seed")
    b.client().send(q, seed, receipt=True, headers={"persistent": "true"})
    local = a.subscriber(q)
    fence = a.fence(q, local, "fenceA")
    sent = send_many(a.client(), q, [f"s{i:02d}" for i in range(20)])
    time.sleep(QUIET)
    at_a = [body for body in local.listener.bodies() if body not in (fence, seed)]
    local.disconnect()
    at_b = [body for body in bodies_of(drain(b, q)) if body != seed]
    assert sorted(at_a + at_b) == sorted(sent), f"A {at_a}, B {at_b}"
    assert 5 <= len(at_b) <= 15, (f"STRICT should round-robin between A and B (which has the queue): "
                                  f"A's consumer got {len(at_a)}, B holds {len(at_b)}")


def _moved_only_after_the_delay(a, q: str, consumer, fence: str, sent: list[str], since: float,
                                quiet: float) -> None:
    """With redistribution_delay_ms = 3000: nothing of ``sent`` reaches ``consumer`` (on B) for ``quiet``
    seconds, then all of it does, once each, no sooner than 2.5 s after ``since``; A keeps none."""
    time.sleep(quiet)
    early = besides_fence(consumer, fence)
    assert early == [], f"{len(early)} moved to B within {quiet} s, before the 3 s redistribution delay: {early}"
    consumer.listener.wait_for(21, timeout=15)
    elapsed = time.monotonic() - since
    got = besides_fence(consumer, fence)
    assert sorted(got) == sorted(sent) and not dupes(got), f"B got {got}"
    assert elapsed >= 2.5, f"the backlog moved after {elapsed:.1f} s, before the 3 s delay"
    consumer.disconnect()
    assert drain(a, q) == []


def test_load_balancing_off_with_redistribution_does_not_forward_on_send(mesh):
    """docs: OFF_WITH_REDISTRIBUTION = "Never forward on send (like OFF), but when the queue has
    no consumers on this node, redistribute its backlog to nodes that have some (after the
    redistribution delay)". With a 3 s delay: nothing moves at first, then everything does."""
    a, b = mesh(2, load_balancing="OFF_WITH_REDISTRIBUTION", extra="redistribution_delay_ms = 3000")
    q = "/queue/" + unique("owr")
    consumer = b.subscriber(q)
    fence = b.fence(q, consumer, "fenceB")
    started = time.monotonic()
    sent = send_many(a.client(), q, [f"w{i}" for i in range(20)])
    _moved_only_after_the_delay(a, q, consumer, fence, sent, started, quiet=1.0)  # not forwarded on send


def test_load_balancing_off_with_redistribution_backlog_follows_after_the_delay(mesh):
    """The same mode, the case without any doubt: A has a local consumer (full: prefetch 1,
    never acks), so nothing may leave A; when it goes, the backlog moves to B's consumer
    after redistribution_delay_ms (3 s), not before."""
    a, b = mesh(2, load_balancing="OFF_WITH_REDISTRIBUTION", extra="redistribution_delay_ms = 3000")
    q = "/queue/" + unique("owr2")
    remote = b.subscriber(q)
    fence = b.fence(q, remote, "fenceB")
    local = a.subscriber(q, ack="client-individual", headers={"activemq.prefetchSize": "1"})
    time.sleep(0.5)  # B's demand reaches A in milliseconds; proven below when the backlog moves
    sent = send_many(a.client(), q, [f"x{i}" for i in range(20)])
    local.listener.wait_for(1)
    time.sleep(QUIET)
    early = besides_fence(remote, fence)
    assert early == [], f"{len(early)} left A while A had a consumer: {early}"
    local.disconnect()  # its unacked message goes back; A now has no consumer
    _moved_only_after_the_delay(a, q, remote, fence, sent, time.monotonic(), quiet=1.5)


# ---------------------------------------------------------------------------------------
# 10. Selectors in demand
# ---------------------------------------------------------------------------------------


def test_selector_demand_only_matching_messages_cross(mesh):
    a, b = mesh(2)
    q = "/queue/" + unique("sel")
    consumer = b.subscriber(q, headers={"selector": "color = 'red'"})
    producer = a.client()
    reds, blues = [], []
    for i in range(20):
        color = "red" if i % 2 == 0 else "blue"
        body = f"{color}-{i:02d}"
        (reds if color == "red" else blues).append(body)
        producer.send(q, body, receipt=True, headers={"color": color, "persistent": "true"})
    fence = "red-fence"
    producer.send(q, fence, receipt=True, headers={"color": "red"})
    consumer.listener.wait_for_body(fence, timeout=15)
    time.sleep(QUIET)
    got = besides_fence(consumer, fence)
    assert got == reds, f"B (selector color = 'red') got {got}"
    consumer.disconnect()
    left = bodies_of(drain(a, q))
    assert left == blues, f"the blue messages should all still be on A: {left}"
