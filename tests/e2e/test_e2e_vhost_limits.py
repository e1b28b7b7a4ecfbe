"""Per-vhost limits (docs/vhosts.md, "Limits"), seen by pika and stomp.py:
max_connections refuses a connection beyond it (AMQP 530, STOMP ERROR) until one
closes; max_queues refuses a new queue beyond it (AMQP 406, STOMP ERROR) while
existing queues keep working; max_messages stops reading a vhost's producers while it
holds that many messages (AMQP connection.blocked) until a consumer takes one; other
vhosts are unaffected."""

from __future__ import annotations

import time

import pika
import pika.exceptions
import pytest
from amqp_support import AMQP_ON
from e2e_support import TIMEOUT, module_broker, unique
from stomp_client import ConnectRefused
from vhost_support import clients_fixture  # noqa: F401  (the fixture)

LIMITS = """
[vhosts]
[[vhosts.host]]
name = "conn"
max_connections = 2

[[vhosts.host]]
name = "queues"
max_queues = 3

[[vhosts.host]]
name = "held"
max_messages = 5

[[vhosts.host]]
name = "/"
max_connections = 1000
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with module_broker(tmp_path_factory, "vhost-limits", config=LIMITS, sets=[AMQP_ON]) as broker:
        yield broker


def test_a_connection_beyond_max_connections_is_refused_until_one_closes(node, clients):
    first = clients.pika_on(node, "conn")
    clients.stomp_on(node, "conn")  # STOMP and AMQP connections count together
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        clients.pika_on(node, "conn")
    assert str(refused.value) == 'ConnectionClosedByBroker: (530) "connection limit (2) of vhost \'conn\' is reached"'
    with pytest.raises(ConnectRefused) as error:
        clients.stomp_on(node, "conn")
    assert error.value.frame.headers["message"] == "connection limit (2) of vhost 'conn' is reached"
    assert clients.pika_on(node, "queues").is_open  # another vhost is not limited by it
    first.close()  # its place is given back before close_ok
    assert clients.pika_on(node, "conn").is_open


def test_a_queue_beyond_max_queues_is_refused_and_existing_ones_keep_working(node, clients):
    channel = clients.pika_on(node, "queues").channel()
    names = [unique("q") for _ in range(3)]
    for name in names:
        channel.queue_declare(name)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare(unique("q"))
    assert (refused.value.reply_code, refused.value.reply_text) == (406, "queue limit in vhost 'queues' (3) is reached")
    channel = clients.pika_on(node, "queues").channel()
    channel.queue_declare(names[0])  # declaring an existing queue is no new queue
    channel.confirm_delivery()
    channel.basic_publish("", names[0], b"still works")
    assert channel.basic_get(names[0], auto_ack=True)[2] == b"still works"
    stomp = clients.stomp_on(node, "queues")
    stomp.send("/queue/" + unique("q"), "a fourth queue")
    assert stomp.listener.wait_error().headers["message"] == "queue limit in vhost 'queues' (3) is reached"
    channel.queue_delete(names[1])
    channel.queue_declare(unique("q"))  # room again
    other = clients.pika_on(node, "/").channel()
    for _ in range(4):
        other.queue_declare(unique("q"))  # "/" has no max_queues


def await_flag(connection: pika.BlockingConnection, flags: list[str], wanted: str) -> None:
    """Let ``connection`` read until its callbacks put ``wanted`` in ``flags``."""
    deadline = time.monotonic() + TIMEOUT
    while wanted not in flags:
        assert time.monotonic() < deadline, f"no {wanted} within {TIMEOUT}s; got {flags}"
        connection.process_data_events(time_limit=0.1)


def test_producers_of_a_vhost_at_max_messages_wait_until_a_consumer_takes_one(node, clients):
    queue = unique("held")
    producer = clients.pika_on(node, "held")
    flags: list[str] = []
    producer.add_on_connection_blocked_callback(lambda *_: flags.append("blocked"))
    producer.add_on_connection_unblocked_callback(lambda *_: flags.append("unblocked"))
    channel = producer.channel()
    channel.queue_declare(queue)
    channel.confirm_delivery()
    for number in range(5):
        channel.basic_publish("", queue, f"m{number}".encode())
    await_flag(producer, flags, "blocked")  # the fifth filled the vhost: its producer is not read
    stomp = clients.stomp_on(node, "held")
    # As with the memory limit, what a producer had sent is taken, then it is not read on.
    stomp.send("/queue/" + queue, "m5", receipt=True)
    stomp.send("/queue/" + queue, "m6", receipt="r-m6", wait=False)
    other = clients.pika_on(node, "/").channel()  # another vhost's producers keep going
    other.queue_declare(queue)
    other.confirm_delivery()
    for number in range(10):
        other.basic_publish("", queue, f"other {number}".encode())
    assert "r-m6" not in stomp.listener.receipts and flags == ["blocked"]
    consumer = clients.pika_on(node, "held").channel()
    taken = [consumer.basic_get(queue, auto_ack=True)[2] for _ in range(2)]  # 6 held: under 5 again after two
    await_flag(producer, flags, "unblocked")
    stomp.listener.wait_receipt("r-m6")
    taken += [consumer.basic_get(queue, auto_ack=True)[2] for _ in range(5)]
    assert taken == [f"m{number}".encode() for number in range(7)]
