"""The configuration schema framework: each dataclass field carries its default
and the parser that validates it (``_key(default, parser)``), so adding a key is one
line. Every error names the full dotted key, e.g.
``stomp.max_frame_size: must be a positive size, got -5``. The tables themselves
live beside this module, one module per part of the node."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import field
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from gateway.auth import is_password_hash, validate_destination_pattern

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

