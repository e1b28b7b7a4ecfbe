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
    received = [m.body for m in consumer.fenced(destination)]
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
    [message] = consumer.receive(destination, 1)
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
    assert [m.body for m in after.fenced(destination)] == [f"m{i}" for i in range(5, 10)] + ["fence"]


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
    assert [m.body for m in consumer.fenced(destination)] == [f"t{i}" for i in range(5)] + ["fence"]


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
    assert [m.body for m in consumer.fenced(destination)] == ["kept", "fence"]


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
    assert [m.body for m in consumer.fenced(destination)] == ["fence"]


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
    received = [m.body for m in consumer.fenced(destination)][:-1]
    assert len(received) == len(set(received)), "a message came back twice"
    assert set(received) <= set(sent)
    missing = sorted(receipted - set(received))
    assert not missing, f"{len(missing)} receipted messages lost, e.g. {missing[:5]}"
    assert received == sorted(received), "recovered messages out of order"


def test_small_journal_files_roll_over_and_recover(broker_factory, connect):
    broker = broker_factory(sets=["store.journal_file_size=64KiB"])
    destination = "/queue/" + unique("roll")
    producer = connect(broker)
    payload = "p" * 200
    send_persistent(producer, destination, [f"{i:05d}-{payload}" for i in range(1500)])
    consumer = connect(broker)
    consumer.subscribe(destination, ack="client", headers={"activemq.prefetchSize": "2000"})
    messages = consumer.listener.wait_for(1500)
    consumer.ack(messages[1099], receipt=True)  # cumulative: the first 1100
    consumer.drop()
    send_persistent(producer, destination, [f"{i:05d}-{payload}" for i in range(1500, 1700)])
    written = 1700 * 260
    on_disk = sum(p.stat().st_size for p in broker.data_dir.rglob("*") if p.is_file())
    assert on_disk < written, f"consumed journal files were not reclaimed: {on_disk} bytes on disk"
    broker.kill9()
    broker.start(port=broker.port)
    after = connect(broker)
    numbers = [int(m.body[:5]) for m in after.fenced(destination)[:-1]]
    assert sorted(numbers) == list(range(1100, 1700)), "messages lost or duplicated"
    assert numbers == list(range(1100, 1700)), f"FIFO order lost after recovery: {numbers[:5]}...{numbers[-40:]}"


def test_priority_order_survives_restart(broker_factory, connect):
    broker = broker_factory()
    destination = "/queue/" + unique("prio")
    producer = connect(broker)
    for body, priority in [("low", "1"), ("high", "9"), ("mid", "5"), ("high-2", "9")]:
        producer.send(destination, body, receipt=True, persistent="true", priority=priority)
    broker.restart(graceful=False)
    consumer = connect(broker)
    consumer.subscribe(destination)
    assert [m.body for m in consumer.listener.wait_for(4)] == ["high", "high-2", "mid", "low"]


def test_expiry_survives_restart(broker_factory, connect):
    import time

    from e2e_support import now_ms

    broker = broker_factory()
    destination = "/queue/" + unique("exp")
    producer = connect(broker)
    producer.send(destination, "short", receipt=True, persistent="true", expires=str(now_ms() + 800))
    producer.send(destination, "long", receipt=True, persistent="true", expires=str(now_ms() + 120_000))
    broker.kill9()
    time.sleep(1.0)  # let "short" expire while the broker is down (not synchronisation)
    broker.start(port=broker.port)
    consumer = connect(broker)
    assert [m.body for m in consumer.fenced(destination)] == ["long", "fence"]


def test_wildcard_durable_subscription_with_selector_survives_restart(broker_factory, connect):
    broker = broker_factory()
    base = unique("w")

    def subscribe():
        client = connect(broker, headers={"client-id": "wild"})
        client.subscribe(f"/topic/{base}.>", id="d",
                         headers={"activemq.subscriptionName": "s", "selector": "kind = 'keep'"})
        return client

    subscribe().disconnect()
    broker.restart(graceful=False)
    producer = connect(broker)
    producer.send(f"/topic/{base}.a", "a-keep", receipt=True, persistent="true", kind="keep")
    producer.send(f"/topic/{base}.b.c", "bc-drop", receipt=True, persistent="true", kind="drop")
    producer.send(f"/topic/{base}.b.c", "bc-keep", receipt=True, persistent="true", kind="keep")
    producer.send(f"/topic/other.{base}", "other", receipt=True, persistent="true", kind="keep")
    broker.restart(graceful=False)
    back = subscribe()
    producer = connect(broker)
    producer.send(f"/topic/{base}.z", "fence", kind="keep")
    assert [m.body for m in back.listener.wait_for_body("fence")] == ["a-keep", "bc-keep", "fence"]


def test_store_sync_never_still_recovers_after_graceful_stop(broker_factory, connect):
    broker = broker_factory(sets=["store.sync=never"])
    destination = "/queue/" + unique("nosync")
    producer = connect(broker)
    send_persistent(producer, destination, [f"m{i}" for i in range(50)])
    broker.restart(graceful=True)
    consumer = connect(broker)
    consumer.subscribe(destination)
    assert [m.body for m in consumer.listener.wait_for(50)] == [f"m{i}" for i in range(50)]


def test_fifo_order_survives_journal_compaction(broker_factory, connect):
    """Survivors in mostly-consumed journal files get compacted (copied forward); after
    a restart the queue must still hand them out in their original order, before
    messages that were sent after them."""
    broker = broker_factory(sets=["store.journal_file_size=64KiB"])
    destination = "/queue/" + unique("compact")
    payload = "c" * 200
    producer = connect(broker)
    send_persistent(producer, destination, [f"{i:05d}-{payload}" for i in range(2000)])
    consumer = connect(broker)
    consumer.subscribe(destination, ack="client-individual", headers={"activemq.prefetchSize": "5000"})
    messages = consumer.listener.wait_for(2000)
    doomed = [m for i, m in enumerate(messages) if i % 50 != 0]
    for message in doomed[:-1]:
        consumer.ack(message)
    consumer.ack(doomed[-1], receipt=True)
    consumer.drop()
    # More traffic rolls the journal over, which is when dead files are collected.
    send_persistent(producer, destination, [f"{i:05d}-{payload}" for i in range(2000, 2600)])
    broker.kill9()
    broker.start(port=broker.port)
    after = connect(broker)
    numbers = [int(m.body[:5]) for m in after.fenced(destination)[:-1]]
    expected = list(range(0, 2000, 50)) + list(range(2000, 2600))
    assert sorted(numbers) == expected, "messages lost or duplicated"
    assert numbers == expected, f"FIFO order lost after recovery: {numbers[:45]}"


def test_restart_does_not_use_up_a_delivery_attempt(broker_factory, connect):
    """A persistent message never delivered before a restart still gets all of its
    max_delivery_attempts (here 2: one NACK must lead to a redelivery, not the DLQ)."""
    broker = broker_factory(sets=["broker.max_delivery_attempts=2"])
    destination = "/queue/" + unique("attempts")
    producer = connect(broker)
    send_persistent(producer, destination, ["fragile"])
    broker.restart()
    consumer = connect(broker)
    consumer.subscribe(destination, ack="client-individual")
    first = consumer.listener.wait_for(1)[0]
    consumer.nack(first, receipt=True)
    consumer.send(destination, "fence")
    bodies = [m.body for m in consumer.listener.wait_for_body("fence")]
    assert bodies.count("fragile") == 2, f"one NACK after a restart dead-lettered it: {bodies}"
