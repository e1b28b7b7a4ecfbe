"""Exchanges in the core (gateway/broker/exchanges.py): AMQP topic matching, the
four exchange types, exchange-to-exchange bindings (cycles end), and bindings
that arrive before their exchange."""

from __future__ import annotations

import pytest

from gateway.broker.exchanges import Exchanges, topic_pattern
from model.definitions import BindingSpec, ExchangeSpec


@pytest.mark.parametrize("binding, key, matches", [
    ("a.*", "a.b", True), ("a.*", "a.b.c", False), ("a.*", "a", False),
    ("a.#", "a", True), ("a.#", "a.b.c", True), ("#", "", True), ("#", "x.y", True),
    ("*.b", "a.b", True), ("#.b", "b", True), ("#.b", "a.c.b", True), ("#.b", "a.c", False),
    ("a.#.c", "a.c", True), ("a.#.c", "a.x.y.c", True), ("a.#.c", "a.x.y", False),
    ("", "", True), ("", "a", False), ("a.b", "a.b", True), ("*", "", True), ("*", "a.b", False),
    ("a.b", "a.bb", False), ("a+b.c", "a+b.c", True), ("a+b.c", "aab.c", False),
])
def test_topic_matching(binding, key, matches):
    assert (topic_pattern(binding).fullmatch("." + key) is not None) is matches


def bound(exchanges: Exchanges, source: str, queue: str, key: str = "", kind: str = "queue", **arguments):
    exchanges.bind(BindingSpec(source=source, destination=queue, destination_kind=kind, routing_key=key,
                               arguments=arguments))


def test_each_exchange_type_routes_as_amqp_says():
    exchanges = Exchanges()
    exchanges.declare("logs", ExchangeSpec(type="fanout"))
    exchanges.declare("jobs", ExchangeSpec(type="direct"))
    exchanges.declare("events", ExchangeSpec(type="topic"))
    exchanges.declare("match", ExchangeSpec(type="headers"))
    bound(exchanges, "logs", "l1", "ignored")
    bound(exchanges, "logs", "l2")
    bound(exchanges, "jobs", "j1", "pdf")
    bound(exchanges, "jobs", "j2", "pdf")
    bound(exchanges, "jobs", "j3", "png")
    bound(exchanges, "events", "e1", "eu.#")
    bound(exchanges, "events", "e2", "*.orders")
    bound(exchanges, "match", "all", **{"x-match": "all", "format": "pdf", "type": "report"})
    bound(exchanges, "match", "any", **{"x-match": "any", "format": "pdf", "type": "report"})
    assert exchanges.queues_for("logs", "x", {}) == {"l1", "l2"}
    assert exchanges.queues_for("jobs", "pdf", {}) == {"j1", "j2"}
    assert exchanges.queues_for("jobs", "gif", {}) == set()
    assert exchanges.queues_for("events", "eu.orders", {}) == {"e1", "e2"}
    assert exchanges.queues_for("events", "us.orders", {}) == {"e2"}
    assert exchanges.queues_for("match", "", {"format": "pdf", "type": "report"}) == {"all", "any"}
    assert exchanges.queues_for("match", "", {"format": "pdf"}) == {"any"}
    assert exchanges.queues_for("missing", "x", {}) == set()


def test_exchange_to_exchange_bindings_are_followed_and_cycles_end():
    exchanges = Exchanges()
    for name in ("a", "b"):
        exchanges.declare(name, ExchangeSpec(type="fanout"))
    bound(exchanges, "a", "b", kind="exchange")
    bound(exchanges, "b", "a", kind="exchange")
    bound(exchanges, "b", "q")
    bound(exchanges, "a", "q")  # reached twice, taken once
    assert exchanges.queues_for("a", "", {}) == {"q"}


def test_bindings_wait_for_their_exchange_and_go_with_a_deleted_one():
    exchanges = Exchanges()
    binding = BindingSpec(source="late", destination="q", routing_key="k")
    exchanges.bind(binding)  # its exchange's definition has not arrived yet
    assert exchanges.queues_for("late", "k", {}) == set()
    exchanges.declare("late", ExchangeSpec(type="direct"))
    assert exchanges.queues_for("late", "k", {}) == {"q"}
    exchanges.delete("late")
    exchanges.unbind_key(binding.key())
    exchanges.declare("late", ExchangeSpec(type="direct"))
    assert exchanges.queues_for("late", "k", {}) == set()


def test_predeclared_exchanges_stay():
    exchanges = Exchanges()
    exchanges.delete("amq.topic")
    assert {"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers"} <= set(exchanges.exchanges)
