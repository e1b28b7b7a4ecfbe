"""Checks at load for the PEM files of a ``tls`` table (``[stomp.tls]``, ``[amqp.tls]``,
``[mesh.tls]``, ``[ha.tls]``): a node does not start on a file it could not use."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from meshgate.config.schema import ConfigError

if TYPE_CHECKING:
    from gateway.tls import TlsMaterial


def _pem(path: str, key: str, marker: str) -> None:
    """A clear error at load time (naming the key) for a file that is not the PEM it should be."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as problem:
        raise ConfigError(key, f"cannot read {path!r}: {problem}") from None
    if f"-----BEGIN {marker}" not in text and not (marker == "PRIVATE KEY" and "PRIVATE KEY-----" in text):
        raise ConfigError(key, f"{path!r} holds no PEM {marker.lower()}")


class _TlsFiles(Protocol):
    @property
    def certificate(self) -> str: ...

    @property
    def private_key(self) -> str: ...

    @property
    def ca_certificate(self) -> str | None: ...

    @property
    def material(self) -> TlsMaterial: ...


def check_tls_files(tls: _TlsFiles, table: str) -> None:
    """At load, so that the node does not start on them: each file is the PEM it should
    be, and the key matches the certificate (ConfigError naming the key and the file)."""
    from gateway.tls import TlsError

    _pem(tls.certificate, f"{table}.certificate", "CERTIFICATE")
    _pem(tls.private_key, f"{table}.private_key", "PRIVATE KEY")
    if tls.ca_certificate is not None:
        _pem(tls.ca_certificate, f"{table}.ca_certificate", "CERTIFICATE")
    try:
        tls.material  # noqa: B018 -- made once here: a key that does not match fails at load
    except TlsError as problem:
        raise ConfigError(f"{table}.{problem.key}", str(problem)) from None
