"""gateway.amqp.mesh_queues.MeshQueues for a node in a mesh: the other nodes' part of
a queue, asked with the management requests the mesh's router carries (``queues``,
``pull``, ``purge``, ``delete_queue``), as the console asks them. A node that does not answer in
``ANSWER_TIMEOUT_S`` counts with what the gossip last said of it (counts), moved
nothing (pulls), or fails the purge."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from twisted.internet import defer

from gateway.amqp.mesh_queues import Emptied, MeshUnanswered, Pulled, QueueElsewhere
from model.mesh import PartialQueue
from model.requests import DeleteQueue, ManagementError, Pull, Purge, Queues

if TYPE_CHECKING:
    from management.service import ManagementService
    from mesh.topology import Topology

ANSWER_TIMEOUT_S = 2.0  # a node's answer on loopback takes a millisecond; this is for a node in trouble
USER = "amqp"  # who the pulls and counts are recorded for (they are not admin actions)


class AmqpMeshQueues:
    def __init__(self, node_id: str, service: ManagementService, topology: Topology,
                 timeout: float = ANSWER_TIMEOUT_S) -> None:
        self.node_id = node_id
        self.service = service
        self.topology = topology
        self.timeout = timeout
        self._pulls: dict[tuple[str, str], list[defer.Deferred[Pulled]]] = {}

    def _others(self) -> list[str]:
        """The other nodes a request can reach now."""
        topology = self.topology
        return [node_id for node_id in topology.entries
                if node_id != self.node_id and node_id not in topology.departed and topology.route(node_id)]

    def _ask_others(self, request, user: str = USER) -> tuple[list[str], defer.Deferred]:
        others = self._others()
        asked = [self.service.ask(node_id, request, user, everywhere=True, timeout=self.timeout)
                 for node_id in others]
        return others, defer.DeferredList(asked, consumeErrors=True)

    # -- counts -------------------------------------------------------------------------

    def elsewhere(self, vhost: str, queue: str) -> defer.Deferred[QueueElsewhere]:
        others, answers = self._ask_others(Queues(name=queue, vhost=vhost))

        def add_up(outcomes: list) -> QueueElsewhere:
            known, ready, consumers = False, 0, 0
            for (ok, rows), node_id in zip(outcomes, others, strict=True):
                if ok:
                    parts = [(row.depth, row.consumers) for row in msgspec.convert(rows, list[PartialQueue])]
                else:
                    parts = self._gossiped(node_id, vhost, queue)
                for depth, count in parts:
                    known, ready, consumers = True, ready + depth, consumers + count
            return QueueElsewhere(known=known, ready=ready, consumers=consumers)

        return answers.addCallback(add_up)

    def _gossiped(self, node_id: str, vhost: str, queue: str) -> list[tuple[int, int]]:
        entry = self.topology.entries.get(node_id)
        if entry is None:
            return []
        return [(row.depth, row.consumers) for row in entry.summary.queues if row.name == queue and row.vhost == vhost]

    # -- basic.get ----------------------------------------------------------------------

    def pull(self, vhost: str, queue: str) -> defer.Deferred[Pulled]:
        """Gets on the same queue while a pull is out wait for its answer, rather than
        each asking every node again."""
        joined: defer.Deferred[Pulled] = defer.Deferred()
        key = (vhost, queue)
        waiting = self._pulls.get(key)
        if waiting is not None:
            waiting.append(joined)
            return joined
        waiting = self._pulls[key] = [joined]
        others, answers = self._ask_others(Pull(queue=queue, to_node=self.node_id, vhost=vhost))

        def add_up(outcomes: list) -> None:
            known, moved = False, 0
            for ok, done in outcomes:  # another node's Done, as JSON
                if ok:
                    known, moved = True, moved + done["count"]
            del self._pulls[key]
            for d in waiting:
                d.callback(Pulled(known=known, moved=moved))

        answers.addCallback(add_up)
        return joined

    # -- queue.purge --------------------------------------------------------------------

    def purge(self, vhost: str, queue: str, user: str) -> defer.Deferred[Emptied]:
        return self._empty(Purge(queue=queue, vhost=vhost), user)

    def delete(self, vhost: str, queue: str, user: str) -> defer.Deferred[Emptied]:
        return self._empty(DeleteQueue(queue=queue, vhost=vhost, cancel_consumers=True), user)

    def _empty(self, request: Purge | DeleteQueue, user: str) -> defer.Deferred[Emptied]:
        others, answers = self._ask_others(request, user)

        def add_up(outcomes: list) -> Emptied:
            known, count = False, 0
            for (ok, value), node_id in zip(outcomes, others, strict=True):
                if ok:  # another node's Done, as JSON
                    known, count = True, count + value["count"]
                    continue
                error = value.value
                if not (isinstance(error, ManagementError) and error.code == "not_found"):
                    raise MeshUnanswered(f"node {self.service.name_of(node_id)}: {value.getErrorMessage()}")
            return Emptied(known=known, count=count)

        return answers.addCallback(add_up)
