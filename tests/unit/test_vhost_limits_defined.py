"""Limits of vhosts made by command (gateway/broker/vhost_limits.py VhostLimits.defined):
taken from the vhost's definition, followed as it changes, the configuration's
[[vhosts.host]] entry first; connections open before a limit count against it."""

from __future__ import annotations

import msgspec
import pytest

from gateway.broker.message import QUEUE
from gateway.broker.vhost_limits import VhostLimit, VhostLimits
from gateway.broker.vhosts import VirtualHosts
from gateway.store.memory import MemoryStore
from model.definitions import VhostSpec


def test_a_defined_vhosts_limits_follow_its_definition_and_count_connections_open_before():
    vhosts = VirtualHosts(MemoryStore())
    vhosts.recover()
    limits = VhostLimits({}, vhosts)
    vhosts.define("team", VhostSpec())
    assert limits.connect("team") is None and limits.connect("team") is None  # two open, no limit yet
    vhosts.define("team", VhostSpec(max_connections=2, max_queues=1))
    assert limits.connect("team") == "connection limit (2) of vhost 'team' is reached"
    assert limits.queue_refusal("team", 1) is not None
    limits.disconnect("team")
    assert limits.connect("team") is None
    vhosts.define("team", VhostSpec())
    assert limits.limit("team") == VhostLimit() and limits.connect("team") is None


def test_a_raised_max_messages_reads_waiting_producers_again_and_a_deleted_vhost_has_none():
    vhosts = VirtualHosts(MemoryStore())
    vhosts.recover()
    limits = VhostLimits({}, vhosts)
    vhosts.define("team", VhostSpec(max_messages=1))
    stored = limits.stored("team")
    assert stored is not None
    vhosts.brokers["team"].send(QUEUE, "orders", {}, b"one")
    woken: list[str] = []
    stored.when_below(lambda: woken.append("producer"))
    vhosts.define("team", VhostSpec(max_messages=5))
    assert woken == ["producer"] and not stored.full
    vhosts.undefine("team")
    assert limits.stored("team") is None and limits.limit("team") == VhostLimit()


def test_the_configuration_wins_over_a_definition_and_limits_are_read_at_start():
    vhosts = VirtualHosts(MemoryStore(), ["configured"])
    vhosts.recover()
    vhosts.define("configured", VhostSpec(max_connections=0))
    vhosts.define("early", VhostSpec(max_queues=7))  # defined before the limits are made (recovery)
    limits = VhostLimits({"configured": VhostLimit(max_connections=3)}, vhosts)
    assert limits.limit("configured") == VhostLimit(max_connections=3)
    assert limits.limit("early") == VhostLimit(max_queues=7)


def test_a_spec_without_limits_is_encoded_as_before():
    assert msgspec.json.encode(VhostSpec(description="x")) == b'{"description":"x"}'


@pytest.mark.parametrize("bad", [b'{"max_connections":-1}', b'{"max_queues":"3"}', b'{"max_messages":2147483648}'])
def test_a_bad_limit_is_refused(bad: bytes):
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(bad, type=VhostSpec)
