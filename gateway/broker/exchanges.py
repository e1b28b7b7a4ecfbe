"""Exchanges: named routers from a routing key (and headers) to queues, as AMQP
0-9-1 has them, built from the mesh-wide definitions (model.definitions) so that
every node routes alike. The core routes through them; it knows no protocol.

Predeclared as in RabbitMQ: the default exchange ``""`` (a queue's name is its
routing key), ``amq.direct``, ``amq.fanout``, ``amq.topic`` and ``amq.headers``.
``amq.topic`` is also where STOMP's ``/topic/`` destinations meet AMQP: a queue
bound to it gets what STOMP clients publish to matching topics, and what is
published to it reaches STOMP topic subscribers."""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from model.definitions import BindingSpec, ExchangeSpec

TOPIC_EXCHANGE = "amq.topic"
PREDECLARED = {
    "": ExchangeSpec(type="direct"),
    "amq.direct": ExchangeSpec(type="direct"),
    "amq.fanout": ExchangeSpec(type="fanout"),
    TOPIC_EXCHANGE: ExchangeSpec(type="topic"),
    "amq.headers": ExchangeSpec(type="headers"),
    "amq.match": ExchangeSpec(type="headers"),
}
_MAX_DEPTH = 16  # exchange-to-exchange hops followed, so that a cycle ends


class Exchange:
    __slots__ = ("name", "spec", "bindings", "_direct")

    def __init__(self, name: str, spec: ExchangeSpec) -> None:
        self.name = name
        self.spec = spec
        self.bindings: dict[str, tuple[BindingSpec, Callable[[str, dict], bool]]] = {}
        self._direct: dict[str, list[BindingSpec]] = {}  # routing key -> bindings (direct exchanges)

    def bind(self, binding: BindingSpec) -> None:
        self.bindings[binding.key()] = (binding, _matcher(self.spec.type, binding))
        self._index()

    def unbind(self, key: str) -> BindingSpec | None:
        found = self.bindings.pop(key, None)
        self._index()
        return None if found is None else found[0]

    def _index(self) -> None:
        if self.spec.type == "direct":
            index: dict[str, list[BindingSpec]] = {}
            for binding, _ in self.bindings.values():
                index.setdefault(binding.routing_key, []).append(binding)
            self._direct = index

    def matching(self, routing_key: str, headers: dict) -> Iterable[BindingSpec]:
        if self.spec.type == "direct":
            return self._direct.get(routing_key, ())
        return [binding for binding, matches in self.bindings.values() if matches(routing_key, headers)]


class Exchanges:
    def __init__(self) -> None:
        self.exchanges: dict[str, Exchange] = {name: Exchange(name, spec) for name, spec in PREDECLARED.items()}
        # Bindings whose source exchange this node does not hold (yet): definitions
        # may arrive in any order, and a deleted exchange's bindings are deleted after it.
        self._waiting: dict[str, BindingSpec] = {}

    def declare(self, name: str, spec: ExchangeSpec) -> None:
        exchange = self.exchanges.get(name)
        if exchange is None:
            exchange = self.exchanges[name] = Exchange(name, spec)
            for key, binding in list(self._waiting.items()):
                if binding.source == name:
                    del self._waiting[key]
                    exchange.bind(binding)
        else:
            exchange.spec = spec
            for binding, _ in list(exchange.bindings.values()):
                exchange.bind(binding)  # matched by the new type

    def delete(self, name: str) -> None:
        if name in PREDECLARED:
            return
        exchange = self.exchanges.pop(name, None)
        if exchange is not None:
            for key, (binding, _) in exchange.bindings.items():
                self._waiting[key] = binding

    def bind(self, binding: BindingSpec) -> None:
        exchange = self.exchanges.get(binding.source)
        if exchange is None:
            self._waiting[binding.key()] = binding
        else:
            exchange.bind(binding)

    def unbind_key(self, key: str) -> None:
        """Drop the binding of that definition name (BindingSpec.key), wherever it is."""
        if self._waiting.pop(key, None) is None:
            for exchange in self.exchanges.values():
                if exchange.unbind(key) is not None:
                    return

    def queues_for(self, exchange: str, routing_key: str, headers: dict) -> set[str]:
        """The queues a message published to ``exchange`` goes to (each once)."""
        queues: set[str] = set()
        self._follow(exchange, routing_key, headers, queues, set(), 0)
        return queues

    def _follow(self, name: str, routing_key: str, headers: dict, queues: set[str], seen: set[str],
                depth: int) -> None:
        exchange = self.exchanges.get(name)
        if exchange is None or name in seen or depth > _MAX_DEPTH:
            return
        seen.add(name)
        for binding in exchange.matching(routing_key, headers):
            if binding.destination_kind == "queue":
                queues.add(binding.destination)
            else:
                self._follow(binding.destination, routing_key, headers, queues, seen, depth + 1)

    def bound_to(self, destination: str, kind: str = "queue") -> list[BindingSpec]:
        return [binding for exchange in self.exchanges.values() for binding, _ in exchange.bindings.values()
                if binding.destination == destination and binding.destination_kind == kind]

    def topic_bound(self) -> bool:
        """Whether any queue takes STOMP topic messages (a binding on amq.topic)."""
        return bool(self.exchanges[TOPIC_EXCHANGE].bindings)


def _matcher(kind: str, binding: BindingSpec) -> Callable[[str, dict], bool]:
    if kind == "fanout":
        return lambda key, headers: True
    if kind == "topic":
        match = topic_pattern(binding.routing_key).fullmatch
        return lambda key, headers: match("." + key) is not None
    if kind == "headers":
        return _headers_matcher(binding.arguments)
    key = binding.routing_key
    return lambda routing_key, headers: routing_key == key


def topic_pattern(binding_key: str) -> re.Pattern:
    """AMQP topic matching: words split by ``.``, ``*`` one word, ``#`` none or more.
    The pattern matches the routing key with a dot put before it, so that every
    word, the first included, follows a dot and ``#`` can stand for no words."""
    parts = []
    for word in binding_key.split("."):
        if word == "#":
            parts.append(r"(?:\.[^.]*)*")
        elif word == "*":
            parts.append(r"\.[^.]*")
        else:
            parts.append(r"\." + re.escape(word))
    return re.compile("".join(parts))


def _headers_matcher(arguments: dict[str, Any]) -> Callable[[str, dict], bool]:
    mode = str(arguments.get("x-match", "all"))
    wanted = {k: v for k, v in arguments.items() if not k.startswith("x-")}
    if mode in ("any", "any-with-x"):
        return lambda key, headers: any(k in headers and (v is None or headers[k] == v) for k, v in wanted.items())
    return lambda key, headers: all(k in headers and (v is None or headers[k] == v) for k, v in wanted.items())
