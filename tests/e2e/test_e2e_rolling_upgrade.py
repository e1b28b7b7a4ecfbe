"""Operating the mesh as Kubernetes does, simulated (tests/e2e/pods_support.py): the
StatefulSet of deploy/kubernetes/ as three "pods" run from the built image's file system,
each in a network namespace of its own, found through a DNS server that answers as the
cluster's DNS would, with producers and consumers on the failover client (over TLS,
through the clients' Service name) running throughout.

- A rolling restart (what an upgrade does): each pod in turn, from the highest ordinal
  down, gets its preStop hook and SIGTERM as the kubelet sends them, and comes back under
  its name with its volume and a new address; the next pod goes once it is ready.
- A scale-in from 3 to 2: the preStop hook of the pod that goes reads the StatefulSet's
  replicas from the API server and scales the node down, which hands its messages over.

Pass: every receipted message is consumed, a message consumed twice was marked (resent by
the producer's client or redelivered by the broker), and no pod, gone or not, holds
anything for the queues at the end.

Slow (builds the image once per session; ~2 min of pods); needs root."""

from __future__ import annotations

import os
import secrets
import ssl
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from e2e_support import unique
from image_support import run
from mesh_support import wait_until
from pods_support import CLIENTS, PORTS, Cluster, Pod

from management.client import ManagementClient
from meshgate.client import FailoverConnection, Message
from model.requests import Queues

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

OPERATOR = "operator"
WINDOW = 10  # SENDs in flight per producer


@pytest.fixture
def cluster(image, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("network namespaces, mounts and chroot need root")
    container = run("buildah", "from", "--name", unique("meshgate-pods"), image).strip()
    try:
        root = Path(run("buildah", "mount", container).strip())
        made = Cluster(root, tmp_path, cluster_password=secrets.token_urlsafe(16),
                       operator_password=secrets.token_urlsafe(16))
        try:
            yield made
        finally:
            made.close()
    finally:
        run("buildah", "umount", container)
        run("buildah", "rm", container)


def start_statefulset(cluster: Cluster, replicas: int = 3) -> list[Pod]:
    """podManagementPolicy Parallel: every pod at once, then each until ready."""
    pods = [cluster.create(ordinal) for ordinal in range(replicas)]
    for pod in pods:
        cluster.wait_ready(pod)
    return pods


class Traffic:
    """Producers and consumers of ``queue`` on the failover client, through the clients'
    Service (its DNS name: ready pods only), over TLS, logged in as the operator."""

    def __init__(self, cluster: Cluster, queue: str) -> None:
        self.cluster, self.queue = cluster, queue
        self.url = (f"failover:(dns://{CLIENTS}:{PORTS['stomp-tls']}?server={cluster.network.gateway}:53&tls=true)"
                    "?initialReconnectDelay=50&maxReconnectDelay=1000")
        self.connections: list[FailoverConnection] = []
        self.receipted: set[str] = set()
        self.deliveries: dict[str, list[Message]] = defaultdict(list)  # by send id
        self.failures: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop_producing = threading.Event()
        self._producers: list[threading.Thread] = []

    def connection(self, url: str | None = None) -> FailoverConnection:
        connection = FailoverConnection(url or self.url, login=OPERATOR, passcode=self.cluster.operator_password,
                                        heartbeats=(1000, 1000), ssl={"ca_certs": str(self.cluster.ca_file)})
        self.connections.append(connection)
        return connection.connect()

    def start(self, producers: int = 2, consumers: int = 2) -> None:
        for _ in range(consumers):
            self.consume(self.queue)
        for index in range(producers):
            thread = threading.Thread(target=self._produce, args=(self.connection(), f"p{index}"), daemon=True)
            self._producers.append(thread)
            thread.start()

    def consume(self, queue: str) -> None:
        consumer = self.connection()

        def settle(message: Message) -> None:
            with self._lock:
                self.deliveries[message.send_id or ""].append(message)
            consumer.ack(message)

        consumer.subscribe(queue, ack="client-individual", headers={"activemq.prefetchSize": "20"}, callback=settle)

    def _produce(self, producer: FailoverConnection, name: str) -> None:
        handles: list = []
        try:
            index = 0
            while not self._stop_producing.is_set():
                if len(handles) >= WINDOW:
                    self._settle(handles.pop(0))
                handles.append(producer.send(self.queue, f"{name}-{index}", {"persistent": "true"}, wait=False))
                index += 1
            for handle in handles:
                self._settle(handle)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.failures.append(error)

    def _settle(self, handle) -> None:
        handle.wait(120)
        with self._lock:
            self.receipted.add(handle.send_id)

    def consumed(self) -> set[str]:
        with self._lock:
            return set(self.deliveries)

    def wait_progress(self, receipted: int = 100, consumed: int = 100, timeout: float = 90) -> None:
        """Until ``receipted`` more SENDs have their RECEIPT and ``consumed`` more messages arrived."""
        target = (len(self.receipted) + receipted, len(self.consumed()) + consumed)
        wait_until(lambda: self.failures or (len(self.receipted) >= target[0] and len(self.consumed()) >= target[1]),
                   "traffic through the mesh", timeout=timeout,
                   describe=lambda: f"receipted {len(self.receipted)}, consumed {len(self.consumed())}, want {target}")
        assert not self.failures, self.failures

    def stop_producing(self) -> None:
        self._stop_producing.set()
        for thread in self._producers:
            thread.join(180)
            assert not thread.is_alive(), "a producer did not finish"
        assert not self.failures, self.failures

    def assert_every_receipted_consumed_once_unmarked(self, timeout: float = 120) -> None:
        wait_until(lambda: self.receipted <= self.consumed(), "every receipted message consumed", timeout=timeout,
                   describe=lambda: f"missing {len(self.receipted - self.consumed())} of {len(self.receipted)}: "
                                    f"{sorted(self.receipted - self.consumed())[:10]}")
        with self._lock:
            unmarked_twice = {send_id: len(copies) for send_id, copies in self.deliveries.items()
                              if sum(not copy.possible_duplicate for copy in copies) > 1}
            twice = sum(len(copies) > 1 for copies in self.deliveries.values())
        assert not unmarked_twice, f"consumed twice without resent/redelivered: {unmarked_twice}"
        print(f"{len(self.receipted)} receipted, {len(self.consumed())} consumed, {twice} twice (marked)")

    def close(self) -> None:
        self._stop_producing.set()
        for connection in self.connections:
            connection.disconnect(timeout=5)


@pytest.fixture
def traffic(cluster):
    made: list[Traffic] = []

    def make(queue: str) -> Traffic:
        made.append(Traffic(cluster, queue))
        return made[-1]

    yield make
    for each in made:
        each.close()


def held(cluster: Cluster, address: str) -> dict[str, int]:
    """What each pod holds for ``address`` (waiting, delivered and unacked, being forwarded, in
    doubt), asked over its TLS STOMP port as the operator."""
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    depths = {}
    for pod in cluster.pods.values():
        with ManagementClient(pod.address, PORTS["stomp-tls"], OPERATOR, cluster.operator_password, 15,
                              context) as client:
            reply = client.ask(Queues(name=address, node=pod.name))
        assert reply.ok and not reply.failures, reply
        depths[pod.name] = sum(q.depth + q.in_flight + q.forwarding + q.in_doubt for q in reply.result)
    return depths


def send_backlog(traffic, pod: Pod, address: str, count: int) -> None:
    """``count`` messages for ``address``, which has no consumer yet, sent straight to ``pod``."""
    producer = traffic.connection(f"failover:(ssl://{pod.url('stomp-tls')})?maxReconnectAttempts=0")
    for index in range(count):
        handle = producer.send(f"/queue/{address}", f"{pod.name}-{index}", {"persistent": "true"})
        assert handle is not None and handle.receipted
        traffic.receipted.add(handle.send_id)
    producer.disconnect()


def test_a_rolling_restart_of_every_pod_loses_nothing(cluster, traffic):
    pods = start_statefulset(cluster)
    live, backlog = unique("live"), unique("backlog")
    load = traffic(f"/queue/{live}")
    load.start()
    waiting = traffic(f"/queue/{backlog}")
    for pod in pods:  # messages that wait on every pod while it restarts
        send_backlog(waiting, pod, backlog, 100)
    load.wait_progress()
    for ordinal in (2, 1, 0):  # a RollingUpdate goes from the highest ordinal down
        old = cluster.pods[f"meshgate-{ordinal}"]
        assert held(cluster, backlog)[old.name] == 100
        hook = cluster.delete(old)
        assert hook.returncode == 0, hook.stderr
        assert f"meshgate-{ordinal} restarts (replicas=3)" in hook.stderr  # no scale-down on a restart
        assert old.stopped_with == 0, old.log.read_text()[-3000:]
        new = cluster.create(ordinal)
        assert new.address != old.address and new.volume == old.volume
        cluster.wait_ready(new)
        load.wait_progress(receipted=50, consumed=50)
    assert cluster.api.asked == 3  # each hook asked the API server for the replicas
    load.stop_producing()
    load.assert_every_receipted_consumed_once_unmarked()
    waiting.consume(f"/queue/{backlog}")
    waiting.assert_every_receipted_consumed_once_unmarked()
    for address in (live, backlog):
        wait_until(lambda address=address: sum(held(cluster, address).values()) == 0, "nothing left", timeout=60,
                   describe=lambda address=address: str(held(cluster, address)))


def test_a_scale_in_from_3_to_2_hands_the_leaving_pods_messages_over(cluster, traffic):
    pods = start_statefulset(cluster)
    leaving = pods[2]
    live, backlog = unique("live"), unique("backlog")
    load = traffic(f"/queue/{live}")
    load.start()
    waiting = traffic(f"/queue/{backlog}")
    send_backlog(waiting, leaving, backlog, 200)
    load.wait_progress()
    assert held(cluster, backlog)[leaving.name] == 200

    cluster.api.replicas = 2  # kubectl scale statefulset meshgate --replicas=2
    hook = cluster.delete(leaving)
    assert hook.returncode == 0, hook.stderr
    assert "meshgate-2 is removed for good (replicas=2): scale-down" in hook.stderr, hook.stderr
    assert "meshgate scale-down exited 0" in hook.stderr, hook.stderr
    assert leaving.stopped_with == 0, leaving.log.read_text()[-3000:]
    assert sorted(cluster.pods) == ["meshgate-0", "meshgate-1"]

    load.wait_progress(receipted=50, consumed=50)
    load.stop_producing()
    waiting.consume(f"/queue/{backlog}")  # meshgate-2 is gone for good: the backlog is on the others
    waiting.assert_every_receipted_consumed_once_unmarked()
    load.assert_every_receipted_consumed_once_unmarked()
    for address in (live, backlog):
        wait_until(lambda address=address: sum(held(cluster, address).values()) == 0, "nothing left", timeout=60,
                   describe=lambda address=address: str(held(cluster, address)))


def test_a_scale_in_from_3_to_1_at_once_hands_both_leaving_pods_messages_over(cluster, traffic):
    """podManagementPolicy Parallel deletes every pod above the new replicas at once: two
    nodes scale down together, and neither may leave its messages with the other."""
    pods = start_statefulset(cluster)
    backlog = unique("backlog")
    waiting = traffic(f"/queue/{backlog}")
    for pod in pods[1:]:
        send_backlog(waiting, pod, backlog, 200)
    cluster.api.replicas = 1
    with ThreadPoolExecutor(2) as deleting:
        hooks = dict(zip(pods[1:], deleting.map(cluster.delete, pods[1:]), strict=True))
    for pod, hook in hooks.items():
        assert hook.returncode == 0 and "scale-down exited 0" in hook.stderr, hook.stderr
        assert pod.stopped_with == 0, pod.log.read_text()[-3000:]
    assert sorted(cluster.pods) == ["meshgate-0"]
    waiting.consume(f"/queue/{backlog}")
    waiting.assert_every_receipted_consumed_once_unmarked(timeout=60)
