"""A real DNS server on loopback for the DNS-discovery tests: twisted.names serving A
and SRV records from a JSON zone file it reads again on every query, so a test
changes the records by rewriting the file.

Run as a script (``python dns_support.py ZONE HOST PORT``; port 0: a free one) it serves
on UDP and prints ``port N``; :class:`DnsServer` starts and stops that process.
Zone file: ``{"a": {"NAME": ["IP", …]}, "srv": {"NAME": [["TARGET", PORT], …]}}``.
A name in neither table answers NXDOMAIN; an SRV answer carries its targets' A
records as additional records, as real servers do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class DnsServer:
    def __init__(self, directory: Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.zone = Path(directory) / "zone.json"
        self.host = host
        self.set()
        self.process = subprocess.Popen([sys.executable, str(HERE / "dns_support.py"), str(self.zone), host, str(port)],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.process.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the DNS server did not start: {line}{self.process.stdout.read()}")
        self.port = int(line.split()[1])

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def set(self, a: dict[str, list[str]] | None = None, srv: dict[str, list[tuple[str, int]]] | None = None) -> None:
        """Replace every record (atomically: a query never reads half a file)."""
        partial = self.zone.with_suffix(".tmp")
        partial.write_text(json.dumps({"a": a or {}, "srv": srv or {}}))
        os.replace(partial, self.zone)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def zone_resolver(records: Callable[[], dict]) -> Any:
    """A twisted.names resolver answering from ``records()`` (the zone file's shape),
    asked again for every query."""
    from twisted.internet import defer
    from twisted.names import common, dns, error

    def a_record(name: str, ip: str) -> Any:
        return dns.RRHeader(name, dns.A, dns.IN, 0, dns.Record_A(ip, ttl=0))

    class ZoneResolver(common.ResolverBase):
        def _lookup(self, name, cls, kind, timeout):
            zone = records()
            key = name.decode().lower().rstrip(".")
            if key not in zone["a"] and key not in zone["srv"]:
                return defer.fail(error.DNSNameError(key))
            answers, additional = [], []
            if kind in (dns.A, dns.ALL_RECORDS):
                answers += [a_record(key, ip) for ip in zone["a"].get(key, [])]
            if kind in (dns.SRV, dns.ALL_RECORDS):
                for target, port in zone["srv"].get(key, []):
                    answers.append(dns.RRHeader(key, dns.SRV, dns.IN, 0, dns.Record_SRV(0, 0, port, target, ttl=0)))
                    additional += [a_record(target, ip) for ip in zone["a"].get(target.lower(), [])]
            return defer.succeed((answers, [], additional))

    return ZoneResolver()


def _serve(zone: Path, host: str, port: int) -> None:
    from twisted.internet import reactor
    from twisted.names import dns, server

    factory = server.DNSServerFactory(authorities=[zone_resolver(lambda: json.loads(zone.read_text()))])
    listening = reactor.listenUDP(port, dns.DNSDatagramProtocol(controller=factory), interface=host)
    print(f"port {listening.getHost().port}", flush=True)
    reactor.run()


if __name__ == "__main__":
    _serve(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
