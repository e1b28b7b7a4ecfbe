"""DNS discovery (mesh/dns_discovery.py) on a fake clock, asking a twisted.names
resolver that answers from records the test changes (tests/e2e/dns_support.py;
the end-to-end tests put the same resolver behind a real DNS server)."""

from __future__ import annotations

import logging

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from mesh.dns_discovery import DnsDiscovery
from tests.e2e.dns_support import zone_resolver


class Zone:
    def __init__(self) -> None:
        self.records = {"a": {}, "srv": {}}
        self.down = False

    def __call__(self) -> dict:
        if self.down:
            raise OSError("the server is down")
        return self.records


def discovery(zone: Zone, name: str = "mesh.test", port: int | None = 61616, resolver=None):
    clock = MemoryReactorClock()
    events: list[tuple[str, tuple[str, int]]] = []
    service = DnsDiscovery(clock, name, port, resolver or zone_resolver(zone), 10.0,
                           on_found=lambda address: events.append(("found", address)),
                           on_lost=lambda address: events.append(("lost", address)))
    service.start()
    return clock, service, events


def test_a_records_are_found_at_the_port_and_changes_reported_at_the_next_refresh():
    zone = Zone()
    zone.records["a"]["mesh.test"] = ["10.0.0.1", "10.0.0.2"]
    clock, service, events = discovery(zone)
    assert events == [("found", ("10.0.0.1", 61616)), ("found", ("10.0.0.2", 61616))]
    zone.records["a"]["mesh.test"] = ["10.0.0.2", "10.0.0.3"]
    clock.advance(9.9)
    assert len(events) == 2  # not before refresh_timeout_ms
    clock.advance(0.1)
    assert events[2:] == [("lost", ("10.0.0.1", 61616)), ("found", ("10.0.0.3", 61616))]
    clock.advance(10)
    assert len(events) == 4  # nothing changed, nothing said
    service.stop()


def test_srv_records_give_each_target_its_own_port_with_or_without_glue():
    zone = Zone()
    zone.records["srv"]["_meshgate._tcp.mesh.test"] = [("n1.mesh.test", 7001), ("n2.other.test", 7002)]
    zone.records["a"]["n1.mesh.test"] = ["10.0.0.1"]  # served as glue with the SRV answer
    zone.records["a"]["n2.other.test"] = ["10.0.0.2"]
    _, service, events = discovery(zone, port=None)
    assert sorted(address for _, address in events) == [("10.0.0.1", 7001), ("10.0.0.2", 7002)]

    class NoGlue:
        """The same records without the additional section: targets must be looked up."""

        def __init__(self) -> None:
            self.inner = zone_resolver(zone)

        def lookupService(self, name, timeout=None):
            return self.inner.lookupService(name, timeout).addCallback(lambda result: (result[0], [], []))

        def lookupAddress(self, name, timeout=None):
            return self.inner.lookupAddress(name, timeout)

    _, _, plain = discovery(zone, port=None, resolver=NoGlue())
    assert sorted(address for _, address in plain) == [("10.0.0.1", 7001), ("10.0.0.2", 7002)]


def test_a_and_srv_records_of_one_name_add_up_and_a_missing_name_is_no_nodes():
    zone = Zone()
    zone.records["a"]["mesh.test"] = ["10.0.0.1"]
    zone.records["srv"]["_meshgate._tcp.mesh.test"] = [("mesh.test", 7000)]
    _, service, events = discovery(zone)
    assert service.addresses == {("10.0.0.1", 61616), ("10.0.0.1", 7000)}
    _, empty, nothing = discovery(zone, name="nobody.test")
    assert nothing == [] and empty.last_error is None  # NXDOMAIN: an answer, not a failure


def test_a_failed_lookup_keeps_every_address_and_warns_once(caplog):
    zone = Zone()
    zone.records["a"]["mesh.test"] = ["10.0.0.1"]
    clock, service, events = discovery(zone)
    zone.down = True
    with caplog.at_level(logging.WARNING, logger="meshgate.mesh.discovery"):
        clock.advance(10)
        clock.advance(10)
    assert events == [("found", ("10.0.0.1", 61616))]  # nothing lost for an outage
    assert service.addresses == {("10.0.0.1", 61616)} and "the server is down" in service.last_error
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "mesh.test:61616 failed" in warnings[0].getMessage()
    zone.down = False
    zone.records["a"]["mesh.test"] = []
    clock.advance(10)
    assert events[1:] == [("lost", ("10.0.0.1", 61616))] and service.last_error is None


def test_a_slow_lookup_is_not_overlapped_by_the_next():
    calls = []

    class Slow:
        def lookupService(self, name, timeout=None):
            calls.append(name)
            return defer.Deferred()  # never answers

        def lookupAddress(self, name, timeout=None):
            return defer.Deferred()

    clock, service, _ = discovery(Zone(), resolver=Slow())
    assert service.refresh().called  # still busy with the first: returns at once
    clock.advance(60)
    assert calls == ["_meshgate._tcp.mesh.test"]


def test_without_dns_servers_the_system_resolver_is_built_on_the_given_reactor():
    """``dns_servers = []`` (the default) once made the node fail to start: createResolver
    takes no reactor argument."""
    from twisted.names import resolve

    from mesh.dns_discovery import resolver_for

    clock = MemoryReactorClock()
    resolver = resolver_for((), clock)
    assert isinstance(resolver, resolve.ResolverChain)
    assert any(getattr(r, "_reactor", None) is clock for r in resolver.resolvers)
