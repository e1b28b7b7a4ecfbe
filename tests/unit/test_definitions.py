"""Mesh-wide definitions as one node holds them (gateway/broker/definitions.py):
the latest change wins by (version, origin) whatever order records arrive in,
versions count past everything seen, deletions are records until they expire,
and a catalog written before definitions existed still recovers its durable
subscriptions."""

from __future__ import annotations

import itertools
import json
import random

from gateway.broker.broker import Broker
from gateway.broker.definitions import Definitions
from gateway.broker.message import TOPIC
from gateway.selector import compile_selector
from gateway.store.journal import JournalStore
from model.definitions import DURABLE_SUBSCRIPTION, QUEUE_SETTINGS, DurableSpec, QueueSettings
from tests.unit.test_journal import LoopReactor, close, durable


def changes() -> list:
    """Changes made on three nodes that hear of each other now and then."""
    a, b, c = Definitions("node-a"), Definitions("node-b"), Definitions("node-c")
    made = [a.change(QUEUE_SETTINGS, "orders", 1.0, queue=QueueSettings(max_delivery_attempts=2))]
    b.merge(made[0])
    made.append(b.change(QUEUE_SETTINGS, "orders", 2.0, queue=QueueSettings(max_delivery_attempts=3)))
    made.append(c.change(QUEUE_SETTINGS, "orders", 3.0))  # c deletes it, having heard of nothing
    made.append(a.change(DURABLE_SUBSCRIPTION, "app.feed", 4.0, durable=DurableSpec(topic="news.>")))
    made.append(c.change(DURABLE_SUBSCRIPTION, "app.feed", 5.0, durable=DurableSpec(topic="news.eu")))
    return made


def test_every_order_of_merging_ends_in_the_same_records():
    made = changes()
    outcomes = set()
    for order in itertools.permutations(made):
        node = Definitions("node-z")
        for record in order:
            node.merge(record)
        outcomes.add(json.dumps(node.to_catalog(), sort_keys=True))
    assert len(outcomes) == 1
    (catalog,) = outcomes
    by_name = {r["name"]: r for r in json.loads(catalog)}
    # b's change had seen a's (version 2) and beats c's blind deletion (version 1).
    assert by_name["orders"]["origin"] == "node-b" and by_name["orders"]["queue"] == {"max_delivery_attempts": 3}
    # Equal versions: the higher node id.
    assert by_name["app.feed"]["origin"] == "node-c" and by_name["app.feed"]["durable"] == {"topic": "news.eu"}


def test_a_change_is_numbered_past_every_version_seen():
    node = Definitions("node-a")
    other = Definitions("node-b")
    for _ in range(5):
        other.change(QUEUE_SETTINGS, "q", 0.0, queue=QueueSettings())
    node.merge(other.get(QUEUE_SETTINGS, "q"))
    mine = node.change(QUEUE_SETTINGS, "q", 0.0)
    assert mine.version == 6 and mine.deleted and mine.wins_over(other.get(QUEUE_SETTINGS, "q"))
    assert node.merge(other.get(QUEUE_SETTINGS, "q")) is False  # an old record changes nothing


def test_deletions_are_kept_until_they_expire():
    node = Definitions("node-a")
    node.change(QUEUE_SETTINGS, "old", 10.0)
    node.change(QUEUE_SETTINGS, "recent", 100.0)
    node.change(QUEUE_SETTINGS, "kept", 10.0, queue=QueueSettings(message_ttl_ms=5))
    assert node.drop_tombstones(older_than=50.0) == 1
    assert node.get(QUEUE_SETTINGS, "old") is None and node.get(QUEUE_SETTINGS, "recent").deleted
    assert [r.name for r in node.records() if not r.deleted] == ["kept"]


def test_random_gossip_converges():
    rng = random.Random(7)
    nodes = [Definitions(f"node-{i}") for i in range(4)]
    log = []
    for step in range(60):
        node = rng.choice(nodes)
        if rng.random() < 0.5:
            settings = None if rng.random() < 0.3 else QueueSettings(max_delivery_attempts=rng.randint(1, 9))
            log.append(node.change(QUEUE_SETTINGS, rng.choice("xyz"), float(step), queue=settings))
        else:
            for record in rng.sample(log, min(len(log), 3)):
                node.merge(record)
    for node in nodes:
        for record in log:
            node.merge(record)
    assert len({json.dumps(n.to_catalog(), sort_keys=True) for n in nodes}) == 1


def test_a_catalog_from_before_definitions_recovers_its_durable_subscriptions(tmp_path):
    (tmp_path / "catalog.json").write_text(json.dumps(
        {"queues": ["orders"], "durable": {"app.feed": {"topic": "news.>", "selector": "x = 1"}}, "links": {}}))
    reactor = LoopReactor()
    broker = Broker(JournalStore(tmp_path, reactor), node_id="node-a", compile_selector=compile_selector)
    broker.recover()
    binding = broker.bindings["app.feed"]
    assert binding.durable and binding.pattern == "news.>" and binding.selector_text == "x = 1"
    broker.send(TOPIC, "news.eu", {"x": "1"}, b"kept", persistent=True)
    broker.define_queue("orders", QueueSettings(max_delivery_attempts=4))
    durable(broker.store, reactor)
    close(broker.store, reactor)
    again = Broker(JournalStore(tmp_path, LoopReactor()), node_id="node-a", compile_selector=compile_selector)
    again.recover()
    assert [m.body for m in again.bindings["app.feed"].queue] == [b"kept"]
    assert again.queue_settings["orders"].max_delivery_attempts == 4
    assert again.definitions.get(DURABLE_SUBSCRIPTION, "app.feed").origin == "node-a"


def test_a_stored_message_of_a_deleted_durable_subscription_is_dropped_at_recovery(tmp_path, caplog):
    reactor = LoopReactor()
    broker = Broker(JournalStore(tmp_path, reactor), node_id="node-a")
    broker.recover()
    session = broker.open_session(None, "reader")
    session.subscribe("1", TOPIC, "news", "auto", None, None, "app.feed")
    session.close()
    broker.send(TOPIC, "news", {}, b"orphan", persistent=True)
    durable(broker.store, reactor)
    close(broker.store, reactor)
    catalog = json.loads((tmp_path / "catalog.json").read_text())
    catalog["definitions"] = []  # deleted while its message was on the way here
    (tmp_path / "catalog.json").write_text(json.dumps(catalog))
    for dropped in (1, 0):  # the first start drops it (no error), the second finds nothing
        caplog.clear()
        reactor = LoopReactor()
        again = Broker(JournalStore(tmp_path, reactor), node_id="node-a")
        assert again.recover() == 0 and "app.feed" not in again.bindings
        assert sum("deleted durable subscription 'app.feed' dropped" in r.message for r in caplog.records) == dropped
        durable(again.store, reactor)
        close(again.store, reactor)
