"""Finding nodes by DNS, where multicast does not reach (cloud networks,
Kubernetes): the A records of a name, each address at the configured port, and
the SRV records ``_meshgate._tcp.<name>``, each target's addresses at the
record's port (a Kubernetes headless service with a port named ``meshgate``
publishes both). Resolved every ``refresh`` seconds: an address that appears is
reported found, one no longer listed lost (its owner stops dialling it; a live
link to it stays). A lookup that fails changes nothing: a DNS outage must not
make a node forget its peers. A name that does not exist (NXDOMAIN) is an
answer: no nodes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from twisted.internet import defer, task
from twisted.names import dns, error

log = logging.getLogger("meshgate.mesh.discovery")

SERVICE = "_meshgate._tcp"
LOOKUP_TIMEOUT = (1, 3)  # seconds per try; twisted's default retries for a minute
Address = tuple[str, int]


def resolver_for(servers: tuple[Address, ...], reactor: Any) -> Any:
    """A resolver asking ``servers``, or the system's (resolv.conf, hosts) when none.

    Built as ``client.createResolver`` builds it, but on ``reactor`` (createResolver takes
    no reactor and would use the global one)."""
    from twisted.names import client, hosts, resolve

    if servers:
        return client.Resolver(servers=list(servers), reactor=reactor)
    return resolve.ResolverChain([hosts.Resolver(b"/etc/hosts"),
                                  client.Resolver(resolv=b"/etc/resolv.conf", reactor=reactor)])


@defer.inlineCallbacks
def resolve(resolver: Any, name: str, port: int | None, service: str = SERVICE):
    """The set of (address, port) the name's A records (when ``port`` is given) and
    its SRV records ``<service>.<name>`` list (``service`` is ``_meshgate._tcp``, the
    nodes' link ports, unless a caller such as the client asks for another)."""
    lookups = [_srv_addresses(resolver, name, service)]
    if port is not None:
        lookups.append(_a_addresses(resolver, name, port))
    results = yield defer.gatherResults(lookups, consumeErrors=True).addErrback(_first_error)
    return set().union(*results)


def _first_error(failure: Any) -> Any:
    return failure.value.subFailure if failure.check(defer.FirstError) else failure


@defer.inlineCallbacks
def _a_addresses(resolver: Any, name: str, port: int):
    try:
        answers, _, _ = yield resolver.lookupAddress(name, timeout=LOOKUP_TIMEOUT)
    except error.DNSNameError:
        return set()
    return {(record.payload.dottedQuad(), port) for record in answers if record.type == dns.A}


@defer.inlineCallbacks
def _srv_addresses(resolver: Any, name: str, service: str = SERVICE):
    try:
        answers, _, additional = yield resolver.lookupService(f"{service}.{name}", timeout=LOOKUP_TIMEOUT)
    except error.DNSNameError:
        return set()
    glue: dict[str, set[str]] = {}
    for record in additional:
        if record.type == dns.A:
            glue.setdefault(str(record.name).lower(), set()).add(record.payload.dottedQuad())
    found: set[Address] = set()
    for record in answers:
        if record.type != dns.SRV:
            continue
        target, port = str(record.payload.target).lower(), record.payload.port
        hosts = glue.get(target)
        if hosts is None:
            hosts = {host for host, _ in (yield _a_addresses(resolver, target, port))}
        found.update((host, port) for host in hosts)
    return found


class DnsDiscovery:
    """Resolves ``name`` every ``refresh`` seconds and reports the differences."""

    def __init__(self, reactor: Any, name: str, port: int | None, resolver: Any, refresh: float,
                 on_found: Callable[[Address], None], on_lost: Callable[[Address], None]) -> None:
        self.reactor = reactor
        self.name, self.port = name, port
        self.resolver = resolver
        self.refresh_period = refresh
        self.on_found, self.on_lost = on_found, on_lost
        self.addresses: set[Address] = set()
        self.last_error: str | None = None
        self._loop: task.LoopingCall | None = None
        self._busy = False

    @property
    def spec(self) -> str:
        return self.name if self.port is None else f"{self.name}:{self.port}"

    def start(self) -> None:
        self._loop = task.LoopingCall(self.refresh)
        self._loop.clock = self.reactor
        self._loop.start(self.refresh_period, now=True).addErrback(
            lambda f: log.error("mesh: DNS discovery stopped: %s", f.getErrorMessage()))

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    def refresh(self) -> defer.Deferred:
        """One lookup; fires when its differences were reported (a failure is logged)."""
        if self._busy:  # the last lookup is still waiting on a slow server
            return defer.succeed(None)
        self._busy = True
        lookup = resolve(self.resolver, self.name, self.port)
        lookup.addCallbacks(self._found, self._failed)
        return lookup.addBoth(self._done)

    def _done(self, _: object) -> None:
        self._busy = False

    def _found(self, addresses: set[Address]) -> None:
        if self.last_error is not None:
            log.info("mesh: DNS discovery of %s answers again", self.spec)
            self.last_error = None
        appeared, gone = addresses - self.addresses, self.addresses - addresses
        self.addresses = set(addresses)
        for address in sorted(gone):
            self._notify(self.on_lost, address)
        for address in sorted(appeared):
            self._notify(self.on_found, address)

    def _failed(self, failure: Any) -> None:
        message = failure.getErrorMessage() or failure.type.__name__
        if self.last_error is None:  # once per outage, not every refresh
            log.warning("mesh: DNS discovery of %s failed (%s); dialling the %d addresses it last listed",
                        self.spec, message, len(self.addresses))
        self.last_error = message

    def _notify(self, callback: Callable[[Address], None], address: Address) -> None:
        try:
            callback(address)
        except Exception:  # one faulty address must not stop the others
            log.exception("mesh: DNS discovery callback failed for %s:%d", *address)
