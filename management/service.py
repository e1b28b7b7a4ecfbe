"""Management requests, answered over the messaging protocol itself (as ActiveMQ's
statistics plugin does): a client SENDs a model.requests request as JSON to
``/queue/meshgate.management`` with a ``reply-to``, and the model.requests.Reply
comes back there, with the request's ``correlation-id``.

The node that takes the request resolves which nodes it concerns, answers for
itself, and asks the others over the mesh links (mesh.router); the answer
gathers theirs. Authorization is the asking node's: a request that changes
something needs the ``admin`` permission on the management address, checked
against the sender's authenticated session, and the reply goes only to the
sender's own temporary queue or to a destination it may write to."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

import msgspec
from twisted.internet import defer

from gateway.broker.broker import TEMP, Broker
from gateway.broker.errors import BrokerError
from gateway.broker.message import QUEUE, TOPIC, Message
from management.actions import LocalActions
from management.audit import admin_action, asker, outcome
from management.doctor import DEFAULT_THRESHOLDS, Thresholds
from management.doctor_node import DoctorFacts, answer_diagnosis, thresholds_of
from management.events import EventLog
from management.journeys import JourneyStore
from management.remedies import apply_remedy
from management.state import LocalState
from model.journeys import JourneySummary, merge_summaries
from model.mesh import ClusterView
from model.requests import (
    ADMIN_ACTIONS,
    ALL,
    MANAGEMENT_ADDRESS,
    SINGLE_ANSWER,
    ApplyRemedy,
    DefineTrace,
    Diagnosis,
    Failure,
    JourneySearch,
    ManagementError,
    Move,
    Nodes,
    Reply,
    Request,
    Summary,
    VhostDelete,
    VhostList,
    VhostRow,
    action_of,
    decode_request,
)

if TYPE_CHECKING:
    from mesh.node import MeshNode

log = logging.getLogger(__name__)

ADDRESS = MANAGEMENT_ADDRESS
REQUEST_TIMEOUT = 5.0  # seconds a node waits for another node's answer
# The asked node does it (and tells the mesh).
_ASKED_NODE_ONLY = ("forget", "define_queue", "delete_definition", "vhost_add", "vhost_limits",
                    "vhost_permissions_set", "vhost_permissions_clear")


class ManagementService:
    def __init__(self, *, node_id: str, name: str, broker: Broker, mesh: MeshNode | None, state: LocalState,
                 actions: LocalActions, events: EventLog, authorizer=None, timeout: float = REQUEST_TIMEOUT,
                 journeys: JourneyStore | None = None, doctor_thresholds: Thresholds = DEFAULT_THRESHOLDS,
                 doctor: DoctorFacts | None = None) -> None:
        self.node_id = node_id
        self.name = name
        self.broker = broker
        self.mesh = mesh
        self.state = state
        self.actions = actions
        self.events = events
        self.authorizer = authorizer
        self.timeout = timeout
        self.doctor = doctor if doctor is not None else DoctorFacts(state)  # its sampler started by the node
        self.doctor_thresholds = doctor_thresholds  # what a diagnosis request does not give ([doctor])
        self.journeys = journeys  # None: [journeys] off on this node
        self._answers: dict[str, Callable[[Any], Any]] = {
            "summary": lambda r: state.summary(),
            "queues": lambda r: state.queues(r.name, vhost=r.vhost),
            "links": lambda r: state.links(),
            "connections": lambda r: state.connections(),
            "subscriptions": lambda r: state.subscriptions(),
            "events": lambda r: events.query(r.since, r.kinds, r.limit),
            "browse": lambda r: actions.browse(r.queue, r.offset, r.limit, r.preview, r.vhost),
            "purge": lambda r: actions.purge(r.queue, r.vhost),
            "delete_queue": lambda r: actions.delete_queue(r.queue, r.vhost, r.cancel_consumers),
            "move": lambda r: actions.move(r.queue, r.to_queue, r.to_node, r.count, r.vhost),
            "pull": lambda r: actions.pull(r.queue, r.to_node, r.count, r.vhost),
            "redistribute": lambda r: actions.redistribute(r.queue, r.vhost),
            "send": lambda r: actions.send(r.destination, r.body, r.headers, r.persistent, r.vhost),
            "close_connection": lambda r: actions.close_connection(r.connection, r.reason),
            "forget": lambda r: actions.forget(r.forget),
            "scale_down": lambda r: actions.scale_down(),
            "ha_failback": lambda r: actions.failback(),
            "reload_tls": lambda r: actions.reload_tls(),
            "definitions": lambda r: actions.definitions(r.vhost),
            "define_queue": lambda r: actions.define_queue(r.queue, r.settings, r.vhost),
            "delete_definition": lambda r: actions.delete_definition(r.kind, r.name, r.vhost),
            "vhost_list": lambda r: actions.vhost_list(),
            "vhost_add": lambda r: actions.vhost_add(r.name, r.spec),
            "vhost_limits": lambda r: actions.vhost_limits(r),
            "vhost_permissions_set": lambda r: actions.vhost_permissions_set(r.permission),
            "vhost_permissions_clear": lambda r: actions.vhost_permissions_clear(r),
            "vhost_permissions_list": lambda r: actions.vhost_permissions_list(r.vhost),
            "node_facts": lambda r: self.doctor.collect(),
            "journey_steps": lambda r: self._journeys().steps_of(r.ids),
            "journey_search": lambda r: self._journeys().search(
                queue=r.queue, vhost=r.vhost, header=r.header_pair(), since=r.since, until=r.until, body=r.body,
                limit=r.limit),
            "trace_next": lambda r: actions.trace_next(r.destination, r.every, r.count, r.for_s, r.vhost),
        }
        broker.register_service(ADDRESS, self.handle)
        if mesh is not None:
            mesh.router.handler = self.answer_routed

    # -- the protocol side ------------------------------------------------------------------

    def handle(self, message: Message, session) -> None:
        """A request SENT to the management address by a client connected here."""
        if session is None:
            log.warning("management: a request came over a mesh link, not from a client; dropped")
            return
        target = self._reply_target(message.headers.get("reply-to"), session)
        principal = session.principal
        user = getattr(principal, "name", "?")
        d = self.execute(message.body, user, self._allowed(principal, "admin", "/queue/" + ADDRESS))
        d.addCallback(self._send_reply, target, message.headers.get("correlation-id"))
        d.addErrback(lambda failure: log.error("management: %s", failure.getTraceback()))

    def _reply_target(self, reply_to: str | None, session) -> tuple[str, str]:
        """Where the reply may go: the sender's own temporary queue, or a destination
        it may write to. Anything else is refused with an ERROR (BrokerError)."""
        if not reply_to:
            raise BrokerError(f"a request to /queue/{ADDRESS} needs a reply-to header: a /temp-queue/ of this "
                              "connection, or a destination it may write to")
        for prefix, candidate in (("/queue/", QUEUE), ("/topic/", TOPIC), ("/remote-temp-queue/", TEMP)):
            if reply_to.startswith(prefix) and len(reply_to) > len(prefix):
                kind, address = candidate, reply_to[len(prefix):]
                break
        else:
            raise BrokerError(f"reply-to {reply_to!r} is not a destination: use a /temp-queue/ of this connection")
        if kind == TEMP:
            queue = self.broker.temp_queues.get(address)
            if queue is not None and queue.owner is session:
                return kind, address
            acl_name = "/temp-queue/" + address
        else:
            if kind == QUEUE and address in self.broker.services:
                raise BrokerError(f"reply-to {reply_to} is a service address")
            acl_name = reply_to
        if not self._allowed(session.principal, "write", acl_name):
            raise BrokerError(f"reply-to {reply_to} is not this connection's own temporary queue, nor a "
                              "destination it may write to")
        return kind, address

    def _allowed(self, principal, action: str, destination: str) -> bool:
        authorizer = self.authorizer
        if authorizer is None or not authorizer.enabled:
            return True
        return principal is not None and authorizer.allowed(principal, action, destination)

    def _send_reply(self, reply: Reply, target: tuple[str, str], correlation_id: str | None) -> None:
        headers = {"content-type": "application/json"}
        if correlation_id is not None:
            headers["correlation-id"] = correlation_id
        self.broker.send(target[0], target[1], headers, msgspec.json.encode(reply))

    # -- answering --------------------------------------------------------------------------

    def execute(self, body: bytes, user: str, admin: bool) -> defer.Deferred:
        """Answer a request (JSON) a client of this node sent as ``user``: fires with a
        Reply, never fails."""
        try:
            request = decode_request(body)
        except ManagementError as error:
            return defer.succeed(Reply(ok=False, error=error.failure()))
        if request.remedy_of is not None:
            # Its audit event would say the doctor did it: only apply_remedy, which runs its
            # remedy here (and routes it on, still marked), says so.
            return defer.succeed(Reply(action=action_of(request), ok=False, error=Failure(
                code="bad_request", message="remedy_of is set by apply_remedy only (meshgate doctor --fix): leave "
                                            "it out of a request")))
        return self.run(request, user, admin)

    def run(self, request: Request, user: str, admin: bool) -> defer.Deferred:
        """Answer a request from ``user``: fires with a Reply, never fails."""
        action = action_of(request)
        if action in ADMIN_ACTIONS and not admin:
            message = f"{action} needs the admin permission on /queue/{ADDRESS}"
            self.events.emit(admin_action(request, user, False, "refused: " + message))
            return defer.succeed(Reply(action=action, ok=False, error=Failure(code="forbidden", message=message)))
        try:
            if isinstance(request, Nodes):
                return self._nodes(request.fresh)
            if isinstance(request, VhostDelete):
                return self._vhost_delete(request, user)
            if isinstance(request, Diagnosis):
                thresholds = thresholds_of(request, self.doctor_thresholds)
                return answer_diagnosis(self, self.state.clock.seconds(), thresholds, user, self._targets(ALL))
            if isinstance(request, ApplyRemedy):
                return apply_remedy(self, request, user, admin)
            if isinstance(request, DefineTrace):  # asked node only, and the definition names who asked
                who = asker(request, user)
                return defer.succeed(Reply(action=action, result=self._answer_here(
                    request, user, answer=lambda r: self.actions.define_trace(r, who))))
            if action in _ASKED_NODE_ONLY:
                return defer.succeed(Reply(action=action, result=self._answer_here(request, user)))
            targets = self._targets(request.node)
            if isinstance(request, Move) and request.to_node is not None:
                request = msgspec.structs.replace(request, to_node=self._resolve(request.to_node))
        except ManagementError as error:
            return defer.succeed(Reply(action=action, ok=False, error=error.failure()))
        asked = [self.ask(node_id, request, user, request.node == ALL) for node_id in targets]
        gathered = defer.DeferredList(asked, consumeErrors=True)
        return gathered.addCallback(self._gather, request, targets)

    def ask(self, node_id: str, request: Request, user: str, everywhere: bool = False,
            timeout: float | None = None) -> defer.Deferred:
        """One node's answer: a result, or a ManagementError. ``everywhere``: the request
        went to every node, so a node without the queue is no refusal worth recording."""
        if node_id == self.node_id:
            return defer.maybeDeferred(self._answer_here, request, user, everywhere)
        assert self.mesh is not None, "other nodes are known through the mesh only"
        body = {"request": msgspec.to_builtins(msgspec.structs.replace(request, node=node_id)), "user": user,
                "everywhere": everywhere}
        d = self.mesh.router.request(node_id, body, self.timeout if timeout is None else timeout)

        def unpack(answer: dict) -> Any:
            if "error" in answer:
                raise ManagementError(**answer["error"])
            return answer["result"]

        def unreachable(failure) -> None:
            if failure.check(ManagementError):
                return failure
            raise ManagementError("unreachable", failure.getErrorMessage(), node_id)

        return d.addCallback(unpack).addErrback(unreachable)

    def _gather(self, outcomes: list, request: Request, targets: list[str]) -> Reply:
        action, asked_for = action_of(request), request.node
        results: list = []
        failures: list[Failure] = []
        missing: list[Failure] = []  # "not_found" from nodes asked because every node was: no refusal alone
        for (ok, value), node_id in zip(outcomes, targets, strict=True):
            if ok:
                results.extend(value) if isinstance(value, list) else results.append(value)
                continue
            error = value.value if value.check(ManagementError) else ManagementError(
                "unreachable", value.getErrorMessage(), node_id)
            if error.node is None:
                error.node = node_id
            (missing if error.code == "not_found" and asked_for == ALL else failures).append(error.failure())
        if len(targets) == 1 and failures:
            return Reply(action=action, ok=False, error=failures[0])
        if asked_for == ALL and missing and not results and not failures:
            message = missing[0].message.replace("on this node", "on any node")
            return Reply(action=action, ok=False, error=Failure(code="not_found", message=message))
        if action == "events":
            results.sort(key=lambda event: event["time"] if isinstance(event, dict) else event.time)
        if isinstance(request, JourneySearch):  # other nodes' hits come as JSON
            results = merge_summaries(msgspec.convert(results, list[JourneySummary], from_attributes=True),
                                      request.limit)
        if action in SINGLE_ANSWER:
            return Reply(action=action, result=results[0] if results else None, failures=failures)
        return Reply(action=action, result=results, failures=failures)

    def _vhost_delete(self, request: VhostDelete, user: str) -> defer.Deferred:
        """Ask every node what the vhost holds there, then delete it here (and by its
        definition everywhere), unless that is refused (actions.vhost_delete)."""
        targets = self._targets(ALL)
        asked = [self.ask(node_id, VhostList(), user) for node_id in targets]

        def delete(outcomes: list) -> Reply:
            holding: dict[str, int] = {}
            unanswered = []
            for (ok, rows), node_id in zip(outcomes, targets, strict=True):
                if not ok:
                    unanswered.append(self.name_of(node_id))
                    continue
                for row in msgspec.convert(rows, list[VhostRow]):
                    if row.name == request.name:
                        holding[self.name_of(node_id)] = row.messages

            def answer(r: VhostDelete) -> Any:
                return self.actions.vhost_delete(r.name, r.force, holding, unanswered)

            try:
                return Reply(action="vhost_delete", result=self._answer_here(request, user, answer=answer))
            except ManagementError as error:
                return Reply(action="vhost_delete", ok=False, error=error.failure())

        return defer.DeferredList(asked, consumeErrors=True).addCallback(delete)

    def name_of(self, node_id: str) -> str:
        if node_id == self.node_id:
            return self.name
        entry = self.mesh.topology.entries.get(node_id) if self.mesh is not None else None
        return entry.summary.node.name if entry is not None else node_id

    def _answer_here(self, request: Request, user: str, everywhere: bool = False,
                     answer: Callable[[Any], Any] | None = None) -> Any:
        action = action_of(request)
        answer = answer or self._answers.get(action)
        if answer is None:
            raise ManagementError("bad_request", f"{action} is not answered by one node")
        if action not in ADMIN_ACTIONS:
            return answer(request)
        try:
            result = answer(request)
        except ManagementError as error:
            if not (everywhere and error.code == "not_found"):
                self.events.emit(admin_action(request, user, False, str(error)))
            raise
        if isinstance(result, defer.Deferred):  # an action that takes a while (ha_failback)
            def failed(failure):
                if failure.check(ManagementError):
                    self.events.emit(admin_action(request, user, False, str(failure.value)))
                return failure

            return result.addCallbacks(lambda done: self._record(request, user, done), failed)
        return self._record(request, user, result)

    def _record(self, request: Request, user: str, result: Any) -> Any:
        ok, detail = outcome(action_of(request), result)
        self.events.emit(admin_action(request, user, ok, detail))
        return result

    def _journeys(self) -> JourneyStore:
        if self.journeys is None:
            raise ManagementError("conflict", "this node records no journeys ([journeys] enabled = false)",
                                  self.node_id)
        return self.journeys

    def answer_routed(self, body: dict, origin: str) -> dict:
        """A request another node routed here (it checked the permissions)."""
        try:
            if not isinstance(body, dict) or "request" not in body:
                raise ManagementError("bad_request", "a routed request needs a request and a user")
            request = decode_request(msgspec.json.encode(body["request"]))
            if action_of(request) == "ha_failback":
                raise ManagementError("bad_request", "ha_failback is answered by the serving member itself: ask it "
                                                     "directly (meshgate ha failback --stomp HOST:PORT)")
            result = self._answer_here(request, str(body.get("user", "?")), bool(body.get("everywhere")))
            return {"result": msgspec.to_builtins(result)}
        except ManagementError as error:
            return {"error": {"code": error.code, "message": str(error), "node": error.node or self.node_id}}

    # -- which nodes ------------------------------------------------------------------------

    def _targets(self, node: str | None) -> list[str]:
        if node is None:
            return [self.node_id]
        if node == ALL:
            if self.mesh is None:
                return [self.node_id]
            topology = self.mesh.topology
            topology.refresh_own()
            # A node that scaled down and is gone is no one to ask.
            return sorted(node_id for node_id in topology.entries
                          if not topology.is_leaving(node_id) or topology.route(node_id) is not None)
        return [self._resolve(node)]

    def _resolve(self, node: str) -> str:
        """A node id from an id, a name or a unique prefix of an id."""
        known = {self.node_id: self.name}
        if self.mesh is not None:
            known.update((n, s.node.name) for n, s in ((n, e.summary) for n, e in self.mesh.topology.entries.items()))
            departed = self.mesh.topology.departed
            if node in departed or any(s.node.name == node for s in departed.values()):
                raise ManagementError("unreachable", f"node {node} is down", node)
        if node in known:
            return node
        by_name = [node_id for node_id, name in known.items() if name == node]
        by_prefix = [node_id for node_id in known if len(node) >= 4 and node_id.startswith(node)]
        for matches in (by_name, by_prefix):
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise ManagementError("bad_request", f"{node!r} names {len(matches)} nodes; give the node id")
        raise ManagementError("not_found", f"no node {node!r} in the mesh as this node sees it (meshgate nodes "
                                           "lists them)")

    def _nodes(self, fresh: bool) -> defer.Deferred:
        """Every node, asked afresh; those that do not answer from the gossiped view."""
        if self.mesh is None:
            return defer.succeed(Reply(action="nodes", result=ClusterView(
                reporter=self.node_id, taken_at=self.state.clock.seconds(), nodes=[self.state.summary()])))
        view = self.mesh.topology.view()
        up = [summary.node.id for summary in view if summary.node.state != "down" and fresh]
        asked = [self.ask(node_id, Summary(), "?") for node_id in up]

        def gather(outcomes: list) -> Reply:
            fresh = {node_id: value for (ok, value), node_id in zip(outcomes, up, strict=True) if ok}
            nodes = []
            for summary in view:
                answer = fresh.get(summary.node.id)
                if answer is None:
                    nodes.append(summary)
                else:
                    nodes.append(answer if not isinstance(answer, dict) else
                                 msgspec.convert(answer, type(summary)))
            nodes.sort(key=lambda s: (s.node.name, s.node.id))
            return Reply(action="nodes", result=ClusterView(reporter=self.node_id,
                                                            taken_at=self.state.clock.seconds(), nodes=nodes))

        return defer.DeferredList(asked, consumeErrors=True).addCallback(gather)
