"""Why a producer's connection is not read (flow control), and since when: what the
doctor's ``producers_paused`` finding reports (docs/doctor.md).

A connection's protocol adapter records a ``ProducerPause`` in its broker's
``paused_producers`` when it stops reading the client, and drops it when it reads
again or the connection goes: only at those transitions, never per message. The
limit's state (how full the memory is) is read when the doctor asks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.broker.vhost_limits import StoredMessages


# The configuration keys that pause producers: the doctor names them.
MEMORY_LIMIT = "broker.memory_limit"
STORE_LIMIT = "store.limit"
MAX_DISK_USAGE = "store.max_disk_usage"
MAX_MESSAGES = "max_messages"  # a vhost's ([[vhosts.host]] or meshgate vhost limits)


@dataclass(slots=True)
class ProducerPause:
    limit_key: str  # one of the keys above
    since: float  # the broker clock's seconds when reading stopped
    protocol: str
    vhost: str
    connection_name: Callable[[], str | None]  # its id as `meshgate connections` lists it (None: not known yet)
    # How full the limit is, in words, read when asked (the node's memory and store are
    # read by the doctor itself; a vhost's max_messages only its connections know).
    limit_state: Callable[[], str] | None = None


def max_messages_state(vhost: str, stored: StoredMessages) -> Callable[[], str]:
    return lambda: f"vhost {vhost} holds {stored.count} message(s), its max_messages is {stored.maximum}"


def store_limit_key(blocked: str) -> str:
    """``blocked``: the store's own reason (gateway/store/room.py), which names its limit."""
    return STORE_LIMIT if STORE_LIMIT in blocked else MAX_DISK_USAGE
