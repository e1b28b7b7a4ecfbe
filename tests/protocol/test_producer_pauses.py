"""Flow control tells the doctor which limit paused a producer and since when
(gateway/broker/producer_pauses.py): recorded in the broker's ``paused_producers``
when STOMP or AMQP stop reading a client, dropped when they read it again or it goes."""

from __future__ import annotations

from gateway.amqp.codec import encode_content, encode_method
from gateway.broker.producer_pauses import MEMORY_LIMIT, store_limit_key
from tests.protocol.amqp_harness import AmqpHarness
from tests.protocol.stomp_harness import Harness

MiB = 1024 * 1024


def test_stomp_a_producer_paused_by_the_memory_limit_is_recorded_until_it_is_read_again():
    harness = Harness(memory_limit=2 * MiB)
    producer = harness.client()
    producer.send("SEND", {"destination": "/queue/full"}, b"f" * (2 * MiB))  # fills memory
    assert producer.transport.producerState == "paused"
    (pause,) = harness.broker.paused_producers.values()
    assert (pause.limit_key, pause.protocol, pause.vhost, pause.since) == (MEMORY_LIMIT, "stomp", "/",
                                                                            harness.clock.seconds())
    assert pause.connection_name() in {s.name for s in harness.broker.sessions.values()}
    consumer = harness.client()
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/full"})
    assert len(consumer.messages()) == 1 and producer.transport.producerState == "producing"
    assert harness.broker.paused_producers == {}


def test_stomp_a_paused_producer_that_goes_is_forgotten():
    harness = Harness(memory_limit=2 * MiB)
    producer = harness.client()
    producer.send("SEND", {"destination": "/queue/full"}, b"f" * (2 * MiB))
    assert harness.broker.paused_producers
    producer.drop()
    assert harness.broker.paused_producers == {}


def test_amqp_a_publisher_paused_by_the_memory_limit_is_recorded_and_forgotten_when_it_goes():
    harness = AmqpHarness(memory_limit=MiB)
    client = harness.opened()
    client.raw(encode_method(1, "channel.open") + encode_method(1, "queue.declare", queue="q", arguments={}))
    client.methods()
    client.raw(encode_method(1, "basic.publish", exchange="", routing_key="q")
               + b"".join(encode_content(1, {}, b"x" * MiB, 131072)))
    assert client.protocol.blocked
    (pause,) = harness.broker.paused_producers.values()
    assert (pause.limit_key, pause.protocol, pause.connection_name()) == (MEMORY_LIMIT, "amqp", client.protocol.name)
    client.drop()
    assert harness.broker.paused_producers == {}


def test_the_store_names_its_limit_in_its_reason():
    assert store_limit_key("the journal reached store.limit (10 of 5 bytes)") == "store.limit"
    assert store_limit_key("the disk is 95% full (store.max_disk_usage 90%)") == "store.max_disk_usage"
