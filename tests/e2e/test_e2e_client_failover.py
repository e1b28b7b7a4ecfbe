"""The failover client (meshgate.client) against real ``meshgate broker`` processes: a
producer and a consumer whose node is killed with ``kill -9`` move to the other node of
the mesh by themselves; receipted messages are never lost and never duplicated unmarked;
brokers found by the mesh's multicast announcements and by DNS; TLS; the limits
(attempts, the send timeout, a refused login or SEND)."""

from __future__ import annotations

import collections
import os
import re
import signal
import threading
import time
from collections.abc import Callable

import pytest
from dns_support import DnsServer
from e2e_support import HOST, security_config, unique
from mesh_support import free_port, mesh_fixture, wait_until  # noqa: F401

from meshgate.client import (
    RESENT,
    SEND_ID,
    ConnectFailed,
    ConnectRefused,
    FailoverConnection,
    FrameRefused,
    Message,
    SendRefused,
    SendTimeout,
    discover,
)

FAST = "initialReconnectDelay=20&maxReconnectDelay=500"  # reconnect quickly; the default would do too


@pytest.fixture
def clients():
    """``clients(url, **kwargs)`` -> a FailoverConnection (not yet connected), disconnected at teardown."""
    made: list[FailoverConnection] = []

    def make(url: str, **kwargs) -> FailoverConnection:
        connection = FailoverConnection(url, **kwargs)
        made.append(connection)
        return connection

    yield make
    for connection in made:
        connection.disconnect(timeout=5)


def failover(*ports: int, options: str = "randomize=false&" + FAST) -> str:
    return "failover:(" + ",".join(f"tcp://{HOST}:{p}" for p in ports) + ")" + (f"?{options}" if options else "")


class Inbox:
    """What a subscription's callback got, with bounded waits."""

    def __init__(self, on_message: Callable[[Message], None] | None = None) -> None:
        self.messages: list[Message] = []
        self._cond = threading.Condition()
        self._on_message = on_message

    def __call__(self, message: Message) -> None:
        if self._on_message is not None:
            self._on_message(message)
        with self._cond:
            self.messages.append(message)
            self._cond.notify_all()

    def wait_until(self, predicate: Callable[[list[Message]], bool], what: str, timeout: float = 20) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self.messages), timeout):
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; got "
                                     f"{[m.body for m in self.messages][:50]}")

    def bodies(self) -> list[str]:
        with self._cond:
            return [m.body for m in self.messages]


def copies_by_send_id(frames) -> dict[str, list[dict[str, str]]]:
    found: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    for frame in frames:
        found[frame.headers[SEND_ID]].append(frame.headers)
    return found


def assert_no_unmarked_duplicates(copies: dict[str, list[dict[str, str]]]) -> None:
    """Each message reached the consumer with at most one copy not marked resent."""
    unmarked_twice = {sid: len(c) for sid, c in copies.items() if sum(h.get(RESENT) != "true" for h in c) > 1}
    assert not unmarked_twice, f"duplicated without the resend mark: {unmarked_twice}"
    for sid, c in copies.items():
        if len(c) > 1:
            assert any(h.get(RESENT) == "true" for h in c), (sid, c)


# ---------------------------------------------------------------------------------------
# Producers
# ---------------------------------------------------------------------------------------


def test_producer_fails_over_mid_stream_and_loses_no_receipted_message(mesh, clients):
    a, b = mesh(2)
    queue = "/queue/" + unique("fo")
    consumer = b.client()  # on the node that survives
    consumer.subscribe(queue)
    producer = clients(failover(a.stomp, b.stomp)).connect()
    assert producer.broker.port == a.stomp  # first-element: A first

    n, window = 400, 20
    handles: list = []
    failures: list[BaseException] = []

    killed = threading.Event()  # the second half goes after the kill, however fast the first went

    def produce() -> None:
        try:
            for i in range(n):
                if i == n // 2:
                    killed.wait(30)
                if i >= window:
                    handles[i - window].wait(30)  # at most `window` SENDs in flight
                handles.append(producer.send(queue, f"m{i}", {"persistent": "true"}, wait=False))
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            failures.append(e)

    sender = threading.Thread(target=produce, daemon=True)
    sender.start()
    wait_until(lambda: sum(h.done for h in list(handles)) >= 150 or failures, "150 receipts from A")
    pid = a.proc.pid
    a.kill9()  # SIGKILL to the PID this test started, mid-stream
    killed.set()
    sender.join(60)
    assert not sender.is_alive(), "the producer did not finish after the failover"
    assert not failures, failures
    for handle in handles:
        handle.wait(30)  # every SEND got its RECEIPT, from A before the kill or from B after
    assert len(handles) == n and all(h.receipted for h in handles)
    assert producer.broker.port == b.stomp
    assert producer.stats.reconnects == 1, producer.stats
    assert a.proc.pid == pid and not a.running

    # What A stored and had not forwarded comes back with A, from its data dir.
    a.restart()
    a.wait_linked(b)
    send_ids = {h.send_id for h in handles}
    consumer.listener.wait_until(lambda: send_ids <= {m.headers.get(SEND_ID) for m in consumer.listener.messages},
                                 "every receipted message on B", timeout=60)
    copies = copies_by_send_id(consumer.listener.messages)
    assert set(copies) == send_ids
    assert_no_unmarked_duplicates(copies)
    marked = {sid for sid, c in copies.items() if any(h.get(RESENT) == "true" for h in c)}
    assert len(marked) <= producer.stats.resent
    print(f"resent {producer.stats.resent}, received {sum(map(len, copies.values()))} for {n}, "
          f"{sum(len(c) > 1 for c in copies.values())} twice (marked)")


def test_sends_in_flight_when_the_node_dies_are_resent_marked(mesh, clients):
    """A node frozen (SIGSTOP) then killed never read the last SENDs: the client resends
    every one of them to the other node, marked, and each arrives exactly once."""
    a, b = mesh(2)
    queue = "/queue/" + unique("inflight")
    consumer = b.client()
    consumer.subscribe(queue)
    producer = clients(failover(a.stomp, b.stomp)).connect()
    for i in range(20):
        producer.send(queue, f"before{i}", {"persistent": "true"})
    os.kill(a.proc.pid, signal.SIGSTOP)  # A reads nothing more...
    try:
        in_flight = [producer.send(queue, f"inflight{i}", {"persistent": "true"}, wait=False) for i in range(30)]
        assert producer.unreceipted == 30
    finally:
        a.kill9()  # ...and dies with them unread in its socket buffer
    producer.flush(30)
    assert all(h.receipted for h in in_flight)
    assert producer.stats.resent == 30
    assert producer.broker.port == b.stomp

    a.restart()  # anything of the first 20 not yet forwarded comes back with A
    a.wait_linked(b)
    consumer.listener.wait_for(50, timeout=30)
    copies = copies_by_send_id(consumer.listener.messages)
    by_body = {m.body: m.headers for m in consumer.listener.messages}
    assert sorted(by_body) == sorted([f"before{i}" for i in range(20)] + [f"inflight{i}" for i in range(30)])
    assert all(len(c) == 1 for c in copies.values()), "A never read the in-flight SENDs: no copy is expected"
    assert all(by_body[f"inflight{i}"].get(RESENT) == "true" for i in range(30))
    assert all(RESENT not in by_body[f"before{i}"] for i in range(20))
    assert {by_body[f"inflight{i}"][SEND_ID] for i in range(30)} == {h.send_id for h in in_flight}


# ---------------------------------------------------------------------------------------
# Consumers
# ---------------------------------------------------------------------------------------


def test_consumer_resubscribes_on_the_other_node_and_keeps_receiving(mesh, clients):
    a, b = mesh(2)
    queue = "/queue/" + unique("cons")
    consumer = clients(failover(a.stomp, b.stomp), heartbeats=(1000, 1000)).connect()
    assert consumer.broker.port == a.stomp
    held: list[Message] = []
    acked: list[bool] = []

    def settle(message: Message) -> None:
        if message.body == "p1-9":
            held.append(message)  # left unacked: A keeps it
        else:
            acked.append(consumer.ack(message))

    inbox = Inbox(settle)
    sub_id = consumer.subscribe(queue, id="orders-sub", ack="client-individual",
                                headers={"activemq.prefetchSize": "50"}, callback=inbox)
    assert sub_id == "orders-sub"
    producer = b.client()  # on the node that survives; B forwards to A's consumer
    for i in range(10):
        producer.send(queue, f"p1-{i}", receipt=True, persistent="true")
    inbox.wait_until(lambda ms: len(ms) >= 10, "10 messages through A")

    a.kill9()
    b.wait_log(rf"mesh: link with {a.name} lost")  # B no longer forwards to A
    for i in range(10):
        producer.send(queue, f"p2-{i}", receipt=True, persistent="true")
    assert consumer.wait_connected(20).port == b.stomp
    inbox.wait_until(lambda ms: {f"p2-{i}" for i in range(10)} <= {m.body for m in ms}, "the messages sent after")

    after = [m for m in inbox.messages if m.body.startswith("p2-")]
    assert all(m.subscription == "orders-sub" for m in after)  # the same subscription id
    assert all(m.generation != held[0].generation for m in after)  # on the new connection
    assert consumer.stats.resubscribed == 1 and consumer.stats.reconnects == 1
    assert consumer.ack(held[0]) is False  # its connection is gone: not sent, A redelivers it
    assert all(acked)
    # The acks on B were taken (no ERROR closed the connection): nothing is left there.
    assert consumer.is_connected() and consumer.stats.reconnects == 1
    consumer.unsubscribe("orders-sub")
    leftover = b.client()
    leftover.subscribe(queue)
    fence = unique("fence")
    leftover.send(queue, fence, receipt=True)
    assert [m.body for m in leftover.listener.wait_for_body(fence)] == [fence]


def test_a_subscription_without_callback_is_read_with_receive_across_a_failover(mesh, clients):
    a, b = mesh(2)
    queue = "/queue/" + unique("recv")
    consumer = clients(failover(a.stomp, b.stomp)).connect()
    consumer.subscribe(queue, ack="auto")
    producer = clients(failover(b.stomp)).connect()
    producer.send(queue, "one", {"persistent": "true"})
    first = consumer.receive(20)
    assert first is not None and first.body == "one" and not first.possible_duplicate
    a.kill9()
    b.wait_log(rf"mesh: link with {a.name} lost")
    producer.send(queue, "two", {"persistent": "true"})
    second = consumer.receive(20)
    assert second is not None and second.body == "two"
    assert consumer.broker.port == b.stomp


# ---------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------


def group_of(node) -> str:
    match = re.search(r'group = "(udp://[^"]+)"', node.config)
    assert match, node.config
    return match.group(1)


def test_udp_discovery_finds_the_nodes_of_the_mesh_and_fails_over_between_them(mesh, clients):
    a, b = mesh(2, discovery=True)
    group = group_of(a)
    found = discover(f"{group}?interface=127.0.0.1&window=1500", cluster_password=mesh.password)
    assert {(f.host, f.port) for f in found} == {(HOST, a.stomp), (HOST, b.stomp)}
    assert all(not f.tls for f in found)
    assert discover(f"{group}?window=600", cluster_password="not-the-password") == []  # unsigned: ignored

    producer = clients(f"failover:({group}?window=1000)?{FAST}", cluster_password=mesh.password).connect()
    first = producer.broker
    assert first is not None and first.port in (a.stomp, b.stomp)
    victim, survivor = (a, b) if first.port == a.stomp else (b, a)
    queue = "/queue/" + unique("disc")
    consumer = survivor.client()
    consumer.subscribe(queue)
    producer.send(queue, "before", {"persistent": "true"})
    victim.kill9()
    producer.send(queue, "after", {"persistent": "true"}, timeout=30)
    assert producer.broker.port == survivor.stomp
    got = consumer.listener.wait_for_body("after", timeout=20)
    assert "after" in [m.body for m in got]


@pytest.fixture
def dns_server(tmp_path):
    server = DnsServer(tmp_path)
    yield server
    server.stop()


def test_dns_discovery_uses_srv_records_and_a_records_as_the_nodes_do(broker_factory, dns_server, clients):
    one, two = broker_factory(name="one"), broker_factory(name="two")
    dns_server.set(
        a={"one.nodes.test": [HOST], "two.nodes.test": [HOST], "stomp.test": ["127.0.0.1", "127.0.0.2"]},
        srv={"_stomp._tcp.mesh.test": [("one.nodes.test", one.port), ("two.nodes.test", two.port)]},
    )
    server = f"server={dns_server.address}"
    srv = discover(f"dns://mesh.test?{server}")
    assert {(f.host, f.port) for f in srv} == {(HOST, one.port), (HOST, two.port)}
    a_records = discover(f"dns://stomp.test:{one.port}?{server}")
    assert {(f.host, f.port) for f in a_records} == {("127.0.0.1", one.port), ("127.0.0.2", one.port)}
    assert discover(f"dns://missing.test?{server}") == []  # NXDOMAIN: no brokers

    connection = clients(f"failover:(dns://mesh.test?{server})?policy=first-element&{FAST}").connect()
    assert connection.broker.port in (one.port, two.port)
    queue = "/queue/" + unique("dns")
    connection.send(queue, "via dns", {"persistent": "true"})
    victim, survivor = (one, two) if connection.broker.port == one.port else (two, one)
    label = f"{survivor.name}.nodes.test"
    dns_server.set(a={label: [HOST]}, srv={"_stomp._tcp.mesh.test": [(label, survivor.port)]})
    victim.kill9()
    connection.send(queue, "after the records changed", timeout=30)
    assert connection.broker.port == survivor.port


# ---------------------------------------------------------------------------------------
# TLS, limits and refusals
# ---------------------------------------------------------------------------------------


def test_ssl_brokers_are_reached_over_tls(broker_factory, clients, tmp_path):
    from test_e2e_tls import _issue, _tls_config

    _, _, cert, key = _issue(tmp_path, "server", "localhost")
    broker = broker_factory(config=_tls_config(cert, key), tls=True)
    connection = clients(f"failover:(ssl://{HOST}:{broker.tls_port})", ssl={"ca_certs": str(cert)}).connect()
    assert connection.broker.tls
    queue = "/queue/" + unique("tls")
    inbox = Inbox()
    connection.subscribe(queue, callback=inbox)
    connection.send(queue, "over tls")
    inbox.wait_until(lambda ms: [m.body for m in ms] == ["over tls"], "the message over TLS")


def test_connect_gives_up_after_the_startup_attempts_and_names_the_brokers(clients):
    ports = (free_port(), free_port())  # nobody listens there
    url = failover(*ports, options="startupMaxReconnectAttempts=2&initialReconnectDelay=50")
    started = time.monotonic()
    with pytest.raises(ConnectFailed) as raised:
        clients(url).connect()
    assert time.monotonic() - started < 10
    assert "3 pass(es)" in str(raised.value)  # the first pass and 2 more
    assert all(str(p) in str(raised.value) for p in ports)


def test_a_send_while_no_broker_is_up_times_out_then_the_client_gives_up(broker_factory, clients):
    broker = broker_factory()
    url = failover(broker.port, options="timeout=500&maxReconnectAttempts=3&initialReconnectDelay=100"
                                        "&useExponentialBackOff=false")
    connection = clients(url).connect()
    connection.send("/queue/" + unique("t"), "ok")
    broker.kill9()
    started = time.monotonic()
    with pytest.raises((SendTimeout, ConnectFailed)):
        connection.send("/queue/" + unique("t"), "nowhere to go")
    assert time.monotonic() - started < 5  # ~0.5 s: the URL's timeout
    wait_until(lambda: connection.state == "failed", "the client to give up after 3 passes")
    assert isinstance(connection.failure, ConnectFailed)
    with pytest.raises(ConnectFailed):
        connection.send("/queue/x", "after giving up")


USERS = {"alice": ["writers"], "bob": ["readers"]}
RULES = [
    {"destination": ">", "read": ["writers"], "write": ["writers"], "admin": ["writers"]},
    {"destination": "/queue/public.>", "read": ["readers"]},
]


def test_refusals_are_not_retried_resent_or_resubscribed(broker_factory, clients, hashes):
    broker = broker_factory(config=security_config(hashes, USERS, RULES))
    url = failover(broker.port)
    with pytest.raises(ConnectRefused):
        clients(url, login="alice", passcode="wrong").connect()

    reader = clients(url, login="bob", passcode="bob-secret").connect()
    with pytest.raises(SendRefused):
        reader.send("/queue/public." + unique("denied"), "no", {"persistent": "true"})
    wait_until(lambda: reader.stats.reconnects == 1, "the reconnect after the broker closed the connection")
    with pytest.raises(FrameRefused):
        reader.subscribe("/queue/private." + unique("denied"), id="private")
    wait_until(lambda: reader.stats.reconnects == 2, "the reconnect after the refused SUBSCRIBE")

    writer = clients(url, login="alice", passcode="alice-secret").connect()
    queue = "/queue/public." + unique("allowed")
    writer.send(queue, "yes", {"persistent": "true"})
    reader.subscribe(queue, id="public")
    message = reader.receive(10)
    assert message is not None and message.body == "yes" and message.send_id
    # Two refusals, two reconnects: the refused SEND was not resent, the refused
    # subscription not made again (which would have been refused again, and again).
    assert reader.stats.reconnects == 2 and reader.stats.resent == 0 and reader.stats.resubscribed == 0
    assert reader.is_connected()
