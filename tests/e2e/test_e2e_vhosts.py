"""Virtual hosts on one node (docs/vhosts.md), seen by real clients: an AMQP client's
virtual_host (pika, kombu) and a STOMP client's ``host`` header (stomp.py) choose the
vhost; an unknown AMQP vhost is refused with 530, an unknown STOMP host goes to "/"
unless [vhosts] strict_stomp_host; two vhosts' queues and topics of the same name
never meet."""

from __future__ import annotations

import pika
import pytest
from amqp_support import AMQP_ON, amqp_port
from e2e_support import HOST, module_broker, run_meshgate, unique
from kombu import Connection
from stomp_client import ConnectRefused
from vhost_support import TEAM_A, TEAM_B, VHOSTS, clients_fixture, drain  # noqa: F401  (the fixture)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with module_broker(tmp_path_factory, "vhosts", config=VHOSTS, sets=[AMQP_ON]) as broker:
        yield broker


@pytest.fixture
def pika_to(node, clients):
    """``pika_to(vhost)``: a pika connection to ``node`` on that vhost."""
    return lambda vhost: clients.pika_on(node, vhost)


@pytest.fixture
def stomp_to(node, clients):
    """``stomp_to(host, process=node)``: a stomp.py client whose CONNECT names ``host``."""
    return lambda host, process=None: clients.stomp_on(process or node, host)


# -- AMQP --------------------------------------------------------------------------------


def test_an_unknown_amqp_vhost_is_refused_with_530(node, pika_to):
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        pika_to("nowhere")
    assert str(refused.value) == 'ConnectionClosedByBroker: (530) "vhost \'nowhere\' not found"'


def test_two_vhosts_each_have_their_own_queue_of_the_same_name(pika_to):
    queue = unique("orders")
    channels = {vhost: pika_to(vhost).channel() for vhost in ("/", TEAM_A, TEAM_B)}
    for vhost, channel in channels.items():
        channel.queue_declare(queue)
        channel.confirm_delivery()
        channel.basic_publish("", queue, f"for {vhost}".encode())
    for vhost, channel in channels.items():
        assert drain(channel, queue) == [f"for {vhost}".encode()]


def test_an_exclusive_queue_in_one_vhost_does_not_lock_its_namesake_in_another(pika_to):
    queue = unique("exclusive")
    pika_to(TEAM_A).channel().queue_declare(queue, exclusive=True)
    other = pika_to(TEAM_B).channel()
    other.queue_declare(queue)  # refused with 405 if the lock crossed vhosts
    other.basic_publish("", queue, b"b's own")
    assert drain(other, queue) == [b"b's own"]


def test_a_kombu_url_with_a_vhost_path_reaches_that_vhost(node, pika_to):
    queue = unique("kombu")
    with Connection(f"amqp://guest:guest@127.0.0.1:{amqp_port(node)}/{TEAM_A}") as connection:
        simple = connection.SimpleQueue(queue)
        simple.put({"vhost": "a"})
        simple.close()
    team_a, default = pika_to(TEAM_A).channel(), pika_to("/").channel()
    default.queue_declare(queue)
    assert drain(default, queue) == []
    assert len(drain(team_a, queue)) == 1


# -- STOMP -------------------------------------------------------------------------------


def test_stomp_hosts_select_vhosts_with_queues_of_the_same_name(stomp_to):
    queue = "/queue/" + unique("orders")
    for host in (TEAM_A, TEAM_B):
        stomp_to(host).send(queue, f"for {host}", receipt=True)
    for host in (TEAM_A, TEAM_B):
        consumer = stomp_to(host)
        consumer.subscribe(queue)
        assert [m.body for m in consumer.listener.wait_for_body(f"for {host}")] == [f"for {host}"]
        consumer.send(queue, "fence", receipt=True)
        assert consumer.listener.bodies() == [f"for {host}", "fence"]  # nothing of the other vhost came first


def test_a_stomp_and_an_amqp_client_of_one_vhost_share_its_queues(stomp_to, pika_to):
    queue = unique("shared")
    stomp_to(TEAM_A).send("/queue/" + queue, "from stomp", receipt=True)
    channel = pika_to(TEAM_A).channel()
    assert drain(channel, queue) == [b"from stomp"]
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        drain(pika_to("/").channel(), queue)
    assert missing.value.reply_code == 404  # "/" has no such queue


def test_an_unknown_stomp_host_goes_to_the_default_vhost(stomp_to):
    queue = "/queue/" + unique("unknown-host")
    stomp_to("broker.example.com").send(queue, "to the default", receipt=True)
    team_a = stomp_to(TEAM_A)
    team_a.subscribe(queue)
    team_a.send(queue, "fence", receipt=True)
    assert team_a.listener.wait_for_body("fence") and team_a.listener.bodies() == ["fence"]
    default = stomp_to("/")
    assert [m.body for m in default.receive(queue, 1)] == ["to the default"]


def test_a_wildcard_topic_subscriber_sees_only_its_own_vhost(stomp_to):
    topic = unique("prices")
    watcher = stomp_to(TEAM_A)
    watcher.subscribe("/topic/>")
    stomp_to(TEAM_B).send(f"/topic/{topic}.b", "team b's", receipt=True)
    stomp_to("/").send(f"/topic/{topic}.default", "the default's", receipt=True)
    watcher.send(f"/topic/{topic}.a", "team a's", receipt=True)
    watcher.listener.wait_for_body("team a's")
    assert watcher.listener.bodies() == ["team a's"]


def test_with_strict_stomp_host_an_unknown_host_is_refused_naming_it(broker_factory, stomp_to):
    strict = broker_factory(config=VHOSTS.replace("[vhosts]\n", "[vhosts]\nstrict_stomp_host = true\n"))
    with pytest.raises(ConnectRefused) as refused:
        stomp_to("broker.example.com", strict)
    assert refused.value.frame.headers["message"] == "no virtual host named 'broker.example.com' on this broker"
    stomp_to(TEAM_A, strict).send("/queue/" + unique("ok"), "known hosts still connect", receipt=True)
    # The management client connects to vhost "/" whatever address it dials.
    listed = run_meshgate(["queues", "--stomp", f"{HOST}:{strict.port}"])
    assert listed.returncode == 0, listed.stderr


def test_a_bad_vhost_name_in_the_config_stops_the_node_with_status_2_naming_the_key(tmp_path):
    config = tmp_path / "node.toml"
    config.write_text('[[vhosts.host]]\nname = "team-a"\n[[vhosts.host]]\nname = "bell\\u0007"\n')
    result = run_meshgate(["broker", "--name", "bad", "--stomp", f"{HOST}:0", "--data", str(tmp_path / "data"),
                           "--config", str(config)])
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "vhosts.host[1].name: invalid vhost name 'bell\\x07'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "listening on" not in result.stdout
