"""The node's TOML configuration, with dotted-key overrides from the command line.

The schema is the dataclasses below: each field carries its type, its default and
the parser that validates it (``_key(default, parser)``), so adding a key is one
line.  Every error names the full dotted key, e.g.
``stomp.max_frame_size: must be a positive size, got -5``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from types import MappingProxyType
from typing import Any

from gateway.auth import destination_matcher, is_password_hash, validate_destination_pattern

__all__ = [
    "AuthorizationEntry",
    "BrokerConfig",
    "ConfigError",
    "DiscoveryConfig",
    "MeshConfig",
    "NodeConfig",
    "RedistributionOverride",
    "SecurityConfig",
    "StompConfig",
    "StoreConfig",
    "TlsConfig",
    "UserConfig",
    "load_config",
    "parse_address",
    "parse_override",
    "parse_size",
]

MiB = 1024**2

Parser = Callable[[Any, str], Any]


class ConfigError(Exception):
    """``str()`` is ``"<dotted key or file>: <problem>"``, ready to print."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def _key(
    default: Any = dataclasses.MISSING,
    parse: Parser | None = None,
    *,
    factory: Any = dataclasses.MISSING,
) -> Any:
    """A schema entry: dataclass field whose metadata holds the parser."""
    return field(default=default, default_factory=factory, metadata=_parse(parse))


def _parse(parser: Parser) -> dict[str, Parser]:
    """Metadata for a plain ``field()``, used where a default must come from a factory."""
    return {"parse": parser}


def _describe(value: object) -> str:
    kind = {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "string",
        list: "array",
        dict: "table",
    }
    return f"{kind.get(type(value), type(value).__name__)} {value!r}"


def _join(prefix: str, name: str) -> str:
    # Quote like TOML so that a user called "a.b" gets an unambiguous path.
    part = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)
    return f"{prefix}.{part}" if prefix else part


# --- value parsers (value, dotted key) -> parsed value ---------------------


def parse_size(value: int | str, key: str) -> int:
    """Bytes from an int or a string like "64MiB", "10 MB" (KB/MB/GB are 1000-based)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(
            key,
            f'expected a size (bytes, or a string such as "64MiB"), got {_describe(value)}',
        )
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?\s*", value, re.IGNORECASE)
        if match is None:
            raise ConfigError(
                key,
                f'expected a size such as "64MiB", "10 MB" or "512KiB", got {value!r}',
            )
        unit = (match.group(2) or "b").lower()
        power = "bkmgt".index(unit[0])
        multiplier = (1024 if "i" in unit else 1000) ** power
        number = int(Decimal(match.group(1)) * multiplier)
    else:
        number = value
    if number <= 0:
        raise ConfigError(key, f"must be a positive size, got {value!r}")
    return number


def parse_address(value: str, key: str) -> tuple[str, int]:
    """``"HOST:PORT"`` or ``"[IPv6]:PORT"`` -> (host, port); port 0 picks a free port."""
    if not isinstance(value, str):
        raise ConfigError(key, f'expected "HOST:PORT", got {_describe(value)}')
    match = re.fullmatch(r"(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]\s]+)):(?P<port>\d{1,10})", value)
    if match is None:
        if value.count(":") > 1 and not value.startswith("["):
            raise ConfigError(
                key,
                f"IPv6 addresses must be in brackets, e.g. [::1]:61613, got {value!r}",
            )
        raise ConfigError(
            key,
            f'expected "HOST:PORT" (use 0.0.0.0 or [::] for all interfaces), got {value!r}',
        )
    host = match.group("v6") or match.group("host")
    if match.group("v6"):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(key, f"{host!r} is not an IPv6 address") from None
    port = int(match.group("port"))
    if port > 65535:
        raise ConfigError(key, f"port must be between 0 and 65535, got {port}")
    return host, port


def _integer(minimum: int) -> Parser:
    def parse(value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {_describe(value)}")
        if value < minimum:
            raise ConfigError(key, f"must be >= {minimum}, got {value}")
        return value

    return parse


def _number(minimum: float) -> Parser:
    def parse(value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {_describe(value)}")
        if not value >= minimum:  # also catches nan
            raise ConfigError(key, f"must be >= {minimum}, got {value}")
        return float(value)

    return parse


def _boolean(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, f"expected true or false, got {_describe(value)}")
    return value


def _string(pattern: str | None = None, hint: str = "", empty: bool = False) -> Parser:
    def parse(value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {_describe(value)}")
        if not value and not empty:
            raise ConfigError(key, "must not be empty")
        if value and pattern is not None and not re.fullmatch(pattern, value):
            raise ConfigError(key, f"{hint}, got {value!r}")
        return value

    return parse


def _choice(*options: str) -> Parser:
    def parse(value: Any, key: str) -> str:
        if value not in options:
            raise ConfigError(key, f"must be one of {', '.join(map(repr, options))}, got {value!r}")
        return value

    return parse


def _path(must_exist: bool) -> Parser:
    def parse(value: Any, key: str) -> str:
        path = os.path.expanduser(_string()(value, key))
        if must_exist and not os.path.isfile(path):
            raise ConfigError(key, f"file {path!r} does not exist")
        return path

    return parse


def _names(value: Any, key: str) -> frozenset[str]:
    if not isinstance(value, list):
        raise ConfigError(key, f"expected an array of strings, got {_describe(value)}")
    return frozenset(_string()(item, f"{key}[{i}]") for i, item in enumerate(value))


def _password(value: Any, key: str) -> str:
    if not is_password_hash(value):
        raise ConfigError(key, "not a password hash; run `meshgate passwd` and paste its output here")
    return value


def _pattern(value: Any, key: str) -> str:
    try:
        validate_destination_pattern(_string()(value, key))
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None
    return value


def _upper_choice(*options: str) -> Parser:
    """Like ``_choice`` but case-insensitive; the value is stored in upper case."""

    def parse(value: Any, key: str) -> str:
        if not isinstance(value, str) or value.upper() not in options:
            raise ConfigError(
                key,
                f"must be one of {', '.join(options)} (any case), got {value!r}",
            )
        return value.upper()

    return parse


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


def _with_aliases(parser: Parser, aliases: Mapping[str, str]) -> Parser:
    """Wrap a table parser so that an alias and its key cannot both be given."""

    def parse(raw: Any, prefix: str) -> Any:
        if isinstance(raw, dict):
            for alias, name in aliases.items():
                if alias in raw and name in raw:
                    raise ConfigError(
                        _join(prefix, alias),
                        f"is another name for {_join(prefix, name)}; "
                        f"give only one of {_join(prefix, name)} and {_join(prefix, alias)}",
                    )
        return parser(raw, prefix)

    return parse


def _table(cls: type) -> Parser:
    """Build the dataclass ``cls`` from a TOML table, rejecting unknown keys."""

    def parse(raw: Any, prefix: str) -> Any:
        if not isinstance(raw, dict):
            raise ConfigError(prefix, f"expected a table, got {_describe(raw)}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for name, value in raw.items():
            if name not in fields:
                raise ConfigError(
                    _join(prefix, name),
                    f"unknown key (known keys: {', '.join(fields)})",
                )
            values[name] = fields[name].metadata["parse"](value, _join(prefix, name))
        for name, f in fields.items():
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required and name not in values:
                raise ConfigError(_join(prefix, name), "required key is missing")
        return cls(**values)

    return parse


def _table_of(cls: type) -> Parser:
    def parse(raw: Any, prefix: str) -> Mapping[str, Any]:
        if not isinstance(raw, dict):
            raise ConfigError(prefix, f"expected a table, got {_describe(raw)}")
        return MappingProxyType({name: _table(cls)(value, _join(prefix, name)) for name, value in raw.items()})

    return parse


def _array_of(cls: type) -> Parser:
    def parse(raw: Any, prefix: str) -> tuple[Any, ...]:
        if not isinstance(raw, list):
            raise ConfigError(
                prefix,
                f"expected an array of tables ([[{prefix}]]), got {_describe(raw)}",
            )
        return tuple(_table(cls)(item, f"{prefix}[{i}]") for i, item in enumerate(raw))

    return parse


# --- the schema ------------------------------------------------------------

_QUEUE_NAME = (
    r"[^/*>\s][^*>\s]*",
    "must be a queue name without /queue/ prefix or wildcards",
)
_NODE_NAME = (r"[A-Za-z0-9][A-Za-z0-9._-]*", "use letters, digits, '.', '_' and '-'")


@dataclass(frozen=True)
class TlsConfig:
    bind: tuple[str, int] = _key(parse=parse_address)
    certificate: str = _key(parse=_path(must_exist=True))
    private_key: str = _key(parse=_path(must_exist=True))
    # When set, clients must present a certificate signed by this CA.
    ca_certificate: str | None = _key(None, _path(must_exist=True))


@dataclass(frozen=True)
class StompConfig:
    bind: tuple[str, int] = _key(("127.0.0.1", 61613), parse_address)
    max_frame_size: int = _key(10 * MiB, parse_size)
    max_headers: int = _key(1000, _integer(1))
    max_header_length: int = _key(10240, parse_size)
    heartbeat_send_ms: int = _key(10_000, _integer(0))
    heartbeat_receive_ms: int = _key(10_000, _integer(0))
    heartbeat_grace: float = _key(1.5, _number(1.0))
    max_connections: int = _key(100_000, _integer(1))
    tls: TlsConfig | None = field(default=None, metadata=_parse(_table(TlsConfig)))

    def __post_init__(self) -> None:
        if self.tls is not None and self.tls.bind == self.bind and self.bind[1] != 0:
            raise ConfigError(
                "stomp.tls.bind",
                f"same address as stomp.bind ({self.bind[0]}:{self.bind[1]})",
            )


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


@dataclass(frozen=True)
class DiscoveryConfig:
    # Only ever found at [mesh.discovery]; hence the literal keys in errors below.
    group: tuple[str, int] = _key(parse=_multicast_group)
    interface: str = _key("127.0.0.1", _ipv4)
    broadcast_period_ms: int = _key(2000, _integer(1))
    refresh_timeout_ms: int = _key(10_000, _integer(1))

    def __post_init__(self) -> None:
        if self.refresh_timeout_ms <= self.broadcast_period_ms:
            raise ConfigError(
                "mesh.discovery.refresh_timeout_ms",
                f"must be greater than mesh.discovery.broadcast_period_ms ({self.broadcast_period_ms}), "
                f"or nodes would be forgotten between two broadcasts; got {self.refresh_timeout_ms}",
            )


@dataclass(frozen=True)
class RedistributionOverride:
    destination: str = _key(parse=_pattern)
    delay_ms: int = _key(parse=_integer(-1))


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
    broker: BrokerConfig = field(default_factory=BrokerConfig, metadata=_parse(_table(BrokerConfig)))
    store: StoreConfig = field(default_factory=StoreConfig, metadata=_parse(_table(StoreConfig)))
    security: SecurityConfig = field(default_factory=SecurityConfig, metadata=_parse(_table(SecurityConfig)))
    # None (no [mesh] table) = a standalone node.
    mesh: MeshConfig | None = field(
        default=None,
        metadata=_parse(_with_aliases(_table(MeshConfig), {"network_ttl": "max_hops"})),
    )

    def __post_init__(self) -> None:
        if not self.data_dir:
            object.__setattr__(self, "data_dir", f"./data/{self.name}")
        if self.mesh is not None:
            clients = [("stomp.bind", self.stomp.bind)]
            if self.stomp.tls is not None:
                clients.append(("stomp.tls.bind", self.stomp.tls.bind))
            for key, address in clients:
                if _same_listener(self.mesh.bind, address):
                    raise ConfigError(
                        "mesh.bind",
                        f"same port as {key} ({address[0]}:{address[1]}); the mesh needs its own listener",
                    )

    @property
    def anonymous(self) -> bool:
        return not self.security.users


# --- loading ---------------------------------------------------------------


def _read(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(os.fspath(path), f"cannot read configuration file: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:  # its message ends "(at line N, column M)"
        raise ConfigError(os.fspath(path), f"invalid TOML: {exc}") from None


def _apply(raw: dict[str, Any], overrides: Mapping[str, object]) -> None:
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        if not all(parts):
            raise ConfigError(dotted, "malformed key")
        table = raw
        for depth, part in enumerate(parts[:-1]):
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise ConfigError(
                    ".".join(parts[: depth + 1]),
                    "is not a table, cannot set a key inside it",
                )
        table[parts[-1]] = value


def parse_override(text: str) -> tuple[str, object]:
    """``"stomp.max_connections=500"`` -> ("stomp.max_connections", 500), for ``--set``.

    The value is read as a TOML value when it is one (500, true, ["a"], "quoted"),
    otherwise kept as a bare string (127.0.0.1:0, 64MiB).
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(text, "expected KEY=VALUE")
    try:
        document = tomllib.loads(f"v = {value.strip()}")
    except tomllib.TOMLDecodeError:
        return key.strip(), value.strip()
    return key.strip(), document["v"] if set(document) == {"v"} else value.strip()


def load_config(path: str | os.PathLike[str] | None, overrides: Mapping[str, object] | None = None) -> NodeConfig:
    """Read ``path`` (None = all defaults), apply dotted ``overrides``, validate everything.

    Relative paths (data_dir, certificates) are relative to the working directory.
    """
    raw = {} if path is None else _read(path)
    _apply(raw, overrides or {})
    return _table(NodeConfig)(raw, "")
