"""The config tests' helpers: a node.toml in tmp_path, loaded or refused."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from meshgate.config import ConfigError, NodeConfig, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, text: str, overrides: dict[str, object] | None = None) -> NodeConfig:
    return load_config(write(tmp_path, text), overrides or None)


def refusal(tmp_path: Path, text: str, overrides: dict[str, object] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), overrides)
    return info.value


def error(tmp_path: Path, text: str, overrides: dict[str, object] | None = None) -> str:
    return str(refusal(tmp_path, text, overrides))


def stomp_tls(directory: Path, bind: str, certificate: str, private_key: str, ca_certificate: str | None = None) -> str:
    """A [stomp.tls] table naming files in ``directory``."""
    lines = ["[stomp.tls]", f'bind = "{bind}"', f'certificate = "{directory / certificate}"',
             f'private_key = "{directory / private_key}"']
    if ca_certificate is not None:
        lines.append(f'ca_certificate = "{directory / ca_certificate}"')
    return "\n".join(lines) + "\n"
