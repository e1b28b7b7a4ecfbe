"""Write the data dirs of a two-node mesh as this release of Meshgate leaves them, and
a manifest of what a node recovering them must show: the fixture an upgrade test
starts later releases on (tests/fixtures/README.md).

    .venv/bin/python scripts/make_upgrade_fixture.py [--commit SHA] OUT_DIR

It writes with the code of the tree it lies in, which must be one commit's (see
tests/fixtures/README.md for running it on an export of a commit).

OUT_DIR (new, or empty) gets ``A.toml``, ``B.toml`` (the nodes' configs), ``data-A/``,
``data-B/`` and ``manifest.json``. Real ``meshgate broker`` processes write it, through
real clients (stomp.py, pika, the management client):

- on A: queues with waiting messages (priorities, non-ASCII headers, a far expiry, a
  body of a few KB; some consumed, so the journal holds removals too), a queue
  definition, an AMQP exchange, queue and binding, messages published through it,
  and a durable topic subscription holding messages;
- on B: that subscription's part of the messages, and messages forwarded A -> B.

A dials B through a relay that stops passing B's bytes before the forwarded
messages go, so B stores them (with its duplicate markers) while A never hears
STORED: A keeps them, in custody, in its journal. Then A is killed (SIGKILL, a
crash) and B stopped with SIGTERM. A recovering mesh must hold each message once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "e2e")]
# The nodes run this tree's code too, not whatever tree the meshgate command was installed from.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

import pika  # noqa: E402
from amqp_support import amqp_port  # noqa: E402
from e2e_support import HOST, BrokerProcess, manage_result  # noqa: E402
from mesh_support import free_port, wait_until  # noqa: E402
from stomp_client import Client, open_client  # noqa: E402

import gateway  # noqa: E402
from gateway import __version__  # noqa: E402
from gateway.broker.message import Message  # noqa: E402
from gateway.store.records import replay  # noqa: E402
from mesh.custody import MARKER, PEER_RECORD  # noqa: E402
from model.definitions import QueueSettings  # noqa: E402
from model.requests import DefineQueue, Definitions, Links, Queues  # noqa: E402

CLUSTER_PASSWORD = "fixture-0.1.0-cluster-password"
FAR_EXPIRY_MS = 4102444800000  # 2100-01-01: never reached by a test run
ORDERS, EXPIRING, AUDIT, FORWARDED = "fixture.orders", "fixture.expiring", "fixture.audit", "fixture.forwarded"
EXCHANGE, BINDING_KEY = "fixture.events", "audit.#"
TOPIC, CLIENT_ID, SUBSCRIPTION = "/topic/fixture.prices", "fixture-client", "fixture-sub"
DURABLE_NAME = f"{CLIENT_ID}.{SUBSCRIPTION}"
FORWARDED_COUNT = 3


def node_config(link_port: int, static: list[int]) -> str:
    """A node's TOML: small journal files (so the fixture spans several), AMQP on a free port."""
    peers = ", ".join(f'"{HOST}:{port}"' for port in static)
    return (f'[mesh]\nbind = "{HOST}:{link_port}"\nstatic = [{peers}]\ncluster_password = "{CLUSTER_PASSWORD}"\n'
            "retry_interval_ms = 200\nmax_retry_interval_ms = 1000\ncheck_period_ms = 500\n"
            "connection_ttl_ms = 10000\n\n"
            f'[amqp]\nbind = "{HOST}:0"\n\n[store]\njournal_file_size = "2KiB"\n')


class HoldableRelay:
    """A TCP relay for one link connection whose way back (listener -> dialler) can be
    held: what the listener then sends is read and dropped, so the dialler never hears it.
    It accepts one connection only, so a redial after the link drops finds nobody."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.held = threading.Event()
        self._server = socket.create_server((HOST, self.port))
        self._sockets: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            dialler, _ = self._server.accept()
        except OSError:
            return  # closed before anyone dialled
        self._server.close()
        listener = socket.create_connection((HOST, self.target_port))
        self._sockets += [dialler, listener]
        threading.Thread(target=self._pump, args=(dialler, listener, lambda: False), daemon=True).start()
        threading.Thread(target=self._pump, args=(listener, dialler, self.held.is_set), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, dropping: Callable[[], bool]) -> None:
        try:
            while data := source.recv(65536):
                if not dropping():
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


def send(client: Client, destination: str, body: str, **headers: str) -> None:
    client.send(destination, body, receipt=True, headers={"persistent": "true", **headers})


def write_queues(a: BrokerProcess) -> None:
    """Waiting messages on A, after three that were consumed (removal records)."""
    client = open_client(a)
    for n in range(3):
        send(client, "/queue/" + ORDERS, f"consumed order {n}", **{"fixture-seq": f"consumed-{n}"})
    taker = open_client(a)
    taker.subscribe("/queue/" + ORDERS, ack="client-individual")
    for message in taker.listener.wait_for(3):
        taker.ack(message, receipt=True)
    taker.disconnect()
    customers = ["Zoë Ødegård", "東京 株式会社", "Łukasz Żółć", "Ана Иванова", "plain ascii"]
    for n, (priority, customer) in enumerate(zip([0, 4, 9, 4, 7], customers, strict=True)):
        send(client, "/queue/" + ORDERS, f"order {n} for {customer} — €{10 * n},00",
             **{"fixture-seq": f"order-{n}", "priority": str(priority), "customer": customer,
                "note": "naïve café: ✓ a:b", "content-type": "text/plain;charset=utf-8"})
    large = "".join(f"line {n:04d}: the quick brown fox jumps over the lazy dog\n" for n in range(100))
    send(client, "/queue/" + EXPIRING, "expires in 2100", **{"fixture-seq": "expiring-0",
                                                           "expires": str(FAR_EXPIRY_MS)})
    send(client, "/queue/" + EXPIRING, large, **{"fixture-seq": "expiring-large", "expires": str(FAR_EXPIRY_MS)})
    client.disconnect()


def write_amqp_definitions(a: BrokerProcess) -> None:
    """A durable topic exchange bound to a durable queue, and two messages routed through it."""
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        HOST, amqp_port(a), credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1))
    channel = connection.channel()
    channel.exchange_declare(EXCHANGE, "topic", durable=True)
    channel.queue_declare(AUDIT, durable=True)
    channel.queue_bind(AUDIT, EXCHANGE, BINDING_KEY)
    channel.confirm_delivery()
    for n, key in enumerate(["audit.eu", "audit.us.east"]):
        properties = pika.BasicProperties(delivery_mode=2, priority=n + 2, content_type="application/json",
                                          headers={"fixture-seq": f"audit-{n}", "origin": "Kraków"})
        channel.basic_publish(EXCHANGE, key, json.dumps({"audit": n, "city": "Kraków"}).encode(), properties,
                              mandatory=True)
    connection.close()


def write_durable_subscription(a: BrokerProcess, b: BrokerProcess) -> None:
    """Made on A while subscribed, then left: three messages wait on A, two on B."""
    subscriber = open_client(a, headers={"client-id": CLIENT_ID})
    subscriber.subscribe(TOPIC, headers={"activemq.subscriptionName": SUBSCRIPTION})
    subscriber.disconnect()
    wait_until(lambda: DURABLE_NAME in live_definitions(b), "B to hold the durable subscription", timeout=15)
    for node, count in ((a, 3), (b, 2)):
        client = open_client(node)
        for n in range(count):
            send(client, TOPIC, f"price {n} from {node.name}", **{"fixture-seq": f"price-{node.name}-{n}"})
        client.disconnect()


def live_definitions(node: BrokerProcess) -> set[str]:
    return {record.name for record in manage_result(node.port, Definitions()) if not record.deleted}


def write_forwarded_in_custody(a: BrokerProcess, b: BrokerProcess, relay: HoldableRelay) -> None:
    """Messages sent on A reach a consumer on B, which stores them with their markers;
    B's STORED never reaches A, which keeps them. The consumer leaves without acking,
    so they wait in B's queue."""
    consumer = open_client(b)
    consumer.subscribe("/queue/" + FORWARDED, ack="client-individual")
    wait_until(lambda: any(q.remote_demand for q in manage_result(a.port, Queues(name=FORWARDED))),
               "A to see B's consumer", timeout=15)
    relay.held.set()
    client = open_client(a)
    for n in range(FORWARDED_COUNT):
        send(client, "/queue/" + FORWARDED, f"forwarded {n}", **{"fixture-seq": f"forwarded-{n}"})
    client.disconnect()
    consumer.listener.wait_for(FORWARDED_COUNT)
    consumer.disconnect()
    wait_until(lambda: sum(q.depth for q in manage_result(b.port, Queues(name=FORWARDED))) == FORWARDED_COUNT,
               "the forwarded messages back in B's queue")
    in_flight = sum(link.in_flight for link in manage_result(a.port, Links()) if link.state == "up")
    assert in_flight == FORWARDED_COUNT, f"A should still have {FORWARDED_COUNT} messages in flight, has {in_flight}"


def read_journal(data_dir: Path) -> dict[str, list[Message]]:
    """What the node's journal holds: queue key -> its live messages, in enqueue order."""
    live: dict = {}
    segments = sorted((data_dir / "journal").glob("*.log"))
    for path in segments:
        size = path.stat().st_size
        if size:
            with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                replay(data, size, int(path.stem), live)
    held: dict[str, list[Message]] = {}
    for key, message in sorted(live.values(), key=lambda entry: entry[1].sequence):
        held.setdefault(key, []).append(message)
    return held


def describe_message(message: Message) -> dict:
    return {"id": message.id, "sha256": hashlib.sha256(message.body).hexdigest(), "size": len(message.body),
            "priority": message.priority, "expires": message.expires, "persistent": message.persistent,
            "headers": message.headers}


def node_record(process: BrokerProcess, stopped_by: str, link_port: int) -> dict:
    """What is on the node's disk: its id, config, journal files and records by key, catalog."""
    data_dir = process.data_dir
    held = read_journal(data_dir)
    return {
        "node_id": json.loads((data_dir / "node.json").read_text())["id"],
        "config": f"{process.name}.toml", "data_dir": data_dir.name, "link_port": link_port, "stopped_by": stopped_by,
        "journal_segments": {path.name: path.stat().st_size for path in sorted((data_dir / "journal").glob("*.log"))},
        "journal_records": {key: len(messages) for key, messages in held.items()},
        "catalog": json.loads((data_dir / "catalog.json").read_text()),
    }


def expectations(a: BrokerProcess, b: BrokerProcess) -> dict:
    """What a recovered mesh must show: the messages of each queue and of the durable
    subscription (each to be delivered once), where they wait once custody is resolved,
    the definitions every node holds, and the custody records there were."""
    held = {"A": read_journal(a.data_dir), "B": read_journal(b.data_dir)}
    in_custody = [m.id for m in held["A"]["Q:" + FORWARDED]]
    assert in_custody == [m.id for m in held["B"]["Q:" + FORWARDED]] and len(in_custody) == FORWARDED_COUNT, \
        "A's forwarded messages in custody should be exactly those B stored"
    markers = {key: len(records) for key, records in held["B"].items() if key.startswith(MARKER)}
    assert list(markers.values()) == [FORWARDED_COUNT], f"B should hold a marker per forwarded message: {markers}"
    queues: dict[str, dict] = {}
    durable_messages: list[dict] = []
    durable_depth = dict.fromkeys(held, 0)
    for node, records in held.items():
        for key, messages in records.items():
            if key.startswith("Q:"):
                entry = queues.setdefault(key[2:], {"messages": {}, "depth": {}})
                entry["messages"].update((m.id, describe_message(m)) for m in messages)
                # A's copies in custody go once B says it holds them.
                waiting = [m for m in messages if node == "B" or m.id not in in_custody]
                entry["depth"][node] = len(waiting)
            elif key == "D:" + DURABLE_NAME:
                durable_messages += [describe_message(m) for m in messages]
                durable_depth[node] = len(messages)
    for entry in queues.values():
        entry["messages"] = list(entry["messages"].values())
        entry["depth"] = {node: entry["depth"].get(node, 0) for node in held}
    sent = {ORDERS: 5, EXPIRING: 2, AUDIT: 2, FORWARDED: FORWARDED_COUNT}
    found = {name: len(entry["messages"]) for name, entry in queues.items()}
    assert found == sent and durable_depth == {"A": 3, "B": 2}, f"journals hold {found}, {durable_depth}"
    catalogs = [json.loads((p.data_dir / "catalog.json").read_text())["definitions"] for p in (a, b)]
    assert catalogs[0] == catalogs[1], "A and B should hold the same definitions"
    definitions = catalogs[0]
    return {
        "queues": queues,
        "durable_subscriptions": {DURABLE_NAME: {"client_id": CLIENT_ID, "subscription": SUBSCRIPTION,
                                                 "topic": TOPIC, "messages": durable_messages,
                                                 "depth": durable_depth}},
        "definitions": definitions,
        "exchanges": {d["name"]: d["exchange"] for d in definitions if d["kind"] == "exchange"},
        "bindings": [d["binding"] for d in definitions if d["kind"] == "binding"],
        "custody": {"queue": FORWARDED, "in_doubt_on": "A", "held_by": "B", "message_ids": in_custody,
                    "duplicate_markers_on_B": FORWARDED_COUNT,
                    "peer_records": {node: len(records.get(PEER_RECORD, [])) for node, records in held.items()}},
    }


CODE_DIRS = ["gateway", "mesh", "meshgate", "model", "management"]


class NotARelease(Exception):
    """The code at hand is not one commit's: a fixture written by it would stand for no release."""


def source_commit(given: str | None) -> str:
    """The commit whose code writes the fixture: ``given`` (a tree exported with ``git
    archive`` has no .git), else this checkout's HEAD, refused if the code differs from it."""
    if given:
        return given
    git = ["git", "-C", str(REPO)]
    changed = subprocess.run([*git, "status", "--porcelain", "--", *CODE_DIRS], capture_output=True, text=True)
    if changed.returncode != 0:
        raise NotARelease(f"{REPO} is not a git checkout: pass --commit with the commit it was exported from")
    if changed.stdout.strip():
        raise NotARelease("the code differs from HEAD, so it is no release's: export a commit with `git archive` "
                          "(tests/fixtures/README.md) and pass --commit")
    return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def make(out: Path, commit: str) -> dict:
    b_link, a_link = free_port(), free_port()
    b = BrokerProcess(out, name="B", config=node_config(b_link, []))
    b.start()
    relay = HoldableRelay(b_link)
    a = BrokerProcess(out, name="A", config=node_config(a_link, [relay.port]))
    try:
        a.start()
        for node, peer in ((a, "B"), (b, "A")):
            assert node.output is not None
            assert node.output.wait_for(rf"mesh: linked with {peer}$", "stderr", timeout=20), node.describe()
        manage_result(a.port, DefineQueue(queue=ORDERS, settings=QueueSettings(
            max_delivery_attempts=5, dead_letter_queue=ORDERS + ".dlq", max_length=1000)))
        write_amqp_definitions(a)
        write_durable_subscription(a, b)
        wanted = live_definitions(a)
        wait_until(lambda: live_definitions(b) == wanted, "B to hold every definition A holds", timeout=15)
        write_queues(a)
        write_forwarded_in_custody(a, b, relay)
        a.kill9()
        b.stop()
    finally:
        relay.close()
        a.cleanup()
        b.cleanup()
    return {
        "what": "data dirs of a two-node mesh written by Meshgate " + __version__,
        "meshgate_version": __version__, "commit": commit,
        "cluster_password": CLUSTER_PASSWORD,
        "relay_port": relay.port,  # A.toml's static peer: the relay to B's link
        "nodes": {"A": node_record(a, "SIGKILL", a_link), "B": node_record(b, "SIGTERM", b_link)},
        **expectations(a, b),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("out", type=Path, help="a new (or empty) directory")
    parser.add_argument("--commit", help="the commit the code was exported from (default: this checkout's HEAD)")
    args = parser.parse_args(argv)
    try:
        commit = source_commit(args.commit)
    except NotARelease as refusal:
        parser.error(str(refusal))
    out: Path = args.out.resolve()  # the nodes run in it, and take its paths from there
    if out.exists() and any(out.iterdir()):
        parser.error(f"{out} is not empty: the fixture is written into a new directory")
    out.mkdir(parents=True, exist_ok=True)
    manifest = {**make(out, commit), "command": " ".join(["scripts/make_upgrade_fixture.py", *argv])}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"wrote {out} with Meshgate {__version__} ({commit}, code in {Path(gateway.__file__).parent.parent})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
