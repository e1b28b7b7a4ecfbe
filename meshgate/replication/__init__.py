"""Replicated primary/backup pairs (``[ha] mode = "replicated"``, docs/ha.md).

The primary streams its journal's own bytes to the backup over an authenticated
TCP link: each flushed write (segment, offset, bytes), new and deleted segments,
catalog saves. The backup writes the same files into its own data dir,
``fdatasync``s them and acknowledges the highest position it made durable; with
``ha.sync`` the primary's receipts wait for that acknowledgement
(:class:`gateway.store.replicated.ReplicatedJournalStore`).

A backup that connects first copies the primary's current files (segments,
catalog, node.json, epoch), then follows the stream; until it has acknowledged the
copy it is *catching up* and receipts do not wait for it.

The backup takes over when the primary is gone (the link lost, or silent for
``ha.takeover_after_ms``) and the witness agrees (it has not heard the primary for
that long either); the witness records the new epoch, so the old primary, should
it still run, learns it was replaced. Without a witness, a strict majority of the
node's ``[mesh] static`` peers must agree (``quorum``, :mod:`mesh.quorum`): each
records the new epoch on a yes and refuses the old primary's links from then on.

Wire format: frames of ``<u32 payload length><u8 kind>payload``; control payloads
are JSON, data payloads are packed binary (``codec``, no Twisted there). The
serving member's side is ``primary``, the backup's ``backup``.
"""

from __future__ import annotations

from meshgate.replication.backup import (
    ReplicaFiles,
    ReplicaFollower,
    _FollowerFactory,
    _FollowerProtocol,
)
from meshgate.replication.codec import (
    _FILE,
    _HEAD,
    _U32,
    _U64,
    _WRITE,
    ACK,
    AUTH,
    BEGIN,
    CATALOG,
    CHALLENGE,
    COPY_CHUNK,
    DELETE,
    END,
    FILE,
    INCOMPLETE,
    KIND_NAMES,
    MAX_FRAME,
    PING,
    PONG,
    REFUSE,
    SEGMENT,
    SNAPSHOT_FILES,
    TAKEN,
    TAKEOVER,
    WELCOME,
    WRITE,
    HandoverRefused,
    Parser,
    ReplicationError,
    _check_name,
    _json,
    decode_file,
    decode_position,
    decode_write,
    encode,
    encode_file,
    encode_json,
    encode_position,
    encode_write,
    proof,
)
from meshgate.replication.primary import (
    ReplicationSource,
    _Copy,
    _SourceFactory,
    _SourceProtocol,
)
from meshgate.replication.probe import _ProbeFactory, primary_active_at

__all__ = [
    "ACK",
    "AUTH",
    "BEGIN",
    "CATALOG",
    "CHALLENGE",
    "COPY_CHUNK",
    "DELETE",
    "END",
    "FILE",
    "HandoverRefused",
    "INCOMPLETE",
    "KIND_NAMES",
    "MAX_FRAME",
    "PING",
    "PONG",
    "Parser",
    "REFUSE",
    "ReplicaFiles",
    "ReplicaFollower",
    "ReplicationError",
    "ReplicationSource",
    "SEGMENT",
    "SNAPSHOT_FILES",
    "TAKEN",
    "TAKEOVER",
    "WELCOME",
    "WRITE",
    "_Copy",
    "_FILE",
    "_FollowerFactory",
    "_FollowerProtocol",
    "_HEAD",
    "_ProbeFactory",
    "_SourceFactory",
    "_SourceProtocol",
    "_U32",
    "_U64",
    "_WRITE",
    "_check_name",
    "_json",
    "decode_file",
    "decode_position",
    "decode_write",
    "encode",
    "encode_file",
    "encode_json",
    "encode_position",
    "encode_write",
    "primary_active_at",
    "proof",
]
