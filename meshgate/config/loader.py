"""Reading a node's TOML file and ``--set KEY=VALUE`` overrides into a validated ``NodeConfig``."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Any

from meshgate.config.node import NodeConfig
from meshgate.config.schema import ConfigError, _table


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

