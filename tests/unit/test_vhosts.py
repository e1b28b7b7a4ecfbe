"""Virtual hosts on one node (docs/vhosts.md): one Broker per vhost over the node's one
journal, the default vhost's records and catalog exactly as before vhosts, another's
in their own record types and under the catalog's "vhosts" key; which vhost a STOMP
host header selects; the [vhosts] table."""

from __future__ import annotations

import json

import pytest

from gateway.broker.message import QUEUE
from gateway.broker.vhosts import DEFAULT_VHOST, VirtualHosts
from gateway.store.journal import JournalStore
from gateway.store.memory import MemoryStore
from gateway.store.records import ADD_TIMED, ADD_VHOST, HEAD, REMOVE, REMOVE_VHOST
from gateway.store.replicated import ReplicatedJournalStore
from meshgate.config import ConfigError, load_config
from tests.unit.test_journal import LoopReactor, close, durable, message, open_store


def record_types(tmp_path) -> list[int]:
    """The type of every record in the journal's segments, in order."""
    types = []
    for path in sorted((tmp_path / "journal").glob("*.log")):
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            length, _, kind = HEAD.unpack_from(data, pos)
            types.append(kind)
            pos += HEAD.size + length
    return types


def node(tmp_path, *names: str, **options) -> tuple[VirtualHosts, LoopReactor]:
    store, reactor, _ = open_store(tmp_path)
    store.recover = lambda: iter(())  # open_store recovered it already  # noqa: E731
    return VirtualHosts(store, names, **options), reactor


def reopened(tmp_path, *names: str) -> tuple[VirtualHosts, JournalStore, LoopReactor, int]:
    reactor = LoopReactor()
    store = JournalStore(tmp_path, reactor)
    vhosts = VirtualHosts(store, names)
    return vhosts, store, reactor, vhosts.recover()


def bodies(vhosts: VirtualHosts, vhost: str, queue: str) -> list[bytes]:
    held = vhosts.brokers[vhost].queues.get(queue)
    return [] if held is None else [m.body for m in held.take(len(held))]


def test_the_default_vhost_writes_the_records_and_catalog_of_a_node_without_vhosts(tmp_path):
    vhosts, reactor = node(tmp_path, "team-a")
    vhosts.default.send(QUEUE, "orders", {}, b"default", persistent=True)
    durable(vhosts.store, reactor)
    assert record_types(tmp_path) == [ADD_TIMED]
    assert set(json.loads((tmp_path / "catalog.json").read_text())) == {"queues", "definitions", "links"}


def test_another_vhosts_records_carry_its_name_and_recover_into_it_alone(tmp_path):
    vhosts, reactor = node(tmp_path, "team-a", "team-b")
    vhosts.default.send(QUEUE, "orders", {}, b"default", persistent=True)
    vhosts.brokers["team-a"].send(QUEUE, "orders", {}, b"a1", persistent=True)
    vhosts.brokers["team-a"].send(QUEUE, "orders", {}, b"a2", persistent=True)
    vhosts.brokers["team-b"].send(QUEUE, "orders", {}, b"b", persistent=True)
    team_a = vhosts.brokers["team-a"].queues["orders"]
    vhosts.brokers["team-a"].consumed(team_a, team_a.take(1)[0])
    durable(vhosts.store, reactor)
    close(vhosts.store, reactor)
    assert record_types(tmp_path) == [ADD_TIMED, ADD_VHOST, ADD_VHOST, ADD_VHOST, REMOVE_VHOST]

    again, store, reactor, count = reopened(tmp_path, "team-a", "team-b")
    assert count == 3
    assert bodies(again, DEFAULT_VHOST, "orders") == [b"default"]
    assert bodies(again, "team-a", "orders") == [b"a2"]
    assert bodies(again, "team-b", "orders") == [b"b"]
    close(store, reactor)


def test_a_data_dir_written_without_vhosts_recovers_into_the_default_vhost(tmp_path):
    store, reactor, _ = open_store(tmp_path)  # the journal and catalog as a node before vhosts wrote them
    added = [message(n, b"old-%d" % n) for n in range(3)]
    for stored in added:
        store.add("Q:orders", stored)
    store.remove("Q:orders", added[0])
    store.save_catalog({"queues": ["orders", "empty"], "definitions": [], "links": {}})
    close(store, reactor)
    assert set(record_types(tmp_path)) == {ADD_TIMED, REMOVE}

    vhosts, store, reactor, count = reopened(tmp_path, "team-a")
    assert count == 2
    assert sorted(vhosts.default.queues) == ["empty", "orders"]
    assert sorted(bodies(vhosts, DEFAULT_VHOST, "orders")) == [b"old-1", b"old-2"]
    assert not vhosts.brokers["team-a"].queues
    close(store, reactor)


def test_each_vhosts_catalog_is_kept_when_another_saves(tmp_path):
    vhosts, reactor = node(tmp_path, "team-a")
    vhosts.brokers["team-a"].create_queue("a-only")
    vhosts.default.create_queue("default-only")
    document = json.loads((tmp_path / "catalog.json").read_text())
    assert document["queues"] == ["default-only"]
    assert document["vhosts"]["team-a"]["queues"] == ["a-only"]
    close(vhosts.store, reactor)

    again, store, reactor, _ = reopened(tmp_path, "team-a")
    assert sorted(again.default.queues) == ["default-only"]
    assert sorted(again.brokers["team-a"].queues) == ["a-only"]
    close(store, reactor)


def test_a_vhost_no_longer_configured_keeps_its_messages_in_the_store(tmp_path):
    vhosts, reactor = node(tmp_path, "team-a")
    vhosts.brokers["team-a"].send(QUEUE, "orders", {}, b"kept", persistent=True)
    close(vhosts.store, reactor)
    without, store, reactor, count = reopened(tmp_path)
    assert count == 0 and not without.default.queues  # nothing of team-a leaks into "/"
    close(store, reactor)
    again, store, reactor, count = reopened(tmp_path, "team-a")
    assert bodies(again, "team-a", "orders") == [b"kept"]
    close(store, reactor)


def test_vhosts_share_the_memory_budget_and_message_ids_but_not_names():
    vhosts = VirtualHosts(MemoryStore(), ["team-a"], memory_limit=10_000)
    team_a = vhosts.brokers["team-a"]
    first = vhosts.default.send(QUEUE, "orders", {}, b"x" * 6000)
    second = team_a.send(QUEUE, "orders", {}, b"y" * 6000)
    assert first is not None and second is not None and first.id != second.id
    assert vhosts.default.memory_full and team_a.memory_full  # one budget: the node's
    assert vhosts.default.memory_used == team_a.memory_used
    assert vhosts.default.queues["orders"] is not team_a.queues["orders"]
    released = []
    vhosts.default.when_memory_available(lambda: released.append(True))
    queue = team_a.queues["orders"]
    team_a.consumed(queue, queue.take(1)[0])
    assert released == [True]  # a consumer of one vhost frees the producers of another


@pytest.mark.parametrize("strict", [False, True])
def test_a_stomp_host_selects_a_vhost_or_the_default_unless_strict(strict):
    vhosts = VirtualHosts(MemoryStore(), ["team-a"], strict_stomp_host=strict)
    assert vhosts.for_stomp_host("team-a") is vhosts.brokers["team-a"]
    assert vhosts.for_stomp_host("/") is vhosts.default
    assert vhosts.for_stomp_host(None) is vhosts.default  # STOMP 1.0 sends no host
    assert vhosts.for_stomp_host("broker.example.com") is (None if strict else vhosts.default)


def test_the_vhosts_table_names_the_nodes_vhosts(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text('[vhosts]\nstrict_stomp_host = true\n[[vhosts.host]]\nname = "team-a"\n'
                    '[[vhosts.host]]\nname = "team b/\\u00e9"\n')
    config = load_config(path)
    assert config.vhosts.names == ("team-a", "team b/é") and config.vhosts.strict_stomp_host
    assert load_config(None).vhosts.names == () and not load_config(None).vhosts.strict_stomp_host


@pytest.mark.parametrize("entry, key, why", [
    ('name = ""', "vhosts.host[0].name", "empty"),
    ('name = "bad\\u0007bell"', "vhosts.host[0].name", "U+0007"),
    ('name = "tab\\there"', "vhosts.host[0].name", "U+0009"),
    (f'name = "{"x" * 256}"', "vhosts.host[0].name", "256 bytes"),
    ("name = 5", "vhosts.host[0].name", "a string"),
    ('name = "/"', "vhosts.host[0].name", "always exists"),
    ("", "vhosts.host[0].name", "required"),
])
def test_a_bad_vhost_name_is_refused_at_load_naming_the_key(tmp_path, entry, key, why):
    path = tmp_path / "node.toml"
    path.write_text(f"[[vhosts.host]]\n{entry}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.key == key and why in raised.value.problem, str(raised.value)


def test_a_vhost_given_twice_is_refused(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text('[[vhosts.host]]\nname = "a"\n[[vhosts.host]]\nname = "a"\n')
    with pytest.raises(ConfigError, match=r"vhosts.host\[1\].name: 'a': given twice"):
        load_config(path)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def seconds(self) -> float:
        return self.now


def test_the_expiry_sweep_reaches_every_vhost_and_expires_into_its_own_expiry_queue():
    clock = _Clock()
    vhosts = VirtualHosts(MemoryStore(), ["team-a"], clock=clock, expiry_queue="Expired")
    for broker in vhosts:
        broker.send(QUEUE, "orders", {}, b"short-lived", expires=vhosts.default.now_ms() + 1000)
    clock.now += 2
    vhosts.sweep_expired()
    for broker in vhosts:
        assert len(broker.queues["orders"]) == 0 and len(broker.queues["Expired"]) == 1
    assert vhosts.default.memory_used == sum(m.size for b in vhosts for m in b.queues["Expired"].take(1))


def test_a_vhosts_records_and_catalog_replicate_and_recover_on_the_backup(tmp_path):
    from tests.unit.test_replication import Sink

    reactor = LoopReactor()
    primary = ReplicatedJournalStore(tmp_path / "primary", reactor, sync=False)
    list(primary.recover())
    sink = primary.sink = Sink()
    vhosts = VirtualHosts(primary, ["team-a"])
    vhosts.brokers["team-a"].send(QUEUE, "orders", {}, b"replicated", persistent=True)
    durable(primary, reactor)
    backup = tmp_path / "backup"
    (backup / "journal").mkdir(parents=True)
    for segment, offset, data, _ in sink.writes:  # what the backup writes into its own files
        with open(backup / "journal" / f"{segment:08d}.log", "r+b" if offset else "wb") as file:
            file.seek(offset)
            file.write(data)
    [catalog] = [data for kind, data in sink.events if kind == "catalog"][-1:]
    (backup / "catalog.json").write_bytes(catalog)
    assert ADD_VHOST in record_types(backup)

    taken_over, store, reactor, count = reopened(backup, "team-a")
    assert count == 1 and bodies(taken_over, "team-a", "orders") == [b"replicated"]
    assert not taken_over.default.queues
    close(store, reactor)
