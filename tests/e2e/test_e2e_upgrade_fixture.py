"""The upgrade of data dirs written by Meshgate 0.1.0: today's nodes start on copies of
tests/fixtures/datadir-0.1.0 (two nodes of a mesh, made by scripts/make_upgrade_fixture.py
and never made again, see tests/fixtures/README.md) and show everything its manifest
lists: each waiting message delivered once with its id, body, priority and headers, the
durable subscription's messages from both nodes, the definitions, the AMQP exchange and
its binding; the messages A held in custody while B stored them are resolved (B keeps
them, A forgets its copies) and stay resolved across one more restart."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pika
import pytest
from amqp_support import amqp_port
from e2e_support import HOST, BrokerProcess, manage_result
from mesh_support import LINK_TIMEOUT, free_port, wait_until
from stomp_client import Client

from gateway.broker.message import DEFAULT_PRIORITY
from model.requests import Definitions, Queues, Subscriptions, Summary

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "datadir-0.1.0"
MANIFEST = json.loads((FIXTURE / "manifest.json").read_text())
NAMES = sorted(MANIFEST["nodes"])
RECOVERY_TIMEOUT = 20.0  # messages in doubt wait for the peer's answer, which comes once the link is up


class Mesh:
    """The fixture's nodes on copies of their data dirs, their configs' ports made free."""

    def __init__(self, tmp_path: Path) -> None:
        links = {name: free_port() for name in NAMES}
        moved = {MANIFEST["nodes"][name]["link_port"]: port for name, port in links.items()}
        moved[MANIFEST["relay_port"]] = links["B"]  # A dialled B through the fixture maker's relay
        self.nodes: dict[str, BrokerProcess] = {}
        for name in NAMES:
            node = MANIFEST["nodes"][name]
            data_dir = tmp_path / node["data_dir"]
            shutil.copytree(FIXTURE / node["data_dir"], data_dir)
            # One pass, so that a new port equal to another old one is not moved again (AMQP's :0 stays).
            config = re.sub(rf'"{re.escape(HOST)}:(\d+)"',
                            lambda found: f'"{HOST}:{moved.get(int(found[1]), found[1])}"',
                            (FIXTURE / node["config"]).read_text())
            assert f'bind = "{HOST}:{links[name]}"' in config, f"{node['config']}: its [mesh] bind was not moved"
            self.nodes[name] = BrokerProcess(tmp_path, name=name, config=config, data_dir=data_dir)

    def start(self) -> None:
        for node in self.nodes.values():
            node.start(port=0)  # a fresh STOMP port each time: the last one may be taken meanwhile
        for name, node in self.nodes.items():
            for peer in self.nodes:
                if peer != name:
                    assert node.output is not None
                    linked = node.output.wait_for(rf"mesh: linked with {peer}$", "stderr", LINK_TIMEOUT)
                    assert linked, f"{name} did not link with {peer}\n{self.describe()}"
        wait_until(lambda: all(self.summary(name).in_doubt == 0 for name in NAMES),
                   "no message in doubt on any node (custody resolved)", RECOVERY_TIMEOUT, self.describe)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def summary(self, name: str):
        return manage_result(self.nodes[name].port, Summary()).node

    def describe(self) -> str:
        return "\n".join(node.describe() for node in self.nodes.values())

    def cleanup(self) -> None:
        for node in self.nodes.values():
            node.cleanup()


@pytest.fixture
def mesh(tmp_path) -> Iterator[Mesh]:
    upgraded = Mesh(tmp_path)
    try:
        yield upgraded
    finally:
        upgraded.cleanup()


def holdings(mesh: Mesh) -> dict[str, dict[str, int]]:
    """Per node, what waits (or is held) in each of the manifest's queues and durable subscriptions."""
    found: dict[str, dict[str, int]] = {}
    for name, node in mesh.nodes.items():
        counts = found[name] = {}
        for queue in manage_result(node.port, Queues()):
            if queue.name in MANIFEST["queues"]:
                counts[queue.name] = queue.depth + queue.in_flight + queue.in_doubt + queue.forwarding
        for sub in manage_result(node.port, Subscriptions()):
            if sub.durable and sub.name in MANIFEST["durable_subscriptions"]:
                counts[sub.name] = sub.depth + sub.in_flight
    return found


def expected_holdings() -> dict[str, dict[str, int]]:
    return {name: {what: entry["depth"][name]
                   for what, entry in {**MANIFEST["queues"], **MANIFEST["durable_subscriptions"]}.items()}
            for name in NAMES}


def differences(expected: dict[str, dict[str, int]], found: dict[str, dict[str, int]]) -> list[str]:
    return [f"{name} {what}: the fixture holds {count}, the node shows {found[name].get(what, 'nothing')}"
            for name, counts in expected.items() for what, count in counts.items()
            if found[name].get(what, 0) != count]


def consume(node: BrokerProcess, connect, destination: str, count: int, client_id: str | None = None,
            subscription: str | None = None) -> Client:
    """A client of ``node`` that subscribed to ``destination`` (durably, if named) and has
    ``count`` messages, unacked."""
    client = connect(node, headers={"client-id": client_id} if client_id else {})
    durable = {"activemq.subscriptionName": subscription} if subscription else {}
    client.subscribe(destination, ack="client-individual", headers=durable)
    client.listener.wait_for(count, timeout=RECOVERY_TIMEOUT)
    return client


def check_messages(what: str, frames: list, expected: list[dict]) -> None:
    """Each expected message once, with its body, priority and headers as 0.1.0 stored them."""
    by_id = {message["id"]: message for message in expected}
    ids = [frame.headers["message-id"] for frame in frames]
    missing = [by_id[i]["headers"].get("fixture-seq", i) for i in by_id if i not in ids]
    assert not missing, f"{what}: messages of the fixture not delivered: {missing}"
    assert sorted(ids) == sorted(by_id), f"{what}: delivered {ids}, the fixture holds each of {sorted(by_id)} once"
    for frame in frames:
        message = by_id[frame.headers["message-id"]]
        label = f"{what} message {message['id']} ({message['headers'].get('fixture-seq')})"
        assert hashlib.sha256(frame.body.encode()).hexdigest() == message["sha256"], f"{label}: body differs"
        changed = {key: (value, frame.headers.get(key)) for key, value in message["headers"].items()
                   if frame.headers.get(key) != value}
        assert not changed, f"{label}: headers (stored, delivered) differ: {changed}"
        assert priority(frame) == message["priority"], f"{label}: priority differs"


def priority(frame) -> int:
    """A MESSAGE frame's priority: a message sent without one has the default, and no header."""
    return int(frame.headers.get("priority", DEFAULT_PRIORITY))


def by_kind_and_name(definition: dict) -> tuple[str, str]:
    return definition["kind"], definition["name"]


def settle(clients: list[Client]) -> None:
    """Ack what each client got, and leave (what it did not ack would go back to its queue)."""
    for client in clients:
        for frame in client.messages:
            client.ack(frame)
        client.disconnect()


def test_a_mesh_written_by_0_1_0_comes_back_whole_on_todays_code(mesh, connect):
    mesh.start()
    wrong = differences(expected_holdings(), holdings(mesh))
    assert not wrong, "after recovery:\n" + "\n".join(wrong)

    definitions = sorted(MANIFEST["definitions"], key=by_kind_and_name)
    for name, node in mesh.nodes.items():
        held = sorted(msgspec.to_builtins(manage_result(node.port, Definitions())), key=by_kind_and_name)
        assert held == definitions, f"{name}: definitions differ from the fixture's catalog"

    clients = []
    for queue, entry in MANIFEST["queues"].items():
        for name, depth in entry["depth"].items():
            if depth:
                client = consume(mesh.nodes[name], connect, "/queue/" + queue, depth)
                check_messages(f"{name} /queue/{queue}", client.messages, entry["messages"])
                priorities = [priority(frame) for frame in client.messages]
                assert priorities == sorted(priorities, reverse=True), f"{queue}: not in priority order {priorities}"
                clients.append(client)
    for subscription, entry in MANIFEST["durable_subscriptions"].items():
        # One subscriber, on A: B's part follows it over the link.
        client = consume(mesh.nodes["A"], connect, entry["topic"], sum(entry["depth"].values()),
                         entry["client_id"], entry["subscription"])
        check_messages(f"durable subscription {subscription}", client.messages, entry["messages"])
        clients.append(client)
    settle(clients)
    emptied = {name: dict.fromkeys(counts, 0) for name, counts in expected_holdings().items()}
    wait_until(lambda: not differences(emptied, holdings(mesh)), "every queue and subscription emptied",
               describe=lambda: "\n".join(differences(emptied, holdings(mesh))))
    for client in clients:  # nothing more came before they left: no copy of anything
        assert len(client.messages) == len({frame.headers["message-id"] for frame in client.messages})

    check_exchanges(mesh)

    # Resolved for good: another restart brings back no copy that was in custody.
    mesh.stop()
    mesh.start()
    wrong = differences(emptied, holdings(mesh))
    assert not wrong, "after a second restart:\n" + "\n".join(wrong)


def check_exchanges(mesh: Mesh) -> None:
    """Every node has the exchange and the queue, and routes by the binding."""
    for name, node in mesh.nodes.items():
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            HOST, amqp_port(node), credentials=pika.PlainCredentials("guest", "guest"), connection_attempts=1))
        try:
            channel = connection.channel()
            for exchange, spec in MANIFEST["exchanges"].items():
                channel.exchange_declare(exchange, spec["type"], passive=True)
            channel.confirm_delivery()
            for binding in MANIFEST["bindings"]:
                channel.queue_declare(binding["destination"], passive=True)
                key = binding["routing_key"].replace("#", "upgrade").replace("*", "upgrade")
                # Unroutable (no binding) raises; routed, it waits in the queue.
                channel.basic_publish(binding["source"], key, b"routed after the upgrade", mandatory=True)
                method, _, body = channel.basic_get(binding["destination"], auto_ack=True)
                assert body == b"routed after the upgrade", f"{name}: {binding} routed nothing ({method})"
        finally:
            connection.close()
