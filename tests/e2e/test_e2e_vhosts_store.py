"""A vhost's persistent state across restarts (docs/vhosts.md): persistent messages
and durable subscriptions of a non-default vhost come back in that vhost alone, the
default vhost's data is what it was, and the data dir's "/" part is the one a node
without vhosts writes."""

from __future__ import annotations

import json

import pytest
from amqp_support import AMQP_ON
from e2e_support import unique
from vhost_support import TEAM_A, TEAM_B, VHOSTS, clients_fixture, drain  # noqa: F401  (the fixture)


def send_persistent(client, destination: str, bodies: list[str]) -> None:
    for body in bodies:
        client.send(destination, body, receipt=True, persistent="true")


@pytest.mark.parametrize("kill", [True, False], ids=["kill9", "sigterm"])
def test_a_vhosts_persistent_messages_and_durable_subscription_survive_a_restart_in_it_alone(
        broker_factory, clients, kill):
    node = broker_factory(config=VHOSTS, sets=[AMQP_ON])
    queue, topic = unique("orders"), "/topic/" + unique("news")

    def durable_subscriber():
        client = clients.stomp_on(node, TEAM_A, headers={"client-id": "reader"})
        client.subscribe(topic, id="d", headers={"activemq.subscriptionName": "news"})
        return client

    durable_subscriber().disconnect()
    send_persistent(clients.stomp_on(node, TEAM_A), "/queue/" + queue, ["a1", "a2"])
    send_persistent(clients.stomp_on(node, TEAM_A), topic, ["news for a"])
    send_persistent(clients.stomp_on(node, TEAM_B), topic, ["news for b"])  # no subscriber in team b
    send_persistent(clients.stomp_on(node, "/"), "/queue/" + queue, ["default"])

    node.restart(graceful=not kill)

    assert drain(clients.pika_on(node, TEAM_A).channel(), queue) == [b"a1", b"a2"]
    assert drain(clients.pika_on(node, "/").channel(), queue) == [b"default"]
    team_b = clients.stomp_on(node, TEAM_B)
    team_b.subscribe("/queue/" + queue)
    team_b.send("/queue/" + queue, "fence", receipt=True)
    team_b.listener.wait_for_body("fence")
    assert team_b.listener.bodies() == ["fence"]  # team b never had the queue's messages
    back = durable_subscriber()
    assert [m.body for m in back.listener.wait_for(1)] == ["news for a"]
    back.send(topic, "fence", receipt=True)
    assert back.listener.wait_for_body("fence") and back.listener.bodies() == ["news for a", "fence"]

    catalog = json.loads((node.data_dir / "catalog.json").read_text())
    assert queue in catalog["queues"] and queue in catalog["vhosts"][TEAM_A]["queues"]
    assert [d["name"] for d in catalog["vhosts"][TEAM_A]["definitions"]] == ["reader.news"]
    assert not any(d["name"] == "reader.news" for d in catalog["definitions"])  # team a's alone
