"""Durable topic subscribers on another node lose nothing while that node is down."""

from __future__ import annotations

from e2e_support import unique
from mesh_support import mesh_fixture, send_many, wait_until  # noqa: F401  (the fixture)


def test_durable_subscriber_on_a_restarted_node_gets_what_was_published_meanwhile(mesh):
    a, b = mesh(2)
    topic = "/topic/" + unique("news")
    subscriber = b.client(headers={"client-id": "reader"})
    subscriber.subscribe(topic, headers={"activemq.subscriptionName": "feed"})
    producer = a.client()
    # The subscription's demand reaches A in milliseconds; probe until it has.
    wait_until(lambda: send_many(producer, topic, ["probe"]) and subscriber.listener.messages,
               "the subscriber's demand to reach A", timeout=10, interval=0.2)
    subscriber.disconnect()
    b.kill9()
    meanwhile = send_many(producer, topic, [f"while-down-{i}" for i in range(10)])
    b.restart(graceful=False)
    mesh.wait_links([(a, b)])
    back = b.client(headers={"client-id": "reader"})
    back.subscribe(topic, headers={"activemq.subscriptionName": "feed"})
    back.listener.wait_until(lambda: len([m for m in back.listener.messages if m.body != "probe"]) >= 10,
                             "the messages published while B was down")
    assert [m.body for m in back.listener.messages if m.body != "probe"] == meanwhile
