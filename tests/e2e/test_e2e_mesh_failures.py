"""End-to-end tests of the mesh when things go wrong: a node killed mid-stream, a wrong
cluster password, a copied data dir, a node that crashed for good."""

from __future__ import annotations

import shutil
import threading
import time
from collections import defaultdict

import pytest
import stomp
from e2e_support import HOST, BrokerStartError, manage_result, run_meshgate, unique
from mesh_support import QUIET, drain, mesh_fixture, send_many, wait_until  # noqa: F401

from model.requests import Nodes, Queues, Summary

# ---------------------------------------------------------------------------------------
# 6. The consumer's node is killed -9 while the producer's node streams to it
# ---------------------------------------------------------------------------------------


class _Acker(stomp.ConnectionListener):
    """Acks every MESSAGE as it arrives (client-individual) and records what was seen,
    in order, across reconnects: (body, redelivered header, connection number)."""

    def __init__(self, conn, seen: list, lock: threading.Lock, generation: int) -> None:
        self.conn = conn
        self.seen = seen
        self.lock = lock
        self.generation = generation

    def on_message(self, frame) -> None:
        with self.lock:
            self.seen.append((frame.body, frame.headers.get("redelivered", "false"), self.generation))
        try:
            self.conn.ack(frame.headers["ack"])
        except Exception:
            pass  # the node is being killed


def test_consumer_node_killed_mid_stream(mesh):
    a, b = mesh(2)
    q = "/queue/" + unique("kill")
    total = 2000
    seen: list = []
    lock = threading.Lock()

    def consume(generation: int):
        client = b.client()
        client.conn.set_listener("acker", _Acker(client.conn, seen, lock, generation))
        client.subscribe(q, ack="client-individual", headers={"activemq.prefetchSize": "100"})
        return client

    consume(1)
    producer = a.client()
    receipted: list[str] = []
    failure: list[BaseException] = []
    producer_done = threading.Event()

    def produce():
        try:
            for start in range(0, total, 100):  # batches, so the stream is still going at the kill
                receipted.extend(send_many(producer, q, [f"k{i:04d}" for i in range(start, start + 100)]))
        except BaseException as error:  # reported by the main thread
            failure.append(error)
        finally:
            producer_done.set()

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    wait_until(lambda: len(seen) >= 300, "B's consumer to get 300 messages", timeout=30,
               describe=lambda: f"seen {len(seen)}")
    still_sending = not producer_done.is_set()
    links_before = a.linked_count(b)
    b.kill9()
    b.restart()
    a.wait_linked(b, count=links_before + 1)
    consume(2)
    thread.join(60)
    assert not failure, f"producer on A failed: {failure[0]!r}"
    assert len(receipted) == total

    def consumed():
        with lock:
            return {body for body, _, _ in seen}

    wait_until(lambda: consumed() >= set(receipted), "every receipted message to be consumed on B", timeout=60,
               describe=lambda: f"missing {len(set(receipted) - consumed())}: "
                                f"{sorted(set(receipted) - consumed())[:20]}")
    time.sleep(QUIET)
    with lock:
        history = list(seen)
    copies = defaultdict(list)
    for position, (body, redelivered, generation) in enumerate(history):
        copies[body].append((position, redelivered, generation))
    unflagged = {body: c for body, c in copies.items() if len(c) > 1 and all(r != "true" for _, r, _ in c)}
    dupes = {body: c for body, c in copies.items() if len(c) > 1}
    print(f"producer still sending at the kill: {still_sending}; seen {len(history)} deliveries of "
          f"{len(copies)} bodies; {len(dupes)} seen more than once")
    assert not unflagged, (
        f"{len(unflagged)} bodies delivered twice without redelivered:true on either copy "
        f"(body: [(position, redelivered, connection 1=before the kill, 2=after)]): "
        f"{dict(sorted(unflagged.items())[:10])}")
    left = drain(a, q)
    assert left == [], f"left on A: {[m.body for m in left][:10]}"


# ---------------------------------------------------------------------------------------
# 7. Wrong cluster password
# ---------------------------------------------------------------------------------------


def test_wrong_cluster_password_is_refused(mesh):
    a, b = mesh(2, password=["right-password-" + unique("p"), "wrong-password-" + unique("p")], wait=False)
    refused = r"refused.*cluster_password|cluster_password.*refused"
    b.wait_log(refused)  # B's listener got A's proof of another password
    a.wait_log(refused)  # and A hears why, or refuses B's proof itself
    q = "/queue/" + unique("pw")
    consumer = b.subscriber(q)
    sent = send_many(a.client(), q, [f"p{i}" for i in range(20)])
    time.sleep(QUIET)
    assert consumer.listener.bodies() == [], "messages crossed a link with the wrong password"
    for node, other in ((a, b), (b, a)):
        assert node.linked_count(other) == 0, f"{node.name} reports a link with {other.name}\n{node.stderr()}"
        for secret in ("right-password-", "wrong-password-"):
            assert secret not in node.stderr(), f"{node.name} logged a cluster password"
    consumer.disconnect()
    assert [m.body for m in drain(a, q)] == sent
    assert a.running and b.running


# ---------------------------------------------------------------------------------------
# 8. A copied data dir
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialler", ["copy-dials", "original-dials"])
def test_copied_data_dir_newcomer_exits(mesh, dialler):
    edges = [(1, 0)] if dialler == "copy-dials" else [(0, 1)]
    a, copy = mesh(2, edges, start=False)
    a.start()
    a.stop()
    shutil.copytree(a.data_dir, copy.data_dir)
    (copy.data_dir / "lock").unlink(missing_ok=True)
    a.start()
    try:
        copy.start()
    except BrokerStartError:
        pass  # it may die before it reports its listener; the checks below still apply
    try:
        code = copy.proc.proc.wait(20)
    except Exception:
        raise AssertionError(f"the node with the copied data dir is still running\n{mesh.describe()}") from None
    copy.proc.output.join()
    assert code != 0, f"the copy exited with status 0\n{copy.stderr()}"
    assert "copied" in copy.stderr(), f"the copy's stderr does not say the data dir was copied:\n{copy.stderr()}"
    assert a.running, f"the original node stopped\n{a.proc.describe()}"
    q = "/queue/" + unique("alive")
    client = a.subscriber(q)
    client.send(q, "still here", receipt=True)
    assert [m.body for m in client.listener.wait_for(1)] == ["still here"]


# ---------------------------------------------------------------------------------------
# A node crashed for good: the administrator tells the mesh to forget it
# ---------------------------------------------------------------------------------------


def test_a_crashed_node_forgotten_with_the_cli_is_not_waited_for(mesh):
    a, b, c = mesh(3, extra="in_doubt_timeout_ms = 600000")
    c_id = manage_result(c.stomp, Summary()).node.id
    forget = ["forget", c_id, "--stomp", f"{HOST}:{b.stomp}"]
    refused = run_meshgate(forget)
    assert refused.returncode == 1 and "linked with this node" in refused.stderr, refused.stderr
    q = "/queue/" + unique("forget")
    sent = send_many(a.client(), q, [f"f{i}" for i in range(5)])  # no consumer anywhere: they stay on a
    c.kill9()
    a.restart(graceful=False)
    a.wait_linked(b)

    def in_doubt_on_a() -> int:
        return sum(queue.in_doubt for queue in manage_result(a.stomp, Queues(name=q[len("/queue/"):])))

    consumer = b.subscriber(q)
    def b_hears_of_c() -> bool:
        return any(s.node.id == c_id and s.node.state != "down" for s in manage_result(b.stomp, Nodes()).nodes)

    wait_until(lambda: not b_hears_of_c(), "b to stop hearing of c",
               describe=mesh.describe)
    assert in_doubt_on_a() == len(sent), "a's recovered messages should still wait for c"
    assert consumer.listener.bodies() == []
    result = run_meshgate(forget)
    assert result.returncode == 0 and "forgot " + c_id in result.stdout, result.stderr
    delivered = consumer.listener.wait_for(len(sent))
    assert sorted(m.body for m in delivered) == sorted(sent)
    assert all(m.headers.get("redelivered") == "true" for m in delivered)
    assert in_doubt_on_a() == 0
