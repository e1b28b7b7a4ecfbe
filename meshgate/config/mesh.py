"""The ``[mesh]`` table: links, discovery, load balancing and custody."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gateway.auth import destination_matcher
from meshgate.config.schema import (
    _NODE_NAME,
    ConfigError,
    _array_of,
    _boolean,
    _describe,
    _integer,
    _key,
    _number,
    _parse,
    _path,
    _pattern,
    _string,
    _table,
    _upper_choice,
    parse_address,
)
from meshgate.config.tls_files import check_tls_files

if TYPE_CHECKING:
    from gateway.tls import TlsMaterial


def _peers(value: Any, key: str) -> tuple[tuple[str, int], ...]:
    """An array of "HOST:PORT" strings naming other nodes' mesh listeners."""
    if not isinstance(value, list):
        raise ConfigError(key, f'expected an array of "HOST:PORT" strings, got {_describe(value)}')
    peers: list[tuple[str, int]] = []
    for i, item in enumerate(value):
        address = parse_address(item, f"{key}[{i}]")
        if address[1] == 0:
            raise ConfigError(f"{key}[{i}]", f"port 0 is for listeners; give the peer's real port, got {item!r}")
        if address in peers:
            raise ConfigError(f"{key}[{i}]", f"{item!r} is listed twice")
        peers.append(address)
    return tuple(peers)


def _multicast_group(value: Any, key: str) -> tuple[str, int]:
    """``"udp://GROUP:PORT"`` with an IPv4 multicast GROUP (224.0.0.0/4) -> (group, port)."""
    hint = 'expected "udp://GROUP:PORT" with an IPv4 multicast group, e.g. "udp://239.255.2.3:6155"'
    if not isinstance(value, str) or not value.startswith("udp://"):
        raise ConfigError(key, f"{hint}, got {value!r}")
    try:
        host, port = parse_address(value[len("udp://") :], key)
        group = ipaddress.IPv4Address(host)
    except (ConfigError, ValueError):
        raise ConfigError(key, f"{hint}, got {value!r}") from None
    if not group.is_multicast:
        raise ConfigError(key, f"{host} is not an IPv4 multicast address (224.0.0.0 to 239.255.255.255)")
    if port == 0:
        raise ConfigError(key, "the group needs a real port, not 0")
    return host, port


_DNS_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = rf"(?=.{{1,253}}$){_DNS_LABEL}(?:\.{_DNS_LABEL})*\.?"


def _dns_name(value: Any, key: str) -> tuple[str, int | None]:
    """``"NAME:PORT"`` (NAME's A records at PORT, and its SRV records) or ``"NAME"``
    (SRV records only) -> (name, port or None)."""
    hint = 'expected "NAME:PORT" (or "NAME" for SRV records only), e.g. "meshgate.mesh.svc.cluster.local:61616"'
    text = _string()(value, key)
    name, colon, port = text.rpartition(":") if ":" in text else (text, "", "")
    if colon and not port.isdigit():
        raise ConfigError(key, f"{hint}, got {value!r}")
    if not re.fullmatch(_DNS_NAME, name):
        raise ConfigError(key, f"{name!r} is not a DNS name; {hint}")
    number = int(port) if colon else None
    if number is not None and not 0 < number < 65536:
        raise ConfigError(key, f"the port must be 1 to 65535, got {port}")
    return name.rstrip("."), number


def _servers(value: Any, key: str) -> tuple[tuple[str, int], ...]:
    """An array of "HOST:PORT" DNS servers."""
    if not isinstance(value, list):
        raise ConfigError(key, f'expected an array of "HOST:PORT" strings such as ["10.0.0.2:53"], '
                               f"got {_describe(value)}")
    return tuple(parse_address(item, f"{key}[{i}]") for i, item in enumerate(value))


def _ipv4(value: Any, key: str) -> str:
    try:
        address = ipaddress.IPv4Address(_string()(value, key))
    except ValueError:
        raise ConfigError(key, f"expected an IPv4 address such as 127.0.0.1, got {value!r}") from None
    if address.is_multicast:
        raise ConfigError(key, f"must be the address of a local interface, not a multicast group, got {value!r}")
    return value


_MESH_KINDS = ("/queue/", "/topic/")


def _address_filters(value: Any, key: str) -> tuple[str, ...]:
    """Destination prefixes, each optionally negated with a leading "!"."""
    if not isinstance(value, list):
        raise ConfigError(key, f"expected an array of strings, got {_describe(value)}")
    entries = []
    for i, item in enumerate(value):
        item_key = f"{key}[{i}]"
        prefix = _string()(item, item_key).removeprefix("!")
        if not prefix.startswith(_MESH_KINDS):
            raise ConfigError(
                item_key,
                f'must start with /queue/ or /topic/ (after an optional "!" to exclude), got {item!r}',
            )
        if "*" in prefix or ">" in prefix:
            raise ConfigError(
                item_key,
                f'is a prefix, not a wildcard pattern (write "/queue/orders." for "/queue/orders.>"), got {item!r}',
            )
        entries.append(item)
    return tuple(entries)



@dataclass(frozen=True)
class DiscoveryConfig:
    # Only ever found at [mesh.discovery]; hence the literal keys in errors below.
    group: tuple[str, int] | None = _key(None, _multicast_group)
    interface: str = _key("127.0.0.1", _ipv4)
    broadcast_period_ms: int = _key(2000, _integer(1))
    refresh_timeout_ms: int = _key(10_000, _integer(1))
    dns: tuple[str, int | None] | None = _key(None, _dns_name)
    dns_servers: tuple[tuple[str, int], ...] = _key((), _servers)  # empty: the system's resolver

    def __post_init__(self) -> None:
        if self.group is None and self.dns is None:
            raise ConfigError(
                "mesh.discovery",
                'needs group (multicast, "udp://GROUP:PORT") or dns ("NAME:PORT"), or both',
            )
        if self.group is not None and self.refresh_timeout_ms <= self.broadcast_period_ms:
            raise ConfigError(
                "mesh.discovery.refresh_timeout_ms",
                f"must be greater than mesh.discovery.broadcast_period_ms ({self.broadcast_period_ms}), "
                f"or nodes would be forgotten between two broadcasts; got {self.refresh_timeout_ms}",
            )


@dataclass(frozen=True)
class RedistributionOverride:
    destination: str = _key(parse=_pattern)
    delay_ms: int = _key(parse=_integer(-1))


@dataclass(frozen=True)
class MeshTlsConfig:
    """``[mesh.tls]``: mutual TLS on every mesh link. The listener speaks only TLS and
    every dial does; both sides present ``certificate`` and accept only a certificate
    ``ca_certificate`` signed; a dialler also checks that the peer's certificate names
    the host it dialled (``verify_hostname``)."""

    certificate: str = _key(parse=_path(must_exist=True))
    private_key: str = _key(parse=_path(must_exist=True))
    ca_certificate: str = _key(parse=_path(must_exist=True))
    verify_hostname: bool = _key(True, _boolean)

    def __post_init__(self) -> None:
        check_tls_files(self, "mesh.tls")

    @cached_property
    def material(self) -> TlsMaterial:
        """One material for the node's links and its quorum votes (so a reload reaches both)."""
        from gateway.tls import TlsMaterial

        return TlsMaterial(self.certificate, self.private_key, self.ca_certificate,
                           verify_hostname=self.verify_hostname, ca_name="the mesh CA")


LOAD_BALANCING_MODES = ("OFF", "STRICT", "ON_DEMAND", "OFF_WITH_REDISTRIBUTION")
# The value shown in docs/configuration.md; a node refuses it like an empty password.
EXAMPLE_CLUSTER_PASSWORD = "change-me"


@dataclass(frozen=True)
class MeshConfig:
    bind: tuple[str, int] = _key(("127.0.0.1", 61616), parse_address)
    static: tuple[tuple[str, int], ...] = _key((), _peers)
    discovery: DiscoveryConfig | None = field(default=None, metadata=_parse(_table(DiscoveryConfig)))
    duplex: bool = _key(True, _boolean)
    max_hops: int = _key(1, _integer(1))
    # ActiveMQ's name for max_hops: folded into max_hops, then None.
    network_ttl: int | None = _key(None, _integer(1))
    message_load_balancing: str = _key("ON_DEMAND", _upper_choice(*LOAD_BALANCING_MODES))
    redistribution_delay_ms: int = _key(0, _integer(-1))
    redistribution: tuple[RedistributionOverride, ...] = _key((), _array_of(RedistributionOverride))
    addresses: tuple[str, ...] = _key((), _address_filters)
    allow_direct_connections_only: bool = _key(False, _boolean)
    cluster_user: str = _key("meshgate", _string())
    cluster_password: str = field(default="", repr=False, metadata=_parse(_string(empty=True)))
    insecure_cluster: bool = _key(False, _boolean)
    check_period_ms: int = _key(5000, _integer(1))
    connection_ttl_ms: int = _key(15_000, _integer(1))
    retry_interval_ms: int = _key(500, _integer(1))
    retry_interval_multiplier: float = _key(2.0, _number(1.0))
    max_retry_interval_ms: int = _key(10_000, _integer(1))
    reconnect_attempts: int = _key(-1, _integer(-1))
    in_doubt_timeout_ms: int = _key(30_000, _integer(0))
    scale_down: bool = _key(False, _boolean)
    group_name: str = _key("", _string(*_NODE_NAME, empty=True))
    peer_retention_s: int = _key(7 * 24 * 3600, _integer(0))  # 0: only `meshgate forget` forgets
    # None (no [mesh.tls] table) = plain TCP links.
    tls: MeshTlsConfig | None = field(default=None, metadata=_parse(_table(MeshTlsConfig)))

    def __post_init__(self) -> None:
        if self.network_ttl is not None:
            object.__setattr__(self, "max_hops", self.network_ttl)
            object.__setattr__(self, "network_ttl", None)
        password = self.cluster_password.strip()
        if not self.insecure_cluster and (not password or password.lower() == EXAMPLE_CLUSTER_PASSWORD):
            problem = "is empty" if not password else f"is the documented example {EXAMPLE_CLUSTER_PASSWORD!r}"
            raise ConfigError(
                "mesh.cluster_password",
                f"{problem}, so anyone who can reach the mesh could join it and read every message; "
                "set a long random secret, the same on every node of the mesh, "
                "or set insecure_cluster = true in [mesh] if every host that can reach mesh.bind is trusted",
            )
        if self.connection_ttl_ms <= self.check_period_ms:
            raise ConfigError(
                "mesh.connection_ttl_ms",
                f"must be greater than mesh.check_period_ms ({self.check_period_ms}), "
                f"or healthy links would be dropped; got {self.connection_ttl_ms}",
            )
        if self.max_retry_interval_ms < self.retry_interval_ms:
            raise ConfigError(
                "mesh.max_retry_interval_ms",
                f"must be >= mesh.retry_interval_ms ({self.retry_interval_ms}), got {self.max_retry_interval_ms}",
            )

    @cached_property
    def _address_prefixes(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        includes = tuple(a for a in self.addresses if not a.startswith("!"))
        excludes = tuple(a[1:] for a in self.addresses if a.startswith("!"))
        return includes, excludes

    @cached_property
    def _redistribution_rules(self) -> tuple[tuple[Callable[[str], bool], int], ...]:
        return tuple((destination_matcher(o.destination), o.delay_ms) for o in self.redistribution)

    def carries(self, destination: str) -> bool:
        """Whether the mesh forwards ``destination`` (a full STOMP destination).

        No ``addresses`` = everything; otherwise the destination must start with an
        included prefix (when there are any) and with no "!"-excluded one.
        """
        includes, excludes = self._address_prefixes
        if includes and not destination.startswith(includes):
            return False
        return not destination.startswith(excludes) if excludes else True

    def redistribution_delay_for(self, destination: str) -> int:
        """The first matching ``[[mesh.redistribution]]`` delay, else ``redistribution_delay_ms``."""
        for matches, delay_ms in self._redistribution_rules:
            if matches(destination):
                return delay_ms
        return self.redistribution_delay_ms


