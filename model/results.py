"""What management actions answer (docs/management.md): a page of browsed messages, what
an action did on one node, a vhost's row, a permission's row, a TLS reload's outcome.
model.requests maps each action to its result type (RESULT_TYPES)."""

from __future__ import annotations

from typing import Literal

import msgspec


class BrowsedMessage(msgspec.Struct, kw_only=True):
    id: str
    destination: str
    headers: dict[str, str]
    size: int  # body bytes
    body: str  # the first ``preview`` bytes, as text (invalid UTF-8 replaced)
    truncated: bool
    persistent: bool
    priority: int
    redelivered: bool
    age_ms: int | None = None


class BrowsePage(msgspec.Struct, kw_only=True):
    node: str
    queue: str
    total: int  # messages waiting in the queue on that node
    offset: int
    messages: list[BrowsedMessage]


class Done(msgspec.Struct, kw_only=True):
    """What an action did on one node."""

    node: str
    action: str
    target: str
    count: int = 0  # messages purged, deleted, moved or sent
    detail: str = ""


class VhostRow(msgspec.Struct, kw_only=True):
    """One vhost on one node (the ``vhost_list`` answer)."""

    node: str
    name: str
    # "default" (/), "config" ([[vhosts.host]]), "definition" (meshgate vhost add), or "stored": messages
    # the store keeps for a vhost this node has no more (configured no longer), unreachable until it is again
    origin: str
    queues: int
    messages: int  # waiting in its queues and durable subscriptions on this node
    connections: int  # client connections to it on this node
    # The limits in force on this node (its [[vhosts.host]] entry's, else its definition's); None: no limit
    max_connections: int | None = None
    max_queues: int | None = None
    max_messages: int | None = None


class PermissionRow(msgspec.Struct, kw_only=True):
    """One vhost permission on one node (the ``vhost_permissions_list`` answer)."""

    node: str
    vhost: str
    user: str | None = None
    group: str | None = None
    configure: str
    write: str
    read: str
    source: Literal["config", "command"]  # [[vhosts.permissions]], or meshgate vhost permissions
    # False: a command's entry this node ignores, its configuration having one for that user and vhost
    in_force: bool = True
    # Whether the node checks vhost permissions at all (it has entries and authenticates its users)
    map_active: bool = True


class ListenerReload(msgspec.Struct, kw_only=True):
    """What a TLS reload did to one listener or dialler (as ListenerCertificate.listener)."""

    listener: str
    reloaded: bool  # false: its files could not be used, it kept its old certificate
    subject: str  # the certificate in use now
    not_after: float  # its expiry, epoch seconds
    reason: str = ""  # why the old certificate stayed (naming the file)


class TlsReload(msgspec.Struct, kw_only=True):
    """A reload_tls on one node: one outcome per TLS listener or dialler."""

    node: str
    listeners: list[ListenerReload]

    @property
    def all_reloaded(self) -> bool:
        return all(outcome.reloaded for outcome in self.listeners)
