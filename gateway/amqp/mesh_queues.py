"""What an AMQP channel asks of the rest of the mesh about a queue, so a client on any
node sees the queue as one broker would (issue 26, docs/amqp-mesh-design.md): its
ready messages and consumers on the other nodes, a message pulled here for a
basic.get, and a purge of the other nodes' part. The gateway does not know the mesh:
the node's wiring gives the AMQP listener an implementation (management.amqp_mesh);
a node alone has none, and the channel answers for its own queue as it always did."""

from __future__ import annotations

from typing import Protocol

import msgspec
from twisted.internet import defer


class QueueElsewhere(msgspec.Struct, frozen=True):
    """A queue's part on the other nodes of the mesh."""

    known: bool = False  # some other node holds or defines the queue
    ready: int = 0  # messages waiting there (what RabbitMQ's message_count counts)
    consumers: int = 0


NOWHERE_ELSE = QueueElsewhere()


class Pulled(msgspec.Struct, frozen=True):
    known: bool  # some other node holds or defines the queue
    moved: int  # messages the other nodes are moving here


class Emptied(msgspec.Struct, frozen=True):
    known: bool
    count: int  # messages purged (or dropped with the queue) on the other nodes


class MeshQueues(Protocol):
    def elsewhere(self, vhost: str, queue: str) -> defer.Deferred[QueueElsewhere]:
        """The other nodes' part of the queue, asked afresh; a node too slow to answer
        counts with what the gossip last said of it. Never fails."""
        ...

    def pull(self, vhost: str, queue: str) -> defer.Deferred[Pulled]:
        """Ask the other nodes to move ready messages of the queue here, with custody
        as for any forward. Never fails: a node that does not answer moved none."""
        ...

    def purge(self, vhost: str, queue: str, user: str) -> defer.Deferred[Emptied]:
        """Purge the queue on every other node, recorded there as ``user``'s action.
        Fails with MeshUnanswered naming a node that did not answer."""
        ...


    def delete(self, vhost: str, queue: str, user: str) -> defer.Deferred[Emptied]:
        """Delete the queue's part on every other node: its consumers there are
        cancelled (AMQP's hear basic.cancel) and what waits there is dropped. Fails
        with MeshUnanswered naming a node that did not answer, or could not."""
        ...


class MeshUnanswered(Exception):
    """A node of the mesh did not answer for its part of a queue: the method fails
    rather than answer for part of the queue."""
