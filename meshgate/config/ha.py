"""The ``[ha]`` table: high availability on a shared store or by replication (docs/ha.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from meshgate.config.schema import (
    ConfigError,
    _boolean,
    _choice,
    _integer,
    _key,
    _parse,
    _path,
    _string,
    _table,
    parse_address,
)
from meshgate.config.tls_files import check_tls_files

if TYPE_CHECKING:
    from gateway.tls import TlsMaterial

HA_MODES = ("none", "shared-store", "replicated")
HA_ROLES = ("primary", "backup")


def _optional_address(value: object, key: str) -> tuple[str, int] | None:
    if value == "":
        return None
    return parse_address(value, key)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ReplicationTlsConfig:
    """``[ha.tls]``: TLS on the replication link, both ways. The listener is
    ``ha.replication_bind``; each member presents ``certificate`` (as the listener and
    when it dials) and accepts only a peer whose certificate ``ca_certificate`` signed
    (the dialling side also checks the certificate names the host of ``ha.peer``)."""

    certificate: str = _key(parse=_path(must_exist=True))
    private_key: str = _key(parse=_path(must_exist=True))
    ca_certificate: str = _key(parse=_path(must_exist=True))

    def __post_init__(self) -> None:
        check_tls_files(self, "ha.tls")

    @cached_property
    def material(self) -> TlsMaterial:
        """One material for the listener and every dial (so a reload reaches both)."""
        from gateway.tls import TlsMaterial

        return TlsMaterial(self.certificate, self.private_key, self.ca_certificate, ca_name="the replication CA")


@dataclass(frozen=True)
class HaConfig:
    # none: a second process on a held data dir refuses to start.
    # shared-store: it waits as the standby and takes over when the lock is released.
    # replicated: a primary/backup pair, each with its own data dir; the backup keeps a copy of the journal.
    mode: str = _key("none", _choice(*HA_MODES))
    poll_interval_ms: int = _key(100, _integer(10))  # how often a standby tries the lock
    lease_interval_ms: int = _key(1000, _integer(100))  # lease renewal and epoch check by the holder
    # -- replicated -------------------------------------------------------------------------
    role: str = _key("primary", _choice(*HA_ROLES))  # the role this process starts in
    # The replication listener this process opens while it serves (the backup dials it).
    replication_bind: tuple[str, int] | None = _key(None, _optional_address)
    # The other member's replication listener: dialled while this process is the backup.
    peer: tuple[str, int] | None = _key(None, _optional_address)
    sync: bool = _key(True, _boolean)  # receipts wait for the backup's copy too
    # A witness (``meshgate witness``) that the pair asks before a takeover; "" = none.
    witness: tuple[str, int] | None = _key(None, _optional_address)
    # Authenticates the replication link and the witness (HMAC); "" = mesh.cluster_password.
    password: str = _key("", _string(empty=True))
    heartbeat_ms: int = _key(250, _integer(10))  # primary -> backup and -> witness
    takeover_after_ms: int = _key(1500, _integer(50))  # silence of the primary before a takeover is considered
    force_takeover: bool = _key(False, _boolean)  # take over even while behind (messages may be lost)
    # None (no [ha.tls] table) = a plain TCP replication link.
    tls: ReplicationTlsConfig | None = field(default=None, metadata=_parse(_table(ReplicationTlsConfig)))

    def __post_init__(self) -> None:
        if self.lease_interval_ms > 60_000:
            raise ConfigError("ha.lease_interval_ms",
                              f"must be at most 60000, or a replaced node would serve on for minutes; "
                              f"got {self.lease_interval_ms}")
        if self.tls is not None and self.mode != "replicated":
            raise ConfigError("ha.tls", 'only with mode = "replicated" (it secures the replication link)')
        if self.mode == "replicated":
            if self.replication_bind is None:
                raise ConfigError("ha.replication_bind", 'needed with mode = "replicated" (HOST:PORT this process '
                                                         "listens on for its backup while it serves)")
            if self.peer is None:
                raise ConfigError("ha.peer", 'needed with mode = "replicated" (HOST:PORT of the other member\'s '
                                             "replication listener)")

    @property
    def shared_store(self) -> bool:
        return self.mode == "shared-store"

    @property
    def replicated(self) -> bool:
        return self.mode == "replicated"
