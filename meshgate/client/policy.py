"""Load-balancing policies: in which order a connect pass tries the brokers.

Named as Artemis names its client-side connection load-balancing policies:

- ``round-robin``: a random broker first, then each new connection (a reconnect, or a
  connect after a disconnect) starts with the broker after the one last used;
- ``random``: a fresh random order for each pass; the broker that last failed goes last
  (as ActiveMQ's ``randomize=true``);
- ``random-sticky``: a random broker, then the same one for every later connection until
  it fails (a lost connection or a refused attempt); then another at random;
- ``first-element``: always in the order given (ActiveMQ's ``randomize=false``): the
  first broker is the primary, the others are backups.

A policy is told what happened (:meth:`connected`, :meth:`failed`) and keeps its state
between passes; it never opens a socket. Pass a seeded :class:`random.Random` for
repeatable orders.
"""

from __future__ import annotations

import random as _random
from collections.abc import Hashable, Sequence
from typing import TypeVar

from meshgate.client.url import POLICIES

# A candidate: a BrokerURI in the client, an (host, port) tuple or anything hashable in tests.
T = TypeVar("T", bound=Hashable)


def _unique(candidates: Sequence[T]) -> list[T]:
    return list(dict.fromkeys(candidates))


class LoadBalancingPolicy:
    """Base class: ``order`` the candidates for one connect pass."""

    name = ""

    def __init__(self, rng: _random.Random | None = None) -> None:
        self.rng = rng or _random.Random()
        self.last_failed: Hashable | None = None

    def order(self, candidates: Sequence[T]) -> list[T]:
        """The candidates (duplicates dropped) in the order to try them."""
        raise NotImplementedError

    def connected(self, address: Hashable) -> None:
        """A connection to ``address`` was made."""

    def failed(self, address: Hashable) -> None:
        """A connection to ``address`` was lost, or an attempt to connect to it failed."""
        self.last_failed = address

    def _failed_last(self, addresses: list[T]) -> list[T]:
        if self.last_failed in addresses and len(addresses) > 1:
            addresses.remove(self.last_failed)
            addresses.append(self.last_failed)
        return addresses


class FirstElementPolicy(LoadBalancingPolicy):
    name = "first-element"

    def order(self, candidates: Sequence[T]) -> list[T]:
        return _unique(candidates)


class RandomPolicy(LoadBalancingPolicy):
    name = "random"

    def order(self, candidates: Sequence[T]) -> list[T]:
        addresses = _unique(candidates)
        self.rng.shuffle(addresses)
        return self._failed_last(addresses)


class RoundRobinPolicy(LoadBalancingPolicy):
    name = "round-robin"

    def __init__(self, rng: _random.Random | None = None) -> None:
        super().__init__(rng)
        self._last: Hashable | None = None
        self._start: int | None = None

    def order(self, candidates: Sequence[T]) -> list[T]:
        addresses = _unique(candidates)
        if not addresses:
            return []
        if self._last in addresses:
            start = addresses.index(self._last) + 1
        else:
            if self._start is None:
                self._start = self.rng.randrange(len(addresses))
            start = self._start
        start %= len(addresses)
        return addresses[start:] + addresses[:start]

    def connected(self, address: Hashable) -> None:
        self._last = address


class RandomStickyPolicy(LoadBalancingPolicy):
    name = "random-sticky"

    def __init__(self, rng: _random.Random | None = None) -> None:
        super().__init__(rng)
        self.sticky: Hashable | None = None

    def order(self, candidates: Sequence[T]) -> list[T]:
        addresses = _unique(candidates)
        others = [a for a in addresses if a != self.sticky]
        self.rng.shuffle(others)
        if self.sticky in addresses:
            return [self.sticky, *others]  # type: ignore[list-item]
        return self._failed_last(others)

    def connected(self, address: Hashable) -> None:
        self.sticky = address

    def failed(self, address: Hashable) -> None:
        super().failed(address)
        if address == self.sticky:
            self.sticky = None


_POLICIES: dict[str, type[LoadBalancingPolicy]] = {
    cls.name: cls for cls in (RoundRobinPolicy, RandomPolicy, RandomStickyPolicy, FirstElementPolicy)
}
assert set(_POLICIES) == set(POLICIES)


def make_policy(name: str, rng: _random.Random | None = None) -> LoadBalancingPolicy:
    """The policy called ``name`` (one of :data:`meshgate.client.url.POLICIES`)."""
    try:
        cls = _POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})") from None
    return cls(rng)
