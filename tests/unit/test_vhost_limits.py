"""Per-vhost limits (gateway/broker/vhost_limits.py) and their configuration
([[vhosts.host]] max_connections, max_queues, max_messages; "/" listed for limits),
and [[vhosts.permissions]] checked against [security.users] when a node config loads."""

from __future__ import annotations

import pytest

from gateway.auth import hash_password
from gateway.broker.message import QUEUE
from gateway.broker.vhost_limits import StoredMessages, VhostLimit, VhostLimits
from gateway.broker.vhosts import VirtualHosts
from gateway.store.memory import MemoryStore
from meshgate.config import ConfigError, load_config

LIMITED = """
[[vhosts.host]]
name = "team-a"
max_connections = 2
max_queues = 3
max_messages = 4
[[vhosts.host]]
name = "team-b"
[[vhosts.host]]
name = "/"
max_connections = 10
"""


def config_from(tmp_path, text: str):
    path = tmp_path / "node.toml"
    path.write_text(text)
    return load_config(path)


def refusal(tmp_path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        config_from(tmp_path, text)
    return raised.value


# -- configuration --------------------------------------------------------------------------


def test_limits_are_read_per_vhost_and_the_default_vhost_may_be_listed_for_them(tmp_path):
    vhosts = config_from(tmp_path, LIMITED).vhosts
    assert vhosts.names == ("team-a", "team-b")  # "/" always exists: listing it makes no vhost
    assert vhosts.limits == {"team-a": VhostLimit(max_connections=2, max_queues=3, max_messages=4),
                             "/": VhostLimit(max_connections=10)}


@pytest.mark.parametrize("entry, key, why", [
    ('name = "/"', "vhosts.host[0].name", "list it only to give it limits"),
    ('name = "a"\nmax_connections = -1', "vhosts.host[0].max_connections", "must be >= 0"),
    ('name = "a"\nmax_queues = "3"', "vhosts.host[0].max_queues", "expected an integer"),
    ('name = "a"\nmax_messages = 0', "vhosts.host[0].max_messages", "must be >= 1"),
    ('name = "a"\nmax_channels = 3', "vhosts.host[0].max_channels", ""),
])
def test_bad_limits_are_refused_naming_the_key(tmp_path, entry, key, why):
    error = refusal(tmp_path, f"[[vhosts.host]]\n{entry}\n")
    assert error.key == key and why in error.problem, str(error)


def test_permissions_are_checked_against_the_configured_users(tmp_path):
    users = f'[security.users.alice]\npassword = "{hash_password("x", iterations=1)}"\ngroups = ["ops"]\n'
    entry = '[[vhosts.permissions]]\n{who}\nvhost = "/"\nconfigure = ".*"\nwrite = ".*"\nread = ".*"\n'
    assert config_from(tmp_path, users + entry.format(who='group = "ops"')).vhosts.permissions[0].group == "ops"
    error = refusal(tmp_path, users + entry.format(who='user = "mallory"'))
    assert (error.key, error.problem) == ("vhosts.permissions[0].user", "no such user 'mallory' in [security.users]")
    error = refusal(tmp_path, entry.format(who='user = "alice"'))
    assert error.key == "vhosts.permissions" and "needs users" in error.problem


# -- connections and queues -------------------------------------------------------------------


def test_connections_are_counted_per_vhost_and_given_back():
    limits = VhostLimits({"a": VhostLimit(max_connections=2), "b": VhostLimit(max_queues=1)})
    assert limits.connect("a") is None and limits.connect("a") is None
    assert limits.connect("a") == "connection limit (2) of vhost 'a' is reached"
    assert limits.connect("b") is None and limits.connect("/") is None  # no max_connections: not counted
    limits.disconnect("a")
    assert limits.connect("a") is None


def test_a_new_queue_beyond_max_queues_is_refused():
    limits = VhostLimits({"a": VhostLimit(max_queues=3)})
    assert limits.queue_refusal("a", 2) is None
    assert limits.queue_refusal("a", 3) == "queue limit in vhost 'a' (3) is reached"
    assert limits.queue_refusal("b", 1000) is None and limits.max_queues("b") is None


# -- stored messages --------------------------------------------------------------------------


def test_stored_messages_call_their_waiters_once_below_the_maximum():
    stored = StoredMessages(2)
    woken: list[str] = []
    stored.added()
    stored.added()
    assert stored.full
    stored.when_below(lambda: woken.append("producer"))
    stored.added()  # a producer's last batch may overshoot, as with the memory limit
    stored.removed()
    assert woken == [] and stored.full
    stored.removed()
    assert woken == ["producer"] and not stored.full


def test_only_a_vhost_with_max_messages_counts_what_its_broker_holds():
    vhosts = VirtualHosts(MemoryStore(), ["a", "b"])
    vhosts.brokers["a"].send(QUEUE, "held-before", {}, b"recovered, say")
    limits = VhostLimits({"a": VhostLimit(max_messages=3)}, vhosts)
    stored = limits.stored("a")
    assert stored is not None and stored.count == 1 and limits.stored("b") is None
    broker = vhosts.brokers["a"]
    for number in range(2):
        broker.send(QUEUE, "orders", {}, f"m{number}".encode())
    assert stored.full
    vhosts.brokers["b"].send(QUEUE, "orders", {}, b"not counted")
    queue = broker.queues["orders"]
    for message in queue.take_all():
        broker.consumed(queue, message)
    assert stored.count == 1
    assert "enqueue" not in vars(vhosts.brokers["b"])  # a broker without the limit runs the class's code
