"""Per-vhost permissions (docs/vhosts.md, "Permissions"), seen by pika and stomp.py:
a user without an entry for a vhost is refused (AMQP 530, STOMP ERROR); RabbitMQ's
configure/write/read patterns decide each AMQP method (403 for what they do not
grant); an action needs both the vhost map and [[security.authorization]]."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from amqp_support import AMQP_ON, Pika
from e2e_support import module_broker, security_config, unique
from stomp_client import ConnectRefused
from vhost_support import VhostClients

USERS = {"alice": ["admins"], "bob": ["readers"], "carol": ["admins"], "dave": ["operators"]}
RULES = [  # the destination map: admins everything, operators only /queue/ok.>
    {"destination": ">", "read": ["admins"], "write": ["admins"], "admin": ["admins"]},
    {"destination": "/queue/ok.>", "read": ["operators"], "write": ["operators"], "admin": ["operators"]},
]
VHOSTS = """
[vhosts]
[[vhosts.host]]
name = "team-a"

[[vhosts.permissions]]
user = "alice"
vhost = "team-a"
configure = '^a\\.'
write = '^a\\.'
read = '^a\\.(r|x)$'

[[vhosts.permissions]]
user = "carol"
vhost = "team-a"
configure = '^a\\.'
write = '^amq\\.default$'
read = '^a\\.'

[[vhosts.permissions]]
group = "operators"
vhost = "team-a"
configure = ".*"
write = ".*"
read = ".*"

[[vhosts.permissions]]
user = "bob"
vhost = "/"
configure = ""
write = ""
read = ""
"""
SECRETS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "c:ar\\ol\\n", "dave": "dave-secret"}


@pytest.fixture(scope="module")
def node(tmp_path_factory, hashes):
    config = security_config(hashes, USERS, RULES) + VHOSTS
    with module_broker(tmp_path_factory, "vhost-permissions", config=config, sets=[AMQP_ON]) as broker:
        yield broker


@pytest.fixture
def amqp(node):
    """``amqp(user, vhost)``: a pika connection of ``user`` to ``vhost``."""
    opened = Pika()
    yield lambda user, vhost: opened(node, user, SECRETS[user], virtual_host=vhost)
    opened.close_all()


@pytest.fixture
def stomp(node):
    """``stomp(user, vhost)``: a stomp.py 1.2 client of ``user`` whose CONNECT names ``vhost``."""
    clients = VhostClients()
    yield lambda user, vhost: clients.stomp_on(node, vhost, {"login": user, "passcode": SECRETS[user]})
    clients.close_all()


def refused(call) -> pika.exceptions.ChannelClosedByBroker:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        call()
    return closed.value


# -- opening a vhost ---------------------------------------------------------------------


def test_a_user_without_an_entry_for_the_vhost_is_refused_530(amqp):
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as denied:
        amqp("bob", "team-a")
    assert str(denied.value) == 'ConnectionClosedByBroker: (530) "access to vhost \'team-a\' refused for user \'bob\'"'
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        amqp("alice", "/")  # "/" too needs an entry once there are vhost permissions
    assert amqp("bob", "/").is_open  # an entry granting nothing still opens the vhost, as in RabbitMQ


def test_a_stomp_user_without_an_entry_for_the_vhost_gets_an_error(stomp):
    with pytest.raises(ConnectRefused) as denied:
        stomp("bob", "team-a")
    assert denied.value.frame.headers["message"] == "access to vhost 'team-a' refused for user 'bob'"
    assert stomp("alice", "team-a").connected_frame is not None


# -- what each AMQP method needs -----------------------------------------------------------


def test_declaring_needs_configure(amqp):
    channel = amqp("alice", "team-a").channel()
    channel.queue_declare("a.q")
    channel.exchange_declare("a.x", "fanout")
    error = refused(lambda: channel.queue_declare("b.q"))
    assert (error.reply_code, error.reply_text) == (403, "access to queue 'b.q' in vhost 'team-a' refused for "
                                                         "user 'alice'")
    channel = amqp("alice", "team-a").channel()
    assert refused(lambda: channel.exchange_declare("b.x", "fanout")).reply_code == 403


def test_a_dead_letter_exchange_needs_write_on_it_and_read_on_the_queue(amqp):
    connection = amqp("alice", "team-a")
    connection.channel().queue_declare("a.x", arguments={"x-dead-letter-exchange": "a.x"})  # a queue named a.x
    error = refused(lambda: connection.channel().queue_declare("a.x", arguments={
        "x-dead-letter-exchange": "amq.fanout"}))
    assert error.reply_code == 403 and "exchange 'amq.fanout'" in error.reply_text
    error = refused(lambda: connection.channel().queue_declare("a.dead", arguments={"x-dead-letter-exchange": "a.x"}))
    assert error.reply_code == 403 and "queue 'a.dead'" in error.reply_text  # alice may not read a.dead


def test_publishing_needs_write_on_the_exchange(amqp):
    channel = amqp("alice", "team-a").channel()
    channel.queue_declare("a.r")
    channel.exchange_declare("a.x", "fanout")
    channel.queue_bind("a.r", "a.x")
    channel.confirm_delivery()
    channel.basic_publish("a.x", "", b"through a.x")
    assert channel.basic_get("a.r", auto_ack=True)[2] == b"through a.x"
    error = refused(lambda: channel.basic_publish("", "a.r", b"through the default exchange"))
    assert error.reply_code == 403 and "exchange 'amq.default'" in error.reply_text


def test_consuming_needs_read_on_the_queue(amqp):
    channel = amqp("alice", "team-a").channel()
    channel.queue_declare("a.q")
    channel.queue_declare("a.r")
    assert channel.basic_get("a.r")[0] is None
    error = refused(lambda: channel.basic_consume("a.q", lambda *_: None))
    assert error.reply_code == 403 and "queue 'a.q'" in error.reply_text


def test_binding_needs_write_on_the_queue_and_read_on_the_exchange(amqp):
    channel = amqp("alice", "team-a").channel()
    channel.queue_declare("a.r")
    channel.exchange_declare("a.x", "fanout")
    channel.queue_bind("a.r", "a.x")
    error = refused(lambda: channel.queue_bind("a.r", "amq.fanout"))
    assert error.reply_code == 403 and "exchange 'amq.fanout'" in error.reply_text


# -- both maps -----------------------------------------------------------------------------


def test_the_vhost_map_does_not_widen_the_destination_map(stomp):
    """dave's group may do anything in team-a by the vhost map; the destination map
    gives operators /queue/ok.> only."""
    with pytest.raises(ConnectRefused):
        stomp("dave", "/")  # the vhost map is on: operators have no entry for "/"
    client = stomp("dave", "team-a")
    client.send("/queue/ok.1", "allowed", receipt=True)
    client.send("/queue/other", "refused")
    assert "not authorized to write /queue/other in vhost 'team-a'" in client.listener.wait_error().headers["message"]


def test_the_destination_map_does_not_widen_the_vhost_map(stomp):
    """carol is an admin (every destination by the destination map); in team-a her
    configure pattern is ^a\\. only."""
    client = stomp("carol", "team-a")
    client.send("/queue/a.1", "allowed", receipt=True)
    client.subscribe("/queue/a.1")
    assert client.listener.wait_for(1)[0].body == "allowed"
    client.send("/queue/" + unique("b"), "refused")
    assert "not authorized to write" in client.listener.wait_error().headers["message"]
