"""The stuck-message doctor on real nodes (docs/doctor.md): messages stuck on purpose,
found by ``meshgate doctor`` with the configuration key to blame, then freed by the
remedy it prints, or by ``apply_remedy`` (``meshgate doctor --fix``), audited as the
remedy's own action from the doctor."""

from __future__ import annotations

import json
import shlex
import threading
import time

import pytest
from e2e_support import HOST, manage, manage_result, run_meshgate, unique
from mesh_support import mesh_fixture, send_many, wait_until  # noqa: F401  (the fixture)

from model.requests import ApplyRemedy, CloseConnection, Diagnosis, Events, Queues, Summary


def cli(node, *args: str):
    return run_meshgate([*args, "--stomp", f"{HOST}:{node.stomp}"])


def findings(node, kind: str, **thresholds) -> list:
    report = manage_result(node.stomp, Diagnosis(**thresholds))
    return [finding for finding in report.findings if finding.kind == kind]


def test_a_backlog_stranded_by_max_hops_is_found_and_moved_on(mesh):
    """A - B - C with max_hops = 1 and a consumer on C: what is sent on A stays there, as B
    does not pass C's demand on. The doctor names mesh.max_hops and B, and its move to B
    (which forwards to C) delivers the backlog."""
    a, b, c = mesh(3, topology="chain", max_hops=1)
    queue = unique("stranded")
    destination = "/queue/" + queue
    consumer = c.subscriber(destination)
    b.fence(destination, consumer, "fenceB")  # C's demand has reached B
    sent = send_many(a.client(), destination, [f"s{i}" for i in range(20)])

    doctor = cli(b, "doctor", "--older-than", "0")  # asked anywhere: it sees the whole mesh
    assert doctor.returncode == 0, doctor.stderr
    assert f"/queue/{queue}: 20 message(s) stranded on A while C has consumers" in doctor.stdout, doctor.stdout
    assert "mesh.max_hops on B (max_hops = 1)" in doctor.stdout, doctor.stdout
    assert f"fix: meshgate move {queue} --node A --to-node B" in doctor.stdout, doctor.stdout
    (finding,) = findings(b, "stranded_backlog", older_than_s=0)  # (A alone knows nothing of C)
    assert f"or: meshgate doctor --fix {finding.id}\n" in doctor.stdout, doctor.stdout

    moved = cli(b, "doctor", "--fix", finding.id)  # the move, asked of B, done by A
    assert moved.returncode == 0 and "moved 20" in moved.stdout.lower(), (moved.stdout, moved.stderr)
    got = [message.body for message in consumer.listener.wait_for(len(sent) + 1, timeout=20)]
    assert sorted(body for body in got if body in sent) == sorted(sent)
    assert findings(a, "stranded_backlog", older_than_s=0) == []
    assert sum(q.depth for q in manage_result(a.stomp, Queues(node="*", name=queue))) == 0
    (audited,) = [e for e in manage_result(a.stomp, Events(kinds=["admin_action"])) if e.target == "/queue/" + queue]
    assert (audited.action, audited.ok) == ("move", True), audited
    assert audited.result.startswith(f"doctor {finding.id}: 20 message(s)"), audited
    stale = cli(b, "doctor", "--fix", finding.id)
    assert stale.returncode == 1 and f"no finding {finding.id} now" in stale.stderr, stale.stderr


def test_a_consumer_that_never_acks_is_found_and_closed(mesh):
    """A client-ack consumer takes messages and never acks: after the threshold the doctor
    points at its connection; the remedy's request (close_connection) returns them."""
    (a,) = mesh(1, sets=["doctor.unacked_s=1"])  # the node's default, for requests that give none
    queue = unique("unacked")
    destination = "/queue/" + queue
    holder = a.client()
    holder.subscribe(destination, ack="client-individual")
    send_many(a.client(), destination, [f"u{i}" for i in range(3)])
    holder.listener.wait_for(3)
    assert findings(a, "unacked_old", unacked_s=300) == []  # not old yet

    wait_until(lambda: findings(a, "unacked_old"), "the doctor to see the unacked deliveries", timeout=15)
    (finding,) = findings(a, "unacked_old")
    assert "holds 3 unacked deliveries" in finding.evidence and f"/queue/{queue}" in finding.evidence
    assert finding.remedy is not None and finding.remedy.command.startswith(f"meshgate close {finding.subject}")
    shown = cli(a, "doctor", "--json")
    assert shown.returncode == 0 and finding.id in {f["id"] for f in json.loads(shown.stdout)["result"]["findings"]}

    # A client may not pass its own close off as the doctor's (the audit would say so).
    forged = manage(a.stomp, CloseConnection(connection=finding.subject, remedy_of=finding.id))
    assert not forged.ok and forged.error.code == "bad_request", forged
    assert "remedy_of is set by apply_remedy only" in forged.error.message
    # It disconnects: without confirm, apply_remedy says what it would do, and does nothing.
    refused = manage(a.stomp, ApplyRemedy(finding=finding.id))
    assert refused.error.code == "bad_request" and f"would close connection {finding.subject}" in refused.error.message
    assert findings(a, "unacked_old") != [] and manage_result(a.stomp, Queues(name=queue))[0].in_flight == 3
    closed = manage(a.stomp, ApplyRemedy(finding=finding.id, confirm=True))
    assert closed.ok and closed.action == "close_connection", closed
    holder.listener.wait_disconnected()
    wait_until(lambda: manage_result(a.stomp, Queues(name=queue))[0].depth == 3, "the deliveries to come back")
    assert findings(a, "unacked_old", unacked_s=0) == []
    audit = [(e.action, e.ok, e.result.startswith(f"doctor {finding.id}: ") or e.result)
             for e in manage_result(a.stomp, Events(kinds=["admin_action"]))]
    assert audit == [("apply_remedy", False, f"the remedy of {finding.id} would close connection {finding.subject} "
                      f"(meshgate close {finding.subject} --node A): it drops or disconnects something, so ask "
                      "again with confirm (meshgate doctor --fix ID --yes)"), ("close_connection", True, True)], audit
    gone = manage(a.stomp, ApplyRemedy(finding=finding.id, confirm=True))
    assert gone.error.code == "not_found" and f"no finding {finding.id} now" in gone.error.message


def test_messages_in_doubt_for_a_crashed_node_are_found_and_released_by_forget(mesh):
    """A restarts while B, which it linked with, is dead: A holds what it recovered until
    B says whether it has it (mesh.in_doubt_timeout_ms, long here). The doctor says how
    long, names the key, and its remedy (forget B) releases them."""
    a, b = mesh(2, extra="in_doubt_timeout_ms = 600000")
    queue = unique("doubt")
    send_many(a.client(), "/queue/" + queue, [f"d{i}" for i in range(5)])  # no consumer: they stay on A
    b_id = manage_result(b.stomp, Summary()).node.id
    b.kill9()
    a.restart()
    wait_until(lambda: findings(a, "in_doubt_waiting", in_doubt_s=1), "the doctor to see the doubts", timeout=15)
    (finding,) = findings(a, "in_doubt_waiting", in_doubt_s=1)
    assert finding.subject == b_id and "holds 5 message(s) out of its queues" in finding.evidence
    assert finding.config_keys == ["mesh.in_doubt_timeout_ms"] and "600000" in finding.explanation
    assert finding.remedy is not None and finding.remedy.command == f"meshgate forget {b_id}"

    forgot = cli(a, *shlex.split(finding.remedy.command)[1:])
    assert forgot.returncode == 0, forgot.stderr
    wait_until(lambda: manage_result(a.stomp, Queues(name=queue))[0].depth == 5, "the doubts to be released")
    assert findings(a, "in_doubt_waiting", in_doubt_s=0) == []


def test_a_producer_paused_by_the_store_limit_is_found_with_the_key_to_raise(mesh):
    """store.limit is tiny: a producer of persistent messages nobody consumes is no longer
    read. The doctor names its connection, store.limit and the queue to drain; a consumer
    makes room and the finding goes."""
    (a,) = mesh(1, sets=["store.journal_file_size=128KiB", "store.limit=1MiB"])
    queue = unique("paused")
    producer = a.client()
    body = "x" * 32 * 1024

    def send() -> None:  # past the limit the node stops reading: sendall waits, so in a thread of its own
        for i in range(80):  # 2.5 MiB for a 1 MiB store
            producer.send("/queue/" + queue, body, receipt=f"p{i}", wait=False, persistent="true")

    threading.Thread(target=send, daemon=True).start()
    wait_until(lambda: findings(a, "producers_paused", older_than_s=0), "the doctor to see the paused producer",
               timeout=30)
    (finding,) = findings(a, "producers_paused", older_than_s=0)
    assert finding.config_keys == ["store.limit"] and "raise store.limit" in finding.explanation, finding
    assert "the journal reached store.limit" in finding.evidence and f"/queue/{queue} (" in finding.evidence
    assert finding.remedy is None
    assert findings(a, "producers_paused") == []  # younger than the default minute

    a.subscriber("/queue/" + queue)  # drains: the store shrinks, the producer is read again
    wait_until(lambda: not findings(a, "producers_paused", older_than_s=0), "the pause to end", timeout=30)


def test_expiring_messages_and_the_growing_expiry_queue_are_found(mesh):
    """Messages nobody takes expire (the sweep runs every 5 s) into broker.expiry_queue:
    the doctor reports the queue they expire from and the expiry queue that grows, and
    offers to browse it."""
    expiry = unique("expired")
    (a,) = mesh(1, sets=[f"broker.expiry_queue={expiry}"])
    queue = unique("expiring")
    expires = str(int(time.time() * 1000) + 200)
    send_many(a.client(), "/queue/" + queue, [f"e{i}" for i in range(4)], headers={"expires": expires})
    wait_until(lambda: findings(a, "dlq_growing"), "the expiry queue to grow", timeout=20)
    (growing,) = findings(a, "dlq_growing")
    assert growing.subject == expiry and f"/queue/{queue} (4 expired)" in growing.evidence, growing
    assert growing.remedy is not None and growing.remedy.command == f"meshgate browse {expiry} --node A"
    browsed = cli(a, *shlex.split(growing.remedy.command)[1:])
    assert browsed.returncode == 0 and "e0" in browsed.stdout, browsed.stdout
    (expiring,) = findings(a, "expiring")
    assert expiring.subject == queue and expiring.severity == "info" and "4 message(s)" in expiring.evidence


def test_an_abandoned_durable_subscription_is_found_and_deleted_by_the_remedy(mesh):
    """A durable subscriber goes away and its topic goes on: the doctor (with no grace
    period here) reports what is kept for it, and its remedy deletes the subscription."""
    (a,) = mesh(1)
    topic = "/topic/" + unique("audit")
    client_id = unique("app")
    subscriber = a.client(headers={"client-id": client_id})
    subscriber.subscribe(topic, id="d", headers={"activemq.subscriptionName": "s"})
    producer = a.client()
    send_many(producer, topic, ["while here"])
    subscriber.listener.wait_for(1)
    subscriber.disconnect()
    send_many(producer, topic, [f"away-{i}" for i in range(3)])
    assert findings(a, "durable_abandoned") == []  # gone for less than the default hour

    (finding,) = findings(a, "durable_abandoned", older_than_s=0)
    assert client_id in finding.subject and "keeps 3 message(s)" in finding.evidence, finding
    assert finding.remedy is not None and finding.remedy.confirm
    deleted = cli(a, *shlex.split(finding.remedy.command)[1:])
    assert deleted.returncode == 0, deleted.stderr
    assert findings(a, "durable_abandoned", older_than_s=0) == []


def test_a_backlog_behind_a_full_prefetch_is_found(mesh):
    """A client-ack consumer with a prefetch of 2 that does not ack: the rest of the
    queue waits, and the doctor says the consumers' prefetch holds it."""
    (a,) = mesh(1)
    queue = unique("bound")
    holder = a.client()
    holder.subscribe("/queue/" + queue, ack="client-individual", headers={"activemq.prefetchSize": "2"})
    send_many(a.client(), "/queue/" + queue, [f"b{i}" for i in range(10)])
    holder.listener.wait_for(2)
    assert findings(a, "prefetch_bound") == []  # not for a minute yet
    (finding,) = findings(a, "prefetch_bound", older_than_s=0)
    assert finding.subject == queue and "holds 8 waiting message(s)" in finding.evidence, finding
    assert "hold 2 unacked deliveries" in finding.evidence and finding.config_keys == ["broker.default_prefetch"]


@pytest.mark.parametrize("delay_ms, said", [(600000, "= 600000"), (-1, "= -1")], ids=["delayed", "disabled"])
def test_a_backlog_held_by_a_redistribution_delay_is_released_by_the_remedy(mesh, delay_ms, said):
    """OFF_WITH_REDISTRIBUTION with a 10-minute delay, or with redistribution disabled
    (-1): what is sent on A waits there while B has a consumer. The doctor names the
    delay's key and its value and offers redistribute, which sends the backlog to B at
    once; asked again, it is refused, saying why."""
    a, b = mesh(2, load_balancing="OFF_WITH_REDISTRIBUTION", extra=f"redistribution_delay_ms = {delay_ms}")
    queue = unique("held")
    consumer = b.subscriber("/queue/" + queue)
    b.fence("/queue/" + queue, consumer, "fenceB")
    time.sleep(0.5)  # B's demand reaches A in milliseconds
    sent = send_many(a.client(), "/queue/" + queue, [f"h{i}" for i in range(10)])
    wait_until(lambda: findings(a, "stranded_backlog", older_than_s=0), "the doctor to see the held backlog")
    (finding,) = findings(a, "stranded_backlog", older_than_s=0)
    assert finding.config_keys == ["mesh.redistribution_delay_ms", "mesh.message_load_balancing"], finding
    assert f"mesh.redistribution_delay_ms {said}" in finding.explanation, finding.explanation
    assert finding.remedy is not None and finding.remedy.command == f"meshgate redistribute {queue} --node A"

    released = cli(b, *shlex.split(finding.remedy.command)[1:])
    assert released.returncode == 0 and f"released 10 message(s) of /queue/{queue}" in released.stdout, released
    got = [message.body for message in consumer.listener.wait_for(len(sent) + 1, timeout=20)]
    assert sorted(body for body in got if body in sent) == sorted(sent)
    again = cli(a, *shlex.split(finding.remedy.command)[1:])
    assert again.returncode != 0 and "is not held" in again.stdout + again.stderr, again
