"""The node's own tables (listeners, broker, store, security) and the whole
``NodeConfig``."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING

from meshgate.config.doctor import DoctorConfig
from meshgate.config.ha import HaConfig
from meshgate.config.journeys import JourneysConfig
from meshgate.config.mesh import MeshConfig
from meshgate.config.metrics import MetricsConfig
from meshgate.config.permissions import check_principals
from meshgate.config.schema import (
    _NODE_NAME,
    _QUEUE_NAME,
    ConfigError,
    MiB,
    _array_of,
    _choice,
    _integer,
    _key,
    _names,
    _number,
    _parse,
    _password,
    _path,
    _pattern,
    _string,
    _table,
    _table_of,
    _with_aliases,
    parse_address,
    parse_size,
)
from meshgate.config.tls_files import check_tls_files
from meshgate.config.vhosts import VhostsConfig

if TYPE_CHECKING:
    from gateway.tls import TlsMaterial


@dataclass(frozen=True)
class TlsConfig:
    """A client-facing TLS listener: ``[stomp.tls]``, ``[stomp.websocket.tls]``, ``[amqp.tls]``."""

    bind: tuple[str, int] = _key(parse=parse_address)
    certificate: str = _key(parse=_path(must_exist=True))
    private_key: str = _key(parse=_path(must_exist=True))
    # When set, clients must present a certificate signed by this CA.
    ca_certificate: str | None = _key(None, _path(must_exist=True))

    @cached_property
    def material(self) -> TlsMaterial:
        """The listener's certificate, as last (re)loaded: asked for every new connection."""
        from gateway.tls import TlsMaterial

        return TlsMaterial(self.certificate, self.private_key, self.ca_certificate, ca_name="the client CA")


def _origins(value, key: str) -> tuple[str, ...]:
    """``["*"]`` or web origins such as ``"https://app.example.com"``."""
    if not isinstance(value, list):
        raise ConfigError(key, f'expected an array of origins such as ["https://app.example.com"] or ["*"], '
                               f"got {value!r}")
    origins = []
    for i, item in enumerate(value):
        origin = _string()(item, f"{key}[{i}]")
        if origin != "*" and (not origin.startswith(("http://", "https://")) or origin.rstrip("/").count("/") > 2):
            raise ConfigError(f"{key}[{i}]", f'an origin is "scheme://host[:port]" (no path) or "*", got {origin!r}')
        origins.append(origin.rstrip("/"))
    return tuple(origins)


@dataclass(frozen=True)
class WebSocketConfig:
    bind: tuple[str, int] = _key(parse=parse_address)
    allowed_origins: tuple[str, ...] = _key(("*",), _origins)
    tls: TlsConfig | None = field(default=None, metadata=_parse(_table(TlsConfig)))


@dataclass(frozen=True)
class StompConfig:
    bind: tuple[str, int] = _key(("127.0.0.1", 61613), parse_address)
    max_frame_size: int = _key(100 * MiB, parse_size)  # ActiveMQ's maxFrameSize
    max_headers: int = _key(1000, _integer(1))
    max_header_length: int = _key(10240, parse_size)
    heartbeat_send_ms: int = _key(10_000, _integer(0))
    heartbeat_receive_ms: int = _key(10_000, _integer(0))
    heartbeat_grace: float = _key(1.5, _number(1.0))
    max_connections: int = _key(100_000, _integer(1))
    tls: TlsConfig | None = field(default=None, metadata=_parse(_table(TlsConfig)))
    websocket: WebSocketConfig | None = field(default=None, metadata=_parse(_table(WebSocketConfig)))

    def __post_init__(self) -> None:
        binds = self.binds()
        for index, (key, bind) in enumerate(binds):
            for other, taken in binds[:index]:
                if bind == taken and bind[1] != 0:
                    raise ConfigError(key, f"same address as {other} ({bind[0]}:{bind[1]})")

    def binds(self) -> list[tuple[str, tuple[str, int]]]:
        """(key, address) of every client listener configured."""
        found = [("stomp.bind", self.bind)]
        if self.tls is not None:
            found.append(("stomp.tls.bind", self.tls.bind))
        if self.websocket is not None:
            found.append(("stomp.websocket.bind", self.websocket.bind))
            if self.websocket.tls is not None:
                found.append(("stomp.websocket.tls.bind", self.websocket.tls.bind))
        return found


@dataclass(frozen=True)
class AmqpConfig:
    bind: tuple[str, int] = _key(("127.0.0.1", 5672), parse_address)
    frame_max: int = _key(131072, _integer(4096))
    channel_max: int = _key(2047, _integer(1))
    heartbeat_s: int = _key(60, _integer(0))  # offered; a client may ask for less, or none
    max_message_size: int = _key(100 * MiB, parse_size)
    max_connections: int = _key(100_000, _integer(1))
    tls: TlsConfig | None = field(default=None, metadata=_parse(_table(TlsConfig)))


@dataclass(frozen=True)
class BrokerConfig:
    memory_limit: int = _key(256 * MiB, parse_size)
    default_prefetch: int = _key(1000, _integer(1))
    max_delivery_attempts: int = _key(10, _integer(1))
    dead_letter_queue: str = _key("DLQ", _string(*_QUEUE_NAME))
    # "" drops expired messages instead of moving them.
    expiry_queue: str = _key("", _string(*_QUEUE_NAME, empty=True))


@dataclass(frozen=True)
class StoreConfig:
    sync: str = _key("always", _choice("always", "never"))
    journal_file_size: int = _key(32 * MiB, parse_size)
    max_sync_delay_ms: int = _key(0, _integer(0))
    limit: int | None = _key(None, parse_size)  # journal bytes past which persistent producers wait
    max_disk_usage: int = _key(90, _integer(1))  # percent of the filesystem, likewise
    fail_after_ms: int = _key(0, _integer(0))  # a producer waiting this long gets an ERROR; 0: it waits

    def __post_init__(self) -> None:
        if self.max_disk_usage > 100:
            raise ConfigError("store.max_disk_usage", f"a percentage from 1 to 100, got {self.max_disk_usage}")


@dataclass(frozen=True)
class HttpConfig:
    """The node's own HTTP endpoint: /healthz, /readyz and /metrics (deploy/README.md)."""

    bind: tuple[str, int] = _key(("127.0.0.1", 15692), parse_address)


@dataclass(frozen=True)
class UserConfig:
    # repr=False keeps hashes out of logs that print the configuration.
    password: str = field(repr=False, metadata=_parse(_password))
    groups: frozenset[str] = _key(frozenset(), _names)


@dataclass(frozen=True)
class AuthorizationEntry:
    destination: str = _key(parse=_pattern)
    read: frozenset[str] = _key(frozenset(), _names)
    write: frozenset[str] = _key(frozenset(), _names)
    admin: frozenset[str] = _key(frozenset(), _names)


@dataclass(frozen=True)
class SecurityConfig:
    users: Mapping[str, UserConfig] = _key(parse=_table_of(UserConfig), factory=lambda: MappingProxyType({}))
    authorization: tuple[AuthorizationEntry, ...] = _key((), _array_of(AuthorizationEntry))

    def __post_init__(self) -> None:
        # Without users everybody is the same anonymous principal, so entries could
        # only allow everything or nothing: almost certainly a forgotten [security.users].
        if self.authorization and not self.users:
            raise ConfigError(
                "security.authorization",
                "needs users: add [security.users.<name>] tables",
            )



_ALL_INTERFACES = ("0.0.0.0", "::", "")


def _same_listener(a: tuple[str, int], b: tuple[str, int]) -> bool:
    """Whether two listeners would fight over one port (0 = any free port, never a clash)."""
    if a[1] != b[1] or a[1] == 0:
        return False
    return a[0] == b[0] or a[0] in _ALL_INTERFACES or b[0] in _ALL_INTERFACES


@dataclass(frozen=True)
class NodeConfig:
    name: str = _key(parse=_string(*_NODE_NAME), factory=socket.gethostname)
    data_dir: str = _key("", _path(must_exist=False))  # "" = ./data/<name>
    stomp: StompConfig = field(default_factory=StompConfig, metadata=_parse(_table(StompConfig)))
    # None (no [amqp] table) = no AMQP listener.
    amqp: AmqpConfig | None = field(default=None, metadata=_parse(_table(AmqpConfig)))
    broker: BrokerConfig = field(default_factory=BrokerConfig, metadata=_parse(_table(BrokerConfig)))
    store: StoreConfig = field(default_factory=StoreConfig, metadata=_parse(_table(StoreConfig)))
    security: SecurityConfig = field(default_factory=SecurityConfig, metadata=_parse(_table(SecurityConfig)))
    # None (no [mesh] table) = a standalone node.
    mesh: MeshConfig | None = field(
        default=None,
        metadata=_parse(_with_aliases(_table(MeshConfig), {"network_ttl": "max_hops"})),
    )
    metrics: MetricsConfig = field(default_factory=MetricsConfig, metadata=_parse(_table(MetricsConfig)))
    journeys: JourneysConfig = field(default_factory=JourneysConfig, metadata=_parse(_table(JourneysConfig)))
    doctor: DoctorConfig = field(default_factory=DoctorConfig, metadata=_parse(_table(DoctorConfig)))
    ha: HaConfig = field(default_factory=HaConfig, metadata=_parse(_table(HaConfig)))
    vhosts: VhostsConfig = field(default_factory=VhostsConfig, metadata=_parse(_table(VhostsConfig)))
    # None (no [http] table) = no health and metrics endpoint.
    http: HttpConfig | None = field(default=None, metadata=_parse(_table(HttpConfig)))

    def __post_init__(self) -> None:
        if not self.data_dir:
            object.__setattr__(self, "data_dir", f"./data/{self.name}")
        listeners = self.client_binds()
        for index, (key, address) in enumerate(listeners):
            for other, taken in listeners[:index]:
                if _same_listener(address, taken):
                    raise ConfigError(key, f"same port as {other} ({taken[0]}:{taken[1]})")
        if self.mesh is not None:
            for key, address in listeners:
                if _same_listener(self.mesh.bind, address):
                    raise ConfigError(
                        "mesh.bind",
                        f"same port as {key} ({address[0]}:{address[1]}); the mesh needs its own listener",
                    )
        for key, tls in self.client_tls():  # last: a clash of listeners is the clearer message
            check_tls_files(tls, key)
        if self.ha.replicated and not self.replication_password:
            raise ConfigError("ha.password", 'needed with mode = "replicated" (or a [mesh] cluster_password): it '
                                             "authenticates the replication link and the witness")
        check_principals(self.vhosts.permissions, self.security.users, "vhosts.permissions")

    @property
    def replication_password(self) -> str:
        """What authenticates the replication link and the witness: ha.password, else the mesh's."""
        if self.ha.password:
            return self.ha.password
        return self.mesh.cluster_password if self.mesh is not None else ""

    def client_binds(self) -> list[tuple[str, tuple[str, int]]]:
        """(key, address) of every client listener configured, STOMP's and AMQP's."""
        found = self.stomp.binds()
        if self.amqp is not None:
            found.append(("amqp.bind", self.amqp.bind))
            if self.amqp.tls is not None:
                found.append(("amqp.tls.bind", self.amqp.tls.bind))
        if self.http is not None:
            found.append(("http.bind", self.http.bind))
        return found

    def client_tls(self) -> list[tuple[str, TlsConfig]]:
        """(table, config) of every client-facing TLS listener configured."""
        stomp, amqp = self.stomp, self.amqp
        websocket = stomp.websocket.tls if stomp.websocket is not None else None
        found = [("stomp.tls", stomp.tls), ("stomp.websocket.tls", websocket),
                 ("amqp.tls", amqp.tls if amqp is not None else None)]
        return [(key, tls) for key, tls in found if tls is not None]

    @property
    def anonymous(self) -> bool:
        return not self.security.users


