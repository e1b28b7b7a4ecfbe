"""Admin actions done on this node: each checks what it is asked, does it through
the broker core or the mesh, and answers a model result (or raises
ManagementError saying why not)."""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Callable

import msgspec
from twisted.internet.defer import Deferred, maybeDeferred

from gateway.broker.errors import BrokerError
from gateway.broker.message import NOT_FROM_SENDERS, QUEUE, TOPIC, Message
from gateway.broker.queue import Queue
from gateway.broker.vhost_limits import VhostLimit
from gateway.broker.vhosts import messages_held
from management.format import format_limits
from management.permission_actions import PermissionActions
from management.trace_actions import TraceActions
from model.definitions import (
    PERMISSION,
    QUEUE_SETTINGS,
    TRACE,
    VHOST,
    Definition,
    DefinitionKind,
    QueueSettings,
    VhostSpec,
)
from model.names import DEFAULT_VHOST, InvalidName, check_vhost_name, name_problem, quoted
from model.requests import (
    ManagementError,
    VhostSetLimits,
)
from model.results import BrowsedMessage, BrowsePage, Done, ListenerReload, TlsReload, VhostRow

if TYPE_CHECKING:
    from gateway.broker.broker import Broker
    from gateway.broker.vhosts import VirtualHosts
    from mesh.node import MeshNode

_QUEUE_NAME = re.compile(r"[^/*>][^*>]*")
MAX_BROWSE = 500


class LocalActions(PermissionActions, TraceActions):
    def __init__(self, *, node_id: str, broker: Broker, mesh: MeshNode | None, clock,
                 scale_down_and_stop: Callable[[], None] | None = None,
                 failback: Callable[[], Deferred] | None = None,
                 reload_tls: Callable[[], list[ListenerReload]] | None = None,
                 vhosts: VirtualHosts | None = None) -> None:
        self.node_id = node_id
        self.vhosts = vhosts  # None: the node has "/" alone (broker)
        self.failback_node = failback
        self.reload_node_tls = reload_tls
        self.broker = broker
        self.mesh = mesh
        self.clock = clock
        self.scale_down_and_stop = scale_down_and_stop

    def broker_of(self, vhost: str) -> Broker:
        """The broker of ``vhost``; bad_request if the node has no such vhost."""
        return broker_of(self.broker, self.vhosts, vhost)

    def _queue(self, name: str, vhost: str = DEFAULT_VHOST) -> Queue:
        queue = self.broker_of(vhost).queues.get(name)
        if queue is None:
            raise ManagementError("not_found", f"no queue {name!r} on this node", self.node_id)
        return queue

    def _done(self, action: str, target: str, count: int = 0, detail: str = "") -> Done:
        return Done(node=self.node_id, action=action, target=target, count=count, detail=detail)

    # -- reading ----------------------------------------------------------------------------

    def browse(self, name: str, offset: int, limit: int, preview: int, vhost: str = DEFAULT_VHOST) -> BrowsePage:
        if offset < 0 or not 0 < limit <= MAX_BROWSE or preview < 0:
            raise ManagementError("bad_request", f"browse needs offset >= 0, 0 < limit <= {MAX_BROWSE} and "
                                                 "preview >= 0")
        queue = self._queue(name, vhost)
        now = self.clock.seconds()
        messages = [_browsed(message, preview, now) for message in itertools.islice(queue, offset, offset + limit)]
        return BrowsePage(node=self.node_id, queue=name, total=len(queue), offset=offset, messages=messages)

    # -- changing ---------------------------------------------------------------------------

    def purge(self, name: str, vhost: str = DEFAULT_VHOST) -> Done:
        return self._done("purge", "/queue/" + name, self.broker_of(vhost).purge(self._queue(name, vhost)))

    def delete_queue(self, name: str, vhost: str = DEFAULT_VHOST, cancel_consumers: bool = False) -> Done:
        """This node's part of the queue goes, with what waits in it (Broker.drop_queue);
        its definition stays (``delete_definition`` deletes a queue's settings mesh-wide).
        ``cancel_consumers``: AMQP's queue.delete on another node, which deleted the
        definition; here its consumers are cancelled rather than the delete refused."""
        queue = self._queue(name, vhost)
        in_doubt = queue.mesh.in_doubt
        if in_doubt:
            raise ManagementError("conflict", f"{in_doubt} message(s) of queue {name!r} are in doubt on this "
                                              "node; try again once the peers have answered for them", self.node_id)
        count = len(queue)  # what waited (as RabbitMQ counts): not what cancelled consumers held
        if cancel_consumers:
            broker = self.broker_of(vhost)
            broker.cancel_consumers(queue)
            if queue.consumers:  # STOMP subscribers keep the queue; what waits goes
                broker.purge(queue)
                return self._done("delete_queue", "/queue/" + name, count, "STOMP subscribers keep it")
        if queue.consumers:
            raise ManagementError("conflict", f"queue {name!r} has {len(queue.consumers)} consumer(s) on this node; "
                                              "close them first", self.node_id)
        queue.broker.drop_queue(queue)
        return self._done("delete_queue", "/queue/" + name, count)

    # -- mesh-wide definitions --------------------------------------------------------------

    def definitions(self, vhost: str = DEFAULT_VHOST) -> list[Definition]:
        return self.broker_of(vhost).definitions.records()

    def define_queue(self, name: str, settings: QueueSettings, vhost: str = DEFAULT_VHOST) -> Done:
        broker = self.broker_of(vhost)
        _check_queue_name(name)
        try:
            record = broker.define_queue(name, settings)
        except BrokerError as error:
            raise ManagementError("bad_request", str(error)) from None
        return self._done("define_queue", "/queue/" + name, detail=f"version {record.version}, for every node")

    def delete_definition(self, kind: DefinitionKind, name: str, vhost: str = DEFAULT_VHOST) -> Done:
        broker = self.broker_of(vhost)
        record = broker.definitions.get(kind, name)
        if record is None or record.deleted:
            raise ManagementError("not_found", f"no {kind} definition named {name!r}", self.node_id)
        if kind == VHOST:
            raise ManagementError("bad_request", "a vhost is deleted by vhost_delete (meshgate vhost delete), which "
                                                 "checks what it holds")
        if kind == PERMISSION:
            raise ManagementError("bad_request", "a permission is cleared by vhost_permissions_clear (meshgate vhost "
                                                 "permissions VHOST --user U --clear)")
        if kind == QUEUE_SETTINGS:
            record = broker.define_queue(name, None)
            target = "/queue/" + name
        elif kind == TRACE:
            record = broker.define_trace(name, None)
            target = "tracing of " + name
        else:
            binding = broker.bindings.get(name)
            where = self.node_id if binding is not None and binding.active is not None else (
                self.mesh.demand.durable_subscriber_at(name, vhost) if self.mesh is not None else None)
            if where is not None:
                raise ManagementError("conflict", f"durable subscription {name!r} has its subscriber connected (to "
                                                  f"node {where}); it must unsubscribe first", where)
            broker.remove_durable(name)
            record = broker.definitions.get(kind, name) or record
            target = "durable subscription " + name
        return self._done("delete_definition", target, detail=f"version {record.version}, for every node")

    def move(self, name: str, to_queue: str | None, to_node: str | None, count: int | None,
             vhost: str = DEFAULT_VHOST) -> Done:
        if (to_queue is None) == (to_node is None):
            raise ManagementError("bad_request", "move needs exactly one of to_queue and to_node")
        if count is not None and count < 1:
            raise ManagementError("bad_request", f"count must be at least 1, got {count}")
        broker = self.broker_of(vhost)
        queue = self._queue(name, vhost)
        if to_node is not None:
            return self._move_to_node(name, to_node, count, vhost)
        assert to_queue is not None  # one of the two, as checked above
        _check_queue_name(to_queue)
        if to_queue in broker.services:
            raise ManagementError("bad_request", f"{quoted(to_queue)} is a service address, not a queue")
        if to_queue == name:
            raise ManagementError("bad_request", "a queue cannot move messages to itself")
        moved = queue.take(count)
        for message in moved:
            broker.consumed(queue, message)
            if message.traced and broker.tracer is not None:
                broker.tracer.moved(queue, message, "/queue/" + to_queue)
            copy = type(message)(message.id, QUEUE, to_queue, message.headers, message.body, message.persistent,
                           message.priority, message.expires)
            copy.created = message.created
            copy.path = message.path
            broker.route(copy)
        return self._done("move", "/queue/" + name, len(moved), f"to /queue/{to_queue}")

    def redistribute(self, name: str, vhost: str = DEFAULT_VHOST) -> Done:
        """End the redistribution delay holding the queue's backlog here (mesh.demand)."""
        mesh = self.mesh
        if mesh is None:
            raise ManagementError("conflict", "this node is not in a mesh", self.node_id)
        queue = self._queue(name, vhost)
        backlog = len(queue)
        refusal = mesh.demand.redistribute_now(vhost, name)
        if refusal is not None:
            raise ManagementError("conflict", refusal, self.node_id)
        return self._done("redistribute", "/queue/" + name, backlog, "released to follow consumers elsewhere")

    def pull(self, name: str, to_node: str, count: int, vhost: str = DEFAULT_VHOST) -> Done:
        """Half of what waits at most (this node's own consumers and gets keep the rest),
        to a linked node only: hand_over goes over one link."""
        if count < 1:
            raise ManagementError("bad_request", f"count must be at least 1, got {count}")
        queue = self._queue(name, vhost)
        share = min(count, (len(queue) + 1) // 2)
        mesh = self.mesh
        moved = mesh.hand_over(to_node, name, share, vhost) if share and mesh is not None else 0
        return self._done("pull", "/queue/" + name, moved)

    def _move_to_node(self, name: str, to_node: str, count: int | None, vhost: str) -> Done:
        mesh = self.mesh
        if mesh is None:
            raise ManagementError("conflict", "this node is not in a mesh", self.node_id)
        if to_node == self.node_id:
            raise ManagementError("bad_request", "the messages are on this node already")
        if to_node not in mesh.peers:
            raise ManagementError("conflict", f"node {to_node} is not linked with this node; messages move to a "
                                              "linked node (meshgate links shows them)", self.node_id)
        peer = mesh.peers[to_node]
        if vhost != DEFAULT_VHOST and not peer.vhosts:
            raise ManagementError("conflict", f"node {peer.link.peer_name} is of an older release, which cannot keep "
                                              f"vhost {quoted(vhost)}'s messages", self.node_id)
        moved = mesh.hand_over(to_node, name, count, vhost)
        return self._done("move", "/queue/" + name, moved, f"to node {peer.link.peer_name}")

    def send(self, destination: str, body: str, headers: dict[str, str], persistent: bool,
             vhost: str = DEFAULT_VHOST) -> Done:
        broker = self.broker_of(vhost)
        kind, _, address = destination[1:].partition("/")
        if not destination.startswith("/") or kind not in (QUEUE, TOPIC) or not address:
            raise ManagementError("bad_request", f"invalid destination {destination!r}: use /queue/NAME or "
                                                 "/topic/NAME")
        if kind == QUEUE and address in broker.services:
            raise ManagementError("bad_request", f"{destination} is a service address")
        # What the broker and the AMQP gateway write is not the sender's to say.
        headers = {str(k): str(v) for k, v in headers.items() if k not in NOT_FROM_SENDERS}
        headers.setdefault("persistent", "true" if persistent else "false")
        try:
            message = broker.send(kind, address, headers, body.encode(), persistent)
        except BrokerError as error:
            raise ManagementError("bad_request", str(error)) from None
        return self._done("send", destination, 1 if message is not None else 0,
                          message.id if message is not None else "dropped: it had expired")

    # -- vhosts -----------------------------------------------------------------------------

    def vhost_list(self) -> list[VhostRow]:
        vhosts = self.vhosts
        if vhosts is None:
            return [self._vhost_row(DEFAULT_VHOST, "default", self.broker)]
        rows = []
        for name, broker in sorted(vhosts.brokers.items()):
            rows.append(self._vhost_row(name, vhosts.origin(name) or "definition", broker))
        for name, count in vhosts.unclaimed().items():  # kept in the store for a vhost configured no more
            rows.append(VhostRow(node=self.node_id, name=name, origin="stored", queues=0, messages=count,
                                 connections=0))
        return rows

    def _vhost_row(self, name: str, origin: str, broker: Broker) -> VhostRow:
        connections = {s.connection.name or s.name for s in broker.sessions.values() if s.connection is not None}
        limits = self.vhosts.limits if self.vhosts is not None else None
        limit = limits.limit(name) if limits is not None else VhostLimit()
        return VhostRow(node=self.node_id, name=name, origin=origin, queues=len(broker.queues),
                        messages=messages_held(broker), connections=len(connections),
                        max_connections=limit.max_connections, max_queues=limit.max_queues,
                        max_messages=limit.max_messages)

    def vhost_add(self, name: str, spec: VhostSpec) -> Done:
        vhosts = self._vhosts()
        _check_vhost_name(name)
        if name == DEFAULT_VHOST or vhosts.defined(name):
            return self._done("vhost_add", name, detail="it exists already")
        record = vhosts.define(name, spec)
        return self._done("vhost_add", name, detail=f"version {record.version}, for every node")

    def vhost_limits(self, request: VhostSetLimits) -> Done:
        """Redefine vhost ``request.name`` with the limits the request sets (others kept)."""
        vhosts = self._vhosts()
        name = request.name
        _check_vhost_name(name)
        if name == DEFAULT_VHOST or name in vhosts.configured:
            raise ManagementError("conflict", f"vhost {quoted(name)} is in this node's configuration: its limits "
                                              "are its [[vhosts.host]] entry's", self.node_id)
        record = vhosts.default.definitions.get(VHOST, name)
        if record is None or record.vhost is None:
            raise ManagementError("not_found", f"no vhost {quoted(name)} made by command (meshgate vhost list "
                                               "shows the vhosts)", self.node_id)
        changes = {field: value for field in ("max_connections", "max_queues", "max_messages")
                   if (value := getattr(request, field)) is not msgspec.UNSET}
        spec = msgspec.structs.replace(record.vhost, **changes)
        if spec == record.vhost:
            return self._done("vhost_limits", name, detail="unchanged")
        record = vhosts.define(name, spec)
        return self._done("vhost_limits", name, detail=f"version {record.version}, for every node: "
                                                       + format_limits(spec))

    def vhost_delete(self, name: str, force: bool, holding: dict[str, int], unanswered: list[str]) -> Done:
        """Delete vhost ``name`` everywhere. ``holding``: node name -> the messages it
        holds there, as every node answered (``unanswered``: those that did not);
        without ``force`` refused while any holds some, or may."""
        vhosts = self._vhosts()
        _check_vhost_name(name)
        if name == DEFAULT_VHOST:
            raise ManagementError("bad_request", "the default vhost '/' cannot be deleted")
        if name in vhosts.configured:
            raise ManagementError("conflict", f"vhost {quoted(name)} is in this node's configuration "
                                              "([[vhosts.host]]): remove it there", self.node_id)
        if not vhosts.defined(name) and name not in vhosts.unclaimed():
            raise ManagementError("not_found", f"no vhost {quoted(name)} made by command (meshgate vhost list "
                                               "shows the vhosts)", self.node_id)
        dropped = sum(holding.values())
        if not force and (dropped or unanswered):
            where = ", ".join(f"{count} on {node}" for node, count in sorted(holding.items()) if count)
            why = (f"it holds {dropped} message(s) ({where})" if dropped else "") + (
                "; " if dropped and unanswered else "") + (
                f"node(s) {', '.join(unanswered)} did not answer and may hold some" if unanswered else "")
            raise ManagementError("conflict", f"vhost {quoted(name)} not deleted: {why}; --force (force: true) "
                                              "deletes it with its messages")
        vhosts.undefine(name)
        return self._done("vhost_delete", name, count=dropped,
                          detail="deleted on every node: its clients disconnected, its queues and messages dropped")

    def _vhosts(self) -> VirtualHosts:
        if self.vhosts is None:
            raise ManagementError("conflict", "this node serves the default vhost alone", self.node_id)
        return self.vhosts

    def close_connection(self, connection_id: str, reason: str) -> Done:
        sessions = [s for broker in (self.vhosts or [self.broker]) for s in broker.sessions.values()]
        session = next((s for s in sessions if s.name == connection_id), None) or next(
            (s for s in sessions if s.connection is not None and s.connection.name == connection_id), None)
        if session is None or session.connection is None:
            raise ManagementError("not_found", f"no connection {connection_id!r} on this node", self.node_id)
        session.connection.close(reason)
        return self._done("close_connection", connection_id, detail=reason)

    def forget(self, node_id: str) -> Done:
        if self.mesh is None:
            raise ManagementError("conflict", "this node is not in a mesh", self.node_id)
        refusal = self.mesh.forget(node_id)
        if refusal:
            raise ManagementError("conflict", refusal, self.node_id)
        return self._done("forget", node_id, detail="no node waits for it; what was kept for it is dropped")

    def scale_down(self) -> Done:
        if self.mesh is None or self.scale_down_and_stop is None:
            raise ManagementError("conflict", "this node is not in a mesh: there is no node to hand messages to",
                                  self.node_id)
        if self.mesh.scaling_down:
            raise ManagementError("conflict", "this node is scaling down already", self.node_id)
        if not self.mesh.peers:
            raise ManagementError("conflict", "this node is not linked with any node to hand its messages to",
                                  self.node_id)
        # Answer first: the node stops once its messages are handed over.
        self.clock.callLater(0.2, self.scale_down_and_stop)
        return self._done("scale_down", self.node_id, detail="handing every message over, then stopping")

    def reload_tls(self) -> TlsReload:
        """Re-read the node's certificate, key and CA files (as SIGHUP does)."""
        if self.reload_node_tls is None:
            raise ManagementError("conflict", "this node cannot reload its TLS files", self.node_id)
        return TlsReload(node=self.node_id, listeners=self.reload_node_tls())

    def failback(self) -> Deferred:
        """Hand a replicated pair's node over to its in-sync backup; fires with a Done
        naming the new epoch once the backup serves (docs/ha.md#failback)."""
        if self.failback_node is None:
            raise ManagementError("conflict", "this node is not a member of a replicated pair (ha.mode = "
                                  '"replicated")', self.node_id)

        def done(result: tuple[int, str]) -> Done:
            epoch, backup = result
            return self._done("ha_failback", self.node_id, count=epoch,
                              detail=f"the backup {backup} took over at epoch {epoch}; this member rejoins as its "
                                     "backup")

        def refused(failure):
            if failure.check(ManagementError):
                return failure
            raise ManagementError("conflict", f"failback refused: {failure.value}", self.node_id)

        return maybeDeferred(self.failback_node).addCallbacks(done, refused)


def broker_of(default: Broker, vhosts: VirtualHosts | None, vhost: str) -> Broker:
    """The broker of ``vhost`` (``default`` is "/"'s); bad_request if there is none."""
    broker = default if vhost == DEFAULT_VHOST else vhosts.get(vhost) if vhosts is not None else None
    if broker is None:
        raise ManagementError("bad_request", f"no vhost {quoted(vhost)}")
    return broker


def _check_vhost_name(name: str) -> None:
    try:
        check_vhost_name(name)
    except InvalidName as error:
        raise ManagementError("bad_request", str(error)) from None


def _check_queue_name(name: str) -> None:
    """The one rule for names (model/names.py), and no wildcards or leading / in a queue's."""
    problem = name_problem(name)
    if problem is None and not _QUEUE_NAME.fullmatch(name):
        problem = "a queue name has no wildcards (* >) and does not start with /"
    if problem is not None:
        raise ManagementError("bad_request", f"invalid queue name {quoted(name)}: {problem}")


def _browsed(message: Message, preview: int, now: float) -> BrowsedMessage:
    body = message.body
    return BrowsedMessage(
        id=message.id, destination=f"/{message.kind}/{message.address}", headers=dict(message.headers),
        size=len(body), body=body[:preview].decode("utf-8", "replace"), truncated=len(body) > preview,
        persistent=message.persistent, priority=message.priority, redelivered=message.redelivered,
        age_ms=max(0, int((now - message.created) * 1000)) if message.created else None,
    )
