"""Mesh-wide definitions: queue settings and durable topic subscriptions, held
alike by every node of the mesh (docs/mesh.md, "Mesh-wide definitions").

There is one record per kind and name. A change anywhere makes a new record
numbered one past every version its node has seen (a Lamport clock); of two
records for one name the higher ``(version, origin)`` wins, on every node alike,
so nodes that merge the same records in any order end up holding the same ones.
A deletion is a record too (a *tombstone*: neither ``queue`` nor ``durable``), so
that a node that was away learns of it rather than bringing the old one back."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

QUEUE_SETTINGS = "queue"
DURABLE_SUBSCRIPTION = "durable"
DefinitionKind = Literal["queue", "durable"]


class QueueSettings(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Per-queue settings; a setting left out is the node's ``[broker]`` default."""

    max_delivery_attempts: Annotated[int, msgspec.Meta(ge=1)] | None = None
    dead_letter_queue: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    expiry_queue: str | None = None  # "" discards expired messages
    message_ttl_ms: Annotated[int, msgspec.Meta(ge=1)] | None = None  # for messages sent without `expires`


class DurableSpec(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """What a durable topic subscription takes: a topic (or wildcard) and a selector."""

    topic: str
    selector: str | None = None


class Definition(msgspec.Struct, kw_only=True, omit_defaults=True):
    kind: DefinitionKind
    name: str  # the queue's name, or the durable subscription's (client-id.subscription-name)
    version: int  # Lamport clock of the change
    origin: str  # the id of the node where the change was made
    changed_at: float  # wall clock of the change, seconds (shown; tombstones expire by it)
    queue: QueueSettings | None = None
    durable: DurableSpec | None = None

    @property
    def deleted(self) -> bool:
        return self.queue is None and self.durable is None

    def wins_over(self, other: Definition | None) -> bool:
        return other is None or (self.version, self.origin) > (other.version, other.origin)
