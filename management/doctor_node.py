"""The stuck-message doctor on a node (docs/doctor.md): the ``node_facts`` answer,
the sampler that tells how long consumers have held unacked deliveries, and the
``diagnosis`` request, which gathers every node's facts and runs
management.doctor.diagnose.

Nothing here is on the per-message path: facts are read when asked, and the
sampler walks the consumers every ``sample_s`` ([doctor], ``SAMPLE_S`` by default;
O(subscriptions), not messages)."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from twisted.internet import defer, task

from gateway.auth import destination_matcher
from gateway.broker.producer_pauses import MAX_DISK_USAGE, MEMORY_LIMIT, STORE_LIMIT
from management.doctor import DEFAULT_THRESHOLDS, Thresholds, diagnose
from management.doctor_history import WINDOW_S, DeadLetterWindow, DetachedDurables, StalledConsumers
from model.diagnosis import (
    ConsumerFacts,
    DiagnosisReport,
    MeshSettingsFacts,
    NodeFactSheet,
    PeerFacts,
    ProducerFacts,
    QueueFacts,
    RedistributionRule,
    UnansweredNode,
)
from model.names import DEFAULT_VHOST
from model.requests import Diagnosis, NodeFacts, Reply, Request

if TYPE_CHECKING:
    from gateway.broker.broker import Broker
    from management.state import LocalState

log = logging.getLogger(__name__)

# Seconds between two looks at the consumers' oldest unacked delivery (the default of
# [doctor] sample_s): an age is known to within this much (a lower bound), at the cost
# of one walk over the subscriptions.
SAMPLE_S = 10.0

_SubscriptionKey = tuple[str, str, str]  # (vhost, session name, subscription id)


class UnackedSampler:
    """Remembers, per client subscription, which delivery was at the head of its unacked
    ones (the oldest: ``Subscription.inflight`` is in delivery order) and since when it
    was seen there. The same head seen later has been unacked at least that long; no
    timestamp is kept per delivery."""

    def __init__(self, brokers, clock, window_s: float = WINDOW_S) -> None:
        self._brokers = brokers  # () -> {vhost: Broker}
        self._clock = clock
        self._heads: dict[_SubscriptionKey, tuple[str, float]] = {}
        self._loop: task.LoopingCall | None = None
        # The other histories the doctor keeps, sampled on the same tick (doctor_history.py).
        self.dead_letters = DeadLetterWindow(window_s)
        self.durables = DetachedDurables()
        self.stalls = StalledConsumers()

    def start(self, period: float = SAMPLE_S) -> None:
        loop = self._loop = task.LoopingCall(self._sample_and_go_on)
        loop.clock = self._clock
        loop.start(period, now=True)

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    @property
    def period(self) -> float:
        return float(self._loop.interval or 0.0) if self._loop is not None and self._loop.running else 0.0

    def _sample_and_go_on(self) -> None:
        # A LoopingCall stops at its call's first exception: a bug here must cost one
        # sample, not every later one.
        try:
            self.sample()
            now, brokers = self._clock.seconds(), self._brokers()
            self.dead_letters.sample(now, brokers)
            self.durables.sample(now, brokers)
            self.stalls.sample(now, brokers)
        except Exception:
            log.exception("doctor: sampling failed")

    def sample(self) -> None:
        now = self._clock.seconds()
        heads: dict[_SubscriptionKey, tuple[str, float]] = {}
        for vhost, broker in self._brokers().items():
            for session_name, session in broker.sessions.items():
                if session.connection is None:
                    continue  # a mesh link's session: its deliveries wait for STORED, custody's business
                for sub_id, sub in session.subscriptions.items():
                    if not sub.inflight:
                        continue
                    key = (vhost, session_name, sub_id)
                    head = next(iter(sub.inflight))
                    seen = self._heads.get(key)
                    heads[key] = seen if seen is not None and seen[0] == head else (head, now)
        self._heads = heads  # subscriptions gone, or with nothing unacked, drop out

    def unacked_for(self, key: _SubscriptionKey, now: float) -> float | None:
        seen = self._heads.get(key)
        return None if seen is None else now - seen[1]


class DoctorFacts:
    """This node's ``node_facts`` answer. ``window_s``: how far back dead-letter growth is
    judged ([doctor] window_s); the sampler's period is its start's ([doctor] sample_s)."""

    def __init__(self, state: LocalState, window_s: float = WINDOW_S) -> None:
        self.state = state
        self.sampler = UnackedSampler(self._brokers, state.clock, window_s)

    def _brokers(self) -> dict[str, Broker]:
        state = self.state
        return dict(state.vhosts.brokers) if state.vhosts is not None else {DEFAULT_VHOST: state.broker}

    def collect(self) -> NodeFactSheet:
        state = self.state
        now = state.clock.seconds()
        sampler, brokers = self.sampler, self._brokers()
        # An ask sees the heads, the detached durables and the stalls as they are now, ages as the
        # sampler kept them.
        sampler.sample()
        sampler.durables.sample(now, brokers)
        sampler.stalls.sample(now, brokers)
        return NodeFactSheet(node=state.node_id, name=state.name, taken_at=now, mesh=self._settings(),
                             queues=self._queues(), peers=self._peers(now), consumers=self._consumers(now),
                             sample_s=sampler.period, producers=self._producers(now),
                             dead_letters=sampler.dead_letters.facts(now, brokers),
                             durables=sampler.durables.facts(now, brokers, self._subscribed_elsewhere),
                             stalled=sampler.stalls.facts(now, brokers))

    def _subscribed_elsewhere(self, vhost: str, name: str) -> bool:
        mesh = self.state.mesh
        return mesh is not None and mesh.demand.durable_subscriber_at(name, vhost) is not None

    def _settings(self) -> MeshSettingsFacts | None:
        mesh = self.state.mesh
        if mesh is None:
            return None
        config: Any = mesh.config  # meshgate.config.MeshConfig: more than mesh.settings.MeshSettings says
        return MeshSettingsFacts(
            max_hops=config.max_hops, message_load_balancing=config.message_load_balancing, duplex=config.duplex,
            redistribution_delay_ms=getattr(config, "redistribution_delay_ms", 0),
            redistribution=[RedistributionRule(destination=rule.destination, delay_ms=rule.delay_ms)
                            for rule in getattr(config, "redistribution", ())],
            addresses=list(getattr(config, "addresses", ())), in_doubt_timeout_ms=config.in_doubt_timeout_ms,
            peer_retention_s=config.peer_retention_s, reconnect_attempts=config.reconnect_attempts)

    def _queues(self) -> list[QueueFacts]:
        """Queues that hold or consume something: idle empty ones (most of them) explain nothing."""
        state, mesh = self.state, self.state.mesh
        config: Any = mesh.config if mesh is not None else None
        facts = []
        for vhost, broker in self._brokers().items():
            for partial in state.queues(vhost=vhost):
                if not (partial.depth or partial.consumers or partial.in_doubt or partial.in_flight
                        or partial.forwarding):
                    continue
                queue = broker.queues.get(partial.name)
                destination = "/queue/" + partial.name
                delay, key = _redistribution_delay(config, destination)
                facts.append(QueueFacts(
                    vhost=vhost, name=partial.name, depth=partial.depth, consumers=partial.consumers,
                    in_flight=partial.in_flight, in_doubt=partial.in_doubt, forwarding=partial.forwarding,
                    oldest_age_ms=partial.oldest_age_ms, remote_demand=partial.remote_demand,
                    remote_dispatch=queue.mesh.remote_dispatch if queue is not None else True,
                    hold_pending=mesh is not None and mesh.demand.hold_pending(vhost, partial.name),
                    redistribution_delay_ms=delay, redistribution_key=key,
                    carried=config.carries(destination) if config is not None else True))
        return facts

    def _peers(self, now: float) -> list[PeerFacts]:
        mesh = self.state.mesh
        if mesh is None:
            return []
        custody, topology = mesh.custody, mesh.topology
        facts = []
        for link in self.state.links():
            peer = mesh.peers.get(link.peer)
            waiting_since = custody.waiting_since(link.peer)
            facts.append(PeerFacts(
                peer=link.peer, peer_name=link.peer_name, state=link.state, for_s=max(0.0, now - link.since),
                dialled=link.dialled, in_doubt=link.in_doubt, backlog=link.backlog,
                in_doubt_for_s=None if waiting_since is None else max(0.0, now - waiting_since),
                markers=len(custody.markers.get(link.peer, ())), departed=link.peer in topology.departed,
                heard_ago_s=None if link.state == "up" else topology.heard_ago(link.peer),
                busy_for_s=max(0.0, now - peer.busy_since) if peer is not None and peer.busy else None))
        return facts

    def _consumers(self, now: float) -> list[ConsumerFacts]:
        facts = []
        for vhost, broker in self._brokers().items():
            for session_name, session in broker.sessions.items():
                info = session.connection
                if info is None:
                    continue
                for sub_id, sub in session.subscriptions.items():
                    if sub.inflight:
                        facts.append(ConsumerFacts(
                            connection=info.name or session_name, subscription=sub_id, vhost=vhost,
                            queue=sub.queue.name, protocol=info.protocol, unacked=len(sub.inflight),
                            unacked_for_s=self.sampler.unacked_for((vhost, session_name, sub_id), now)))
        return facts


    def _producers(self, now: float) -> list[ProducerFacts]:
        """The connections flow control pauses now, with how full their limit is."""
        state = self.state
        broker = state.broker  # the memory and the store are every vhost's
        # The node's own limits, read now; a vhost's max_messages only its connections know.
        node_limits = {MEMORY_LIMIT: f"the memory holds {broker.memory_used} of {broker.memory_limit} bytes",
                       STORE_LIMIT: broker.store.blocked or "", MAX_DISK_USAGE: broker.store.blocked or ""}
        facts = []
        for vhost, vhost_broker in self._brokers().items():
            for pause in list(vhost_broker.paused_producers.values()):
                key = pause.limit_key
                limit_state = node_limits.get(key) or (pause.limit_state() if pause.limit_state is not None else "")
                facts.append(ProducerFacts(
                    connection=pause.connection_name() or "(connecting)", protocol=pause.protocol,
                    vhost=pause.vhost or vhost, limit_key=key, limit_state=limit_state,
                    paused_for_s=max(0.0, now - pause.since)))
        return facts


def _redistribution_delay(config: Any, destination: str) -> tuple[int, str]:
    """The delay in force for ``destination`` and the key that sets it (as
    MeshConfig.redistribution_delay_for, naming the rule)."""
    if config is None:
        return 0, "mesh.redistribution_delay_ms"
    for i, rule in enumerate(getattr(config, "redistribution", ())):
        if destination_matcher(rule.destination)(destination):
            return rule.delay_ms, f"mesh.redistribution[{i}].delay_ms ({rule.destination})"
    return getattr(config, "redistribution_delay_ms", 0), "mesh.redistribution_delay_ms"


def thresholds_of(request: Diagnosis, defaults: Thresholds = DEFAULT_THRESHOLDS) -> Thresholds:
    """The request's thresholds; those it does not give are ``defaults`` (the node's ``[doctor]``)."""
    if request.older_than_s is not None:
        age = request.older_than_s
        return Thresholds(waiting_s=age, in_doubt_s=age, unacked_s=age, paused_s=age, durable_gone_s=age,
                          stalled_s=age)
    given = {name: value for name, value in (("waiting_s", request.waiting_s), ("in_doubt_s", request.in_doubt_s),
                                             ("unacked_s", request.unacked_s)) if value is not None}
    return dataclasses.replace(defaults, **given)


class AsksNodes(Protocol):
    """What the diagnosis needs of the node it is asked at: to ask any node, and names."""

    node_id: str

    def ask(self, node_id: str, request: Request, user: str) -> defer.Deferred: ...

    def name_of(self, node_id: str) -> str: ...


def answer_diagnosis(nodes: AsksNodes, now: float, thresholds: Thresholds, user: str,
                     targets: list[str]) -> defer.Deferred:
    """Ask every node of ``targets`` (every node of the mesh, this one included) for its
    facts, then diagnose what answered; the nodes that did not answer are listed, and
    are a finding themselves."""
    asked = [nodes.ask(node_id, NodeFacts(), user) for node_id in targets]

    def gathered(outcomes: list) -> Reply:
        sheets: list[NodeFactSheet] = []
        unanswered: list[UnansweredNode] = []
        for (ok, value), node_id in zip(outcomes, targets, strict=True):
            if ok:
                sheets.append(value if isinstance(value, NodeFactSheet) else msgspec.convert(value, NodeFactSheet))
            else:
                unanswered.append(UnansweredNode(node=node_id, name=nodes.name_of(node_id),
                                                 reason=value.getErrorMessage()))
        report = DiagnosisReport(taken_at=now, reporter=nodes.node_id,
                                 findings=diagnose(sheets, thresholds, unanswered),
                                 nodes=[sheet.node for sheet in sheets], unanswered=unanswered)
        return Reply(action="diagnosis", result=report)

    return defer.DeferredList(asked, consumeErrors=True).addCallback(gathered)
