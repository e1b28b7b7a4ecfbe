"""What the broker core rebuilds from a journal after a restart."""

from __future__ import annotations

from gateway.broker.broker import Broker
from gateway.broker.message import QUEUE, TOPIC
from gateway.store.journal import JournalStore
from tests.unit.test_journal import LoopReactor, close, durable


def boot(path) -> tuple[Broker, LoopReactor]:
    reactor = LoopReactor()
    broker = Broker(JournalStore(path, reactor), clock=None)
    broker.recover()
    return broker, reactor


def test_queues_and_a_mesh_peers_topic_backlog_survive_a_restart(tmp_path):
    broker, reactor = boot(tmp_path)
    broker.links.bind("peer-1", ["news.>"])
    broker.send(TOPIC, "news.eu", {}, b"for the peer", persistent=True)
    broker.send(TOPIC, "news.eu", {}, b"volatile", persistent=False)
    broker.send(QUEUE, "orders", {"k": "v"}, b"queued", persistent=True)
    durable(broker.store, reactor)
    close(broker.store, reactor)
    broker, _ = boot(tmp_path)
    link_queue = broker.bindings["link/peer-1"].queue
    assert [m.body for m in link_queue] == [b"for the peer"]
    assert broker.links.patterns == {"peer-1": ["news.>"]}
    (queued,) = list(broker.queues["orders"])
    assert queued.body == b"queued" and queued.headers == {"k": "v"} and queued.redelivered
