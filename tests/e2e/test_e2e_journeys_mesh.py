"""Message journeys across a real mesh (docs/journeys.md): a message traced on one node
is traced on every node it reaches (the link frame's traced bit), and each node records
what it did with it: forwarded (and why), taken from the link, stored by the peer,
delivered, returned, redistributed, acked."""

from __future__ import annotations

import time

from e2e_support import manage_result, run_meshgate, unique
from mesh_support import delivered_id, mesh_fixture, wait_until  # noqa: F401

from model.definitions import TRACE
from model.requests import DefineTrace, Definitions, JourneySearch, JourneySteps

JOURNEYS_ON = "journeys.enabled=true"


def journey(node, *message_ids: str) -> list:
    """Every node's records of the messages, as ``journey_steps`` asked at ``node`` gathers them."""
    return manage_result(node.stomp, JourneySteps(ids=list(message_ids), node="*"))


def steps_on(steps: list, node) -> list[str]:
    return [s.step for s in sorted(steps, key=lambda s: s.seq) if s.node_name == node.name]


def test_a_traced_message_is_traced_on_every_node_it_crosses(mesh):
    """Sent on A to a consumer on B, which leaves without acking; B redistributes it to C's
    consumer, which gets it redelivered and acks."""
    a, b, c = mesh(3, extra="redistribution_delay_ms = 0", sets=[JOURNEYS_ON])
    queue = "/queue/" + unique("journey")
    first = b.client()
    first.subscribe(queue, ack="client-individual", headers={"activemq.prefetchSize": "1"})
    producer = a.client()
    producer.send(queue, "traced", headers={"trace": "true", "persistent": "true"}, receipt=True)
    producer.send(queue, "plain", headers={"persistent": "true"}, receipt=True)
    taken = first.listener.wait_for(1)[0]
    message_id = taken.headers["message-id"]
    first.drop()  # gone without acking: B puts it back
    second = c.client()
    second.subscribe(queue, ack="client-individual")
    got = {m.body: m for m in second.listener.wait_for(2, timeout=30)}
    again = got["traced"]
    assert again.headers["message-id"] == message_id and again.headers.get("redelivered") == "true"
    for message in got.values():
        second.ack(message, receipt=True)
    wait_until(lambda: "acked" in steps_on(journey(a, message_id), c), "C's ack recorded")

    steps = journey(b, message_id)  # any node gathers every node's records
    assert steps_on(steps, a) == ["received", "stored", "forwarded", "peer_stored"]
    assert steps_on(steps, b) == ["link_received", "stored", "delivered", "requeued", "forwarded", "peer_stored"]
    assert steps_on(steps, c) == ["link_received", "stored", "delivered", "acked"]
    by = {(s.node_name, s.step, s.seq): s for s in steps}
    [to_b] = [s for (name, step, _), s in by.items() if (name, step) == ("A", "forwarded")]
    [from_a] = [s for (name, step, _), s in by.items() if (name, step) == ("B", "link_received")]
    [to_c] = [s for (name, step, _), s in by.items() if (name, step) == ("B", "forwarded")]
    [requeued] = [s for (name, step, _), s in by.items() if (name, step) == ("B", "requeued")]
    [delivered] = [s for (name, step, _), s in by.items() if (name, step) == ("C", "delivered")]
    assert (to_b.reason, to_b.peer, from_a.peer) == ("demand", from_a.node, to_b.node)
    assert (to_c.reason, to_c.peer, requeued.reason) == ("redistribution", delivered.node, "consumer gone")
    assert delivered.redelivered and delivered.protocol == "stomp"
    plain_id = got["plain"].headers["message-id"]
    assert journey(a, plain_id) == []  # untraced: no node recorded anything

    # The CLI, asked at C, prints the whole journey in causal order.
    printed = run_meshgate(["trace", message_id, "--stomp", f"127.0.0.1:{c.stomp}"])
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines[0].startswith(f"message {message_id}: 14 steps on 3 nodes")
    timeline = [line.split()[2:4] for line in lines[1:]]
    assert len(timeline) == 14 and _causal(timeline), printed.stdout
    assert "to B (demand)" in printed.stdout and "to C (redistribution)" in printed.stdout


def _causal(timeline: list[list[str]]) -> bool:
    """Steps whose order wall time decides may come either way; what must hold: each node's
    own order, and a node takes a message from its link after the other sent it."""
    where = {tuple(step): i for i, step in enumerate(timeline)}
    per_node = {node: [step for n, step in timeline if n == node] for node in "ABC"}
    return (per_node["A"] == ["received", "stored", "forwarded", "peer_stored"]
            and per_node["B"] == ["link_received", "stored", "delivered", "requeued", "forwarded", "peer_stored"]
            and per_node["C"] == ["link_received", "stored", "delivered", "acked"]
            and where["A", "forwarded"] < where["B", "link_received"]
            and where["B", "forwarded"] < where["C", "link_received"])


def traced_ids(node, ids: list[str]) -> set[str]:
    return {s.id for s in journey(node, *ids)} if ids else set()


def test_trace_next_traces_the_next_messages_or_a_sample_without_a_header(mesh):
    a, b = mesh(2, sets=[JOURNEYS_ON])
    queue = unique("next")
    consumer = b.client()
    consumer.subscribe(f"/queue/{queue}")
    armed = run_meshgate(["trace-next", f"/queue/{queue}", "--count", "2", "--stomp", f"127.0.0.1:{a.stomp}"])
    assert armed.returncode == 0 and armed.stdout.count("tracing every message, 2 at most") == 2, armed
    producer = a.client()
    for i in range(5):
        producer.send(f"/queue/{queue}", f"n{i}", receipt=True)
    ids = [m.headers["message-id"] for m in consumer.listener.wait_for(5)]
    assert traced_ids(b, ids) == set(ids[:2])  # on A, the first two it was sent; B traces them too
    assert {s.node_name for s in journey(b, ids[0])} == {"A", "B"}

    sample = run_meshgate(["trace-next", f"/queue/{queue}", "--every", "3", "--for", "1m",
                           "--stomp", f"127.0.0.1:{b.stomp}"])
    assert sample.returncode == 0, sample
    for i in range(9):
        producer.send(f"/queue/{queue}", f"s{i}", receipt=True)
    sampled = [m.headers["message-id"] for m in consumer.listener.wait_for(14)[5:]]
    assert traced_ids(a, sampled) == {sampled[2], sampled[5], sampled[8]}  # one in three

    stopped = run_meshgate(["trace-next", f"/queue/{queue}", "--count", "0", "--stomp", f"127.0.0.1:{a.stomp}"])
    assert stopped.returncode == 0 and "tracing stopped" in stopped.stdout, stopped
    producer.send(f"/queue/{queue}", "after", receipt=True)
    after = consumer.listener.wait_for(15)[14].headers["message-id"]
    assert traced_ids(a, [after]) == set()

    refused = run_meshgate(["trace-next", "/queue/", "--stomp", f"127.0.0.1:{a.stomp}"])
    assert refused.returncode != 0 and "cannot trace" in refused.stderr + refused.stdout, refused


def trace_held(node, destination: str):
    """The trace definition of ``destination`` as ``node`` holds it (None: none, or deleted)."""
    records = manage_result(node.stomp, Definitions(node=node.name))
    return next((r.trace for r in records if (r.kind, r.name) == (TRACE, destination)), None)


def test_trace_on_traces_a_destination_on_every_node_at_its_rate_until_off_or_its_end(mesh):
    a, b = mesh(2, sets=[JOURNEYS_ON])
    queue = f"/queue/{unique('defined')}"
    consumer = b.client()
    consumer.subscribe(queue)
    producer = b.client()

    def sent(n: int) -> list[str]:
        """Send ``n`` messages without a header on B; their ids."""
        before = len(consumer.listener.messages)
        for i in range(n):
            producer.send(queue, f"m{i}", receipt=True)
        return [m.headers["message-id"] for m in consumer.listener.wait_for(before + n)[before:]]

    on = run_meshgate(["trace-on", queue, "--for", "1h", "--stomp", f"127.0.0.1:{a.stomp}"])  # defined on A
    assert on.returncode == 0 and "tracing every message for 3600 s" in on.stdout, on
    wait_until(lambda: trace_held(b, queue) is not None, "B holds A's definition")
    ids = sent(2)
    assert traced_ids(a, ids) == set(ids)  # B traces what is sent to it
    listed = run_meshgate(["definitions", "--stomp", f"127.0.0.1:{b.stomp}"])
    assert f"trace  {queue}" in listed.stdout and "traced: every message until" in listed.stdout, listed

    manage_result(a.stomp, DefineTrace(destination=queue, rate=0.5, for_s=3600))
    wait_until(lambda: getattr(trace_held(b, queue), "rate", None) == 0.5, "B holds the new rate")
    ids = sent(4)
    assert traced_ids(a, ids) == {ids[1], ids[3]}  # one in two

    off = run_meshgate(["trace-off", queue, "--stomp", f"127.0.0.1:{a.stomp}"])
    assert off.returncode == 0 and f"tracing of {queue}" in off.stdout, off
    wait_until(lambda: trace_held(b, queue) is None, "B holds the deletion")
    assert traced_ids(a, sent(2)) == set()

    manage_result(a.stomp, DefineTrace(destination=queue, for_s=2))
    wait_until(lambda: trace_held(b, queue) is not None, "B holds the short one")
    assert traced_ids(a, first := sent(1)) == set(first)
    wait_until(lambda: traced_ids(a, sent(1)) == set(), "its end passed: no longer traced", timeout=10)


def test_a_trace_definition_is_armed_again_after_a_restart_and_a_kill_9_and_its_deletion_too(mesh):
    """One node is enough: what is tested is its own catalog, read at start."""
    (a,) = mesh(1, topology="none", sets=[JOURNEYS_ON])
    queue = f"/queue/{unique('restarted')}"
    on = run_meshgate(["trace-on", queue, "--rate", "1", "--for", "1h", "--stomp", f"127.0.0.1:{a.stomp}"])
    assert on.returncode == 0 and "tracing every message for 3600 s" in on.stdout, on
    defined = trace_held(a, queue)
    end = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(defined.until))

    # trace-on answers once the catalog is written, so even a kill -9 right after must not lose it.
    for graceful in (True, False):
        a.restart(graceful=graceful)
        assert trace_held(a, queue) == defined  # same rate and end: not a new definition with a fresh hour
        listed = run_meshgate(["definitions", "--stomp", f"127.0.0.1:{a.stomp}"])
        rows = [row for row in listed.stdout.splitlines() if f"trace  {queue}" in row]
        assert len(rows) == 1 and f"traced: every message until {end}" in rows[0] and "ended" not in rows[0], listed
        message_id = delivered_id(a, queue)  # no trace header: only the re-armed definition can trace it
        assert traced_ids(a, [message_id]) == {message_id}, f"not traced after restart (graceful={graceful})"

    off = run_meshgate(["trace-off", queue, "--stomp", f"127.0.0.1:{a.stomp}"])
    assert off.returncode == 0, off
    a.restart()
    assert trace_held(a, queue) is None
    untraced = delivered_id(a, queue)
    # The header still traces: the untraced message is down to the deletion, not to journeys being off.
    asked = delivered_id(a, queue, headers={"trace": "true"})
    assert traced_ids(a, [untraced, asked]) == {asked}


def test_with_metrics_on_the_records_also_go_to_their_own_redis_stream(mesh, redis_server):
    import msgspec
    import redis

    from model.journeys import JourneyStep

    (a,) = mesh(1, topology="none", sets=[JOURNEYS_ON, f"metrics.redis_url={redis_server.url}"])
    client = a.client()
    queue = f"/queue/{unique('stream')}"
    client.subscribe(queue)
    client.send(queue, "traced", headers={"trace": "true"}, receipt=True)
    client.send(queue, "plain", receipt=True)
    traced = next(m for m in client.listener.wait_for(2) if m.body == "traced").headers["message-id"]
    r = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: len(r.xrange("meshgate:journeys")) >= 4, "the journey's records in Redis")
    entries = [fields for _, fields in r.xrange("meshgate:journeys")]
    assert {e[b"root"].decode() for e in entries} == {traced}  # the untraced message wrote nothing
    steps = [msgspec.json.decode(e[b"data"], type=JourneyStep) for e in entries]
    assert [s.step for s in steps] == ["received", "queued", "delivered", "acked"]
    assert [e[b"step"].decode() for e in entries] == [s.step for s in steps]
    assert all(s.node == e[b"node"].decode() for s, e in zip(steps, entries, strict=True))
    assert not any(b"journey" in fields.get(b"kind", b"") for _, fields in r.xrange("meshgate:events"))


def test_traced_messages_are_found_by_header_body_and_queue_on_every_node(mesh):
    """Sent on A to a consumer on B: a header and the body are kept where it was received
    (A), the queue is on both nodes; every search, asked at either node, finds it once."""
    a, b = mesh(2, sets=[JOURNEYS_ON])
    queue = unique("found")
    consumer = b.client()
    consumer.subscribe(f"/queue/{queue}")
    producer = a.client()
    producer.send(f"/queue/{queue}", '{"order": 1042}', headers={"trace": "true", "customer": "c-42"}, receipt=True)
    producer.send(f"/queue/{queue}", '{"order": 7}', headers={"trace": "true", "customer": "c-7"}, receipt=True)
    producer.send(f"/queue/{queue}", "1042, untraced", headers={"customer": "c-42"}, receipt=True)
    first, second = (m.headers["message-id"] for m in consumer.listener.wait_for(3)[:2])
    wait_until(lambda: {s.node_name for s in journey(a, first, second)} == {"A", "B"}, "both nodes' records")

    [by_header] = manage_result(b.stomp, JourneySearch(header="customer=c-42"))
    assert (by_header.root, by_header.node_name, by_header.destination) == (first, "A", f"/queue/{queue}")
    assert [hit.root for hit in manage_result(b.stomp, JourneySearch(body="1042"))] == [first]
    by_queue = manage_result(a.stomp, JourneySearch(queue=queue))
    assert [hit.root for hit in by_queue] == [second, first]  # newest first, once each
    assert by_queue[1].steps == len(journey(a, first)) and by_queue[1].node_name == "A"  # both nodes' steps

    printed = run_meshgate(["traces", "--queue", queue, "--header", "customer=c-7", "--since", "10m",
                            "--stomp", f"127.0.0.1:{b.stomp}"])
    assert printed.returncode == 0, printed.stderr
    [line] = printed.stdout.splitlines()
    assert line.split()[2:5] == [second, "A", f"/queue/{queue}"], line
