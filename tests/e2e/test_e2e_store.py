"""The persistent store seen from outside: what a RECEIPT promises survives kill -9,
what was not persistent does not survive a restart, and definitions come back."""

from __future__ import annotations

import json

import pytest
from e2e_support import unique


def send_persistent(client, destination: str, bodies: list[str], **headers: str) -> None:
    """Pipeline persistent SENDs each asking a receipt, then wait for every receipt."""
    receipts = []
    for body in bodies:
        receipt = unique("p")
        receipts.append(receipt)
        client.send(destination, body, receipt=receipt, wait=False, persistent="true", **headers)
    for receipt in receipts:
        client.listener.wait_receipt(receipt)


@pytest.mark.parametrize("kill", [True, False], ids=["kill9", "sigterm"])
def test_receipted_persistent_messages_survive_restart(broker_factory, connect, kill):
    broker = broker_factory()
    destination = "/queue/" + unique("durable")
    producer = connect(broker)
    bodies = [f"m{i:03d}" for i in range(200)]
    send_persistent(producer, destination, bodies)
    broker.restart(graceful=not kill)
    consumer = connect(broker)
    consumer.subscribe(destination)
    consumer.send(destination, "fence")
    received = [m.body for m in consumer.listener.wait_for_body("fence")]
    assert received[:-1] == bodies  # all of them, once each, in order
    assert received[-1] == "fence"


def test_message_headers_survive_restart(broker_factory, connect):
    broker = broker_factory()
    destination = "/queue/" + unique("headers")
    producer = connect(broker)
    producer.send(destination, "with headers", receipt=True, persistent="true",
                  headers={"content-type": "text/x-test", "x-colon": "a:b", "x-newline": "1\n2", "priority": "7"})
    broker.kill9()
    broker.start(port=broker.port)
    consumer = connect(broker)
    consumer.subscribe(destination)
    [message] = consumer.listener.wait_for(1)
    assert message.body == "with headers"
    assert message.headers["content-type"] == "text/x-test"
    assert message.headers["x-colon"] == "a:b"
    assert message.headers["x-newline"] == "1\n2"
    assert message.headers["destination"] == destination


@pytest.mark.parametrize("ack", ["client-individual", "client"])
def test_receipted_ack_is_never_redelivered_after_kill9(broker_factory, connect, ack):
    broker = broker_factory()
    destination = "/queue/" + unique("acked")
    producer = connect(broker)
    send_persistent(producer, destination, [f"m{i}" for i in range(10)])
    consumer = connect(broker)
    consumer.subscribe(destination, ack=ack)
    messages = consumer.listener.wait_for(10)
    if ack == "client":
        consumer.ack(messages[4], receipt=True)  # cumulative: m0..m4
    else:
        for message in messages[:5]:
            consumer.ack(message, receipt=True)
    broker.kill9()
    broker.start(port=broker.port)
    after = connect(broker)
    after.subscribe(destination)
    after.send(destination, "fence")
    assert [m.body for m in after.listener.wait_for_body("fence")] == [f"m{i}" for i in range(5, 10)] + ["fence"]


def test_committed_transaction_survives_kill9(broker_factory, connect):
    broker = broker_factory()
    destination = "/queue/" + unique("tx")
    producer = connect(broker)
    producer.begin("tx")
    for i in range(5):
        producer.send(destination, f"t{i}", transaction="tx", persistent="true")
    producer.commit("tx")  # with receipt
    producer.begin("open")
    producer.send(destination, "uncommitted", transaction="open", persistent="true", receipt=True)
    broker.kill9()
    broker.start(port=broker.port)
    consumer = connect(broker)
    consumer.subscribe(destination)
    consumer.send(destination, "fence")
    assert [m.body for m in consumer.listener.wait_for_body("fence")] == [f"t{i}" for i in range(5)] + ["fence"]


def test_non_persistent_messages_do_not_survive_restart(broker_factory, connect):
    broker = broker_factory()
    destination = "/queue/" + unique("mixed")
    producer = connect(broker)
    producer.send(destination, "transient-1", receipt=True)
    producer.send(destination, "kept", receipt=True, persistent="true")
    producer.send(destination, "transient-2", receipt=True, persistent="false")
    producer.disconnect()
    broker.restart()
    consumer = connect(broker)
    consumer.subscribe(destination)
    consumer.send(destination, "fence")
    assert [m.body for m in consumer.listener.wait_for_body("fence")] == ["kept", "fence"]


@pytest.mark.parametrize("kill", [True, False], ids=["kill9", "sigterm"])
@pytest.mark.parametrize("form", ["activemq", "rabbitmq"])
def test_durable_subscription_survives_restart(broker_factory, connect, kill, form):
    broker = broker_factory()
    destination = "/topic/" + unique("dur")

    def subscribe():
        if form == "activemq":
            client = connect(broker, headers={"client-id": "survivor"})
            client.subscribe(destination, id="d", headers={"activemq.subscriptionName": "sub"})
        else:
            client = connect(broker)
            client.subscribe(destination, id="survivor-sub", headers={"durable": "true", "auto-delete": "false"})
        return client

    subscribe().disconnect()
    producer = connect(broker)
    send_persistent(producer, destination, ["before-restart"])
    broker.restart(graceful=not kill)
    producer = connect(broker)
    # Published after the restart while the subscriber is away: kept only if the
    # subscription itself came back.
    producer.send(destination, "after-restart-transient", receipt=True)
    send_persistent(producer, destination, ["after-restart-persistent"])
    back = subscribe()
    assert [m.body for m in back.listener.wait_for(3)] == [
        "before-restart", "after-restart-transient", "after-restart-persistent"]


def test_non_persistent_topic_messages_for_durable_subscriber_lost_on_restart(broker_factory, connect):
    broker = broker_factory()
    destination = "/topic/" + unique("dur")
    client = connect(broker, headers={"client-id": "c"})
    client.subscribe(destination, id="d", headers={"activemq.subscriptionName": "s"})
    client.disconnect()
    producer = connect(broker)
    producer.send(destination, "transient", receipt=True)
    send_persistent(producer, destination, ["persistent"])
    producer.disconnect()
    broker.restart()
    back = connect(broker, headers={"client-id": "c"})
    back.subscribe(destination, id="d", headers={"activemq.subscriptionName": "s"})
    producer = connect(broker)
    producer.send(destination, "fence")
    assert [m.body for m in back.listener.wait_for_body("fence")] == ["persistent", "fence"]


def test_queue_definitions_survive_restart(broker_factory, connect):
    """No STOMP frame lists queues, so this reads the node's catalog (data_dir/catalog.json)
    after a restart round trip: queues created before the restart must still be defined
    after another queue was created by the restarted node."""
    broker = broker_factory()
    client = connect(broker)
    client.subscribe("/queue/defined-before")
    client.send("/queue/sent-before", "x", receipt=True)
    client.disconnect()
    broker.kill9()
    broker.start(port=broker.port)
    client = connect(broker)
    client.subscribe("/queue/defined-after")
    client.disconnect()
    broker.stop()
    catalog_path = broker.data_dir / "catalog.json"
    assert catalog_path.exists(), sorted(p.name for p in broker.data_dir.iterdir())
    queues = json.loads(catalog_path.read_text()).get("queues", [])
    assert {"defined-before", "sent-before", "defined-after"} <= set(queues), queues


def test_message_ids_stay_unique_across_restarts(broker_factory, connect):
    broker = broker_factory()
    destination = "/queue/" + unique("ids")
    seen = set()
    for _ in range(3):
        client = connect(broker)
        client.subscribe(destination)
        for i in range(5):
            client.send(destination, f"m{i}")
        messages = client.listener.wait_for(5)
        seen.update(m.headers["message-id"] for m in messages)
        client.disconnect()
        broker.restart(graceful=False)
    assert len(seen) == 15


def test_consumed_persistent_messages_stay_consumed_across_several_restarts(broker_factory, connect):
    broker = broker_factory()
    destination = "/queue/" + unique("many")
    producer = connect(broker)
    send_persistent(producer, destination, [f"m{i}" for i in range(6)])
    for round_ in range(3):
        broker.restart(graceful=round_ % 2 == 0)
        consumer = connect(broker)
        consumer.subscribe(destination, ack="client-individual")
        [message] = consumer.listener.wait_for(1)[:1]
        assert message.body == f"m{2 * round_}", [m.body for m in consumer.listener.messages]
        consumer.ack(message, receipt=True)
        second = consumer.listener.wait_for(2)[1]
        consumer.ack(second, receipt=True)
        consumer.drop()
    broker.restart(graceful=False)
    consumer = connect(broker)
    consumer.subscribe(destination)
    consumer.send(destination, "fence")
    assert [m.body for m in consumer.listener.wait_for_body("fence")] == ["fence"]


def test_kill9_while_producing_keeps_every_receipted_message(broker_factory, connect):
    """kill -9 in the middle of a pipelined stream of persistent SENDs: every message
    whose RECEIPT arrived is there after the restart, none twice, none invented."""
    broker = broker_factory()
    destination = "/queue/" + unique("crash")
    producer = connect(broker)
    sent = []
    for i in range(3000):
        body = f"m{i:05d}"
        producer.send(destination, body, receipt=f"k{i}", wait=False, persistent="true")
        sent.append(body)
        if i == 400:
            # Enough receipts for the kill to land mid-stream, frames still in flight.
            producer.listener.wait_until(lambda: len(producer.listener.receipts) >= 200, "200 receipts")
            broker.kill9()
            break
    receipted = {f"m{int(r[1:]):05d}" for r in list(producer.listener.receipts)}
    assert len(receipted) >= 200
    broker.start(port=broker.port)
    consumer = connect(broker)
    consumer.subscribe(destination)
    consumer.send(destination, "fence")
    received = [m.body for m in consumer.listener.wait_for_body("fence")][:-1]
    assert len(received) == len(set(received)), "a message came back twice"
    assert set(received) <= set(sent)
    missing = sorted(receipted - set(received))
    assert not missing, f"{len(missing)} receipted messages lost, e.g. {missing[:5]}"
    assert received == sorted(received), "recovered messages out of order"
