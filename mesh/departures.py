"""Nodes that leave: this node scaling down (every message handed to another node
before it stops), an administrator moving a queue's messages to a linked node,
a peer that scaled down (LEAVING), and nodes forgotten — by an administrator
(FORGET, passed on to every node) or after ``peer_retention_s`` unheard of."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from twisted.internet import defer, task

from gateway.broker.broker import Broker
from gateway.broker.links import LinkRole, LinkSubscription
from gateway.broker.message import QUEUE
from gateway.broker.queue import CLIENT_INDIVIDUAL, Subscription
from gateway.broker.vhosts import VirtualHosts
from mesh.custody import Custody, RecentWindow
from mesh.demand import Demand
from mesh.forwarding import open_vhost
from mesh.identity import Identity
from mesh.peers import LINK_WINDOW, Peer, PeerTable
from mesh.settings import Clock, MeshSettings
from mesh.topology import Topology
from mesh.wire import DURABLE, FORGET, DurableSubscription, Forget, FrameTable, FrameType, LinkHandover, LinkSender
from model.durations import spoken
from model.events import NodeLeft, ScaleDown
from model.names import DEFAULT_VHOST, quoted

log = logging.getLogger("mesh.node")
LEAVING_SETTLE_S = 0.5  # for the word of nodes scaling down at the same time (gossip is immediate)
_FORGET_WINDOW = 10_000  # FORGET request ids remembered, so one that comes round again is not passed on


class Departures:
    def __init__(self, identity: Identity, config: MeshSettings, vhosts: VirtualHosts, peers: PeerTable,
                 custody: Custody, demand: Demand, topology: Topology, clock: Clock, frames: FrameTable) -> None:
        self.identity = identity
        self.node_id = identity.node_id
        self.config = config
        self.vhosts = vhosts.brokers
        self.peers = peers
        self.linked = peers.linked
        self.custody = custody
        self.demand = demand
        self.topology = topology
        self.clock = clock
        self.events = vhosts.default.events
        self.scaling_down = False
        self._forget_requests = RecentWindow(_FORGET_WINDOW)  # FORGET ids seen lately (they go round the mesh)
        frames.on(FrameType.DURABLE, DURABLE, self.durable_received)
        frames.on_raw(FrameType.LEAVING, self.leaving_received)
        frames.on(FrameType.FORGET, FORGET, self.forget_received)

    # -- this node leaving -----------------------------------------------------------------

    @defer.inlineCallbacks
    def scale_down(self, patience: float = 30.0) -> Any:
        """Hand every queued message to another node (of the same group_name, if
        set) before this one stops; what cannot be handed over stays in the store.

        Nodes told to scale down together (a StatefulSet scaled in by several replicas)
        must not hand their messages to each other: this node says it leaves first, waits
        ``LEAVING_SETTLE_S`` for the others' word, and picks a node that is not leaving."""
        if not self._eligible():
            log.warning("mesh: scale-down found no node to take the messages; they stay in this node's store")
            return
        self.scaling_down = True
        self.demand.frozen = True
        self.topology.leaving.add(self.node_id)
        self.topology.gossip()
        yield task.deferLater(self.clock, LEAVING_SETTLE_S, lambda: None)  # type: ignore[arg-type]
        candidates = self._eligible()
        staying = [peer for peer in candidates if not self.topology.is_leaving(peer.link.peer_id)]
        if not candidates:
            log.warning("mesh: scale-down found no node to take the messages; they stay in this node's store")
            return
        if not staying:
            log.warning("mesh: scale-down: every linked node is leaving too; handing the messages to %s, which "
                        "passes them on if it can", candidates[0].link.peer_name)
        target = (staying or candidates)[0]
        peer_id = target.link.peer_id
        # This node is going: what a peer may hold is handed over too, marked
        # redelivered, rather than left where no one would ever deliver it.
        self.custody.release_doubts()
        for vhost, broker in list(self.vhosts.items()):
            if vhost == DEFAULT_VHOST or target.vhosts:
                self._hand_everything_over(target, vhost, broker)
            elif _held(broker):
                log.warning("mesh: scale-down: %s is of an older release and cannot keep vhost %s; its messages "
                            "stay in this node's store", target.link.peer_name, quoted(vhost))
        waited = 0.0
        while waited < patience and self.linked.get(peer_id) is target and self._holding(target):
            yield task.deferLater(self.clock, 0.05, lambda: None)  # type: ignore[arg-type]
            waited += 0.05
            # What arrived meanwhile (a node leaving at the same time that chose this one) goes on too.
            for vhost, broker in list(self.vhosts.items()):
                if vhost == DEFAULT_VHOST or target.vhosts:
                    self._hand_everything_over(target, vhost, broker)
        left = sum(_held(broker) for broker in self.vhosts.values())
        self.events.emit(ScaleDown(target=peer_id, left=left))
        if left:
            log.warning("mesh: scale-down left %d message(s) in this node's store", left)
            return
        log.info("mesh: scaled down: every message handed to %s", target.link.peer_name)
        # Peers would otherwise wait for this node after their next restart, and
        # keep duplicate markers for messages it will never resend.
        for peer in self.linked.values():
            peer.link.send_control(FrameType.LEAVING)

    def _eligible(self) -> list[Peer]:
        """The linked nodes that may take this node's messages: of its group_name, if set;
        a node of an older release (it can take "/" alone) after those that know vhosts."""
        group = self.config.group_name
        return sorted((p for p in self.linked.values() if not group or p.hello.group == group),
                      key=lambda p: not p.vhosts)

    def _hand_everything_over(self, target: Peer, vhost: str, broker: Broker) -> None:
        """Every queue and durable subscription of the vhost drains to the target."""
        peer_id = target.link.peer_id
        channel = target.channels.get(vhost) or open_vhost(target, vhost, broker, self.node_id)
        for name, queue in list(broker.queues.items()):
            if not len(queue) or name in channel.queue_subs:
                continue
            channel.queue_subs[name] = channel.session.subscribe(
                target.subscription_id(name), QUEUE, name, CLIENT_INDIVIDUAL, LINK_WINDOW, None,
                link=LinkSubscription(peer_id, LinkRole.HANDED_OVER))
        for name, binding in list(broker.bindings.items()):
            if not binding.durable or not len(binding.queue) or binding.peer == peer_id or name in channel.durable_subs:
                continue
            if "d:" + name in channel.session.subscriptions:
                continue  # handed over already (this runs again while the node waits): its subscription drains it
            spec: DurableSubscription | LinkHandover
            if binding.peer is None:
                spec = DurableSubscription(name, binding.pattern, binding.selector_text, vhost)
            elif binding.peer in self.linked:
                continue  # its own link is up: it drains there
            else:
                # Kept for a peer whose link is down: the target keeps it for that peer now.
                spec = LinkHandover(name=name, link=binding.peer, patterns=broker.links.patterns[binding.peer],
                                    vhost=vhost)
            target.link.send_control(FrameType.DURABLE, spec)
            broker.links.attach_durable(channel.session, "d:" + name, binding, LINK_WINDOW, peer_id,
                                        LinkRole.HANDED_OVER)
        for queue in broker.queues.values():
            queue.mesh.remote_dispatch = True
            queue.dispatch()

    def _holding(self, target: Peer) -> bool:
        """Whether this node still holds what it is handing the target."""
        return any(_held(broker) for vhost, broker in self.vhosts.items()
                   if vhost == DEFAULT_VHOST or target.vhosts)

    def hand_over(self, peer_id: str, queue_name: str, count: int | None = None, vhost: str = DEFAULT_VHOST) -> int:
        """Move up to ``count`` waiting messages of a queue to a linked node, with
        custody as for any forward: each leaves this node once the peer has it.
        There they follow consumers as any message does. A queue of another vhost
        than "/" moves only to a node that knows vhosts."""
        peer = self.linked.get(peer_id)
        broker = self.vhosts.get(vhost)
        queue = None if broker is None else broker.queues.get(queue_name)
        if peer is None or broker is None or queue is None or (vhost != DEFAULT_VHOST and not peer.vhosts):
            return 0
        messages = queue.take(count)
        if not messages:
            return 0
        session = (peer.channels.get(vhost) or open_vhost(peer, vhost, broker, self.node_id)).session
        # A subscription with no window: dispatch never gives it anything; these go by hand.
        sub = Subscription(session, peer.subscription_id(queue_name), queue, CLIENT_INDIVIDUAL, 0, None)
        # May go where it came from: an administrator sends it there.
        sub.link = LinkSubscription(peer_id, LinkRole.HANDED_OVER, may_revisit=True)
        queue.add_consumer(sub)
        session.subscriptions[sub.id] = sub
        for message in messages:
            session.deliver(sub, message)
        peer.retiring.add(sub)  # unsubscribed once the peer has confirmed them all
        return len(messages)

    def durable_received(self, link: LinkSender, spec: DurableSubscription | LinkHandover) -> None:
        """A peer scaling down hands this node a durable subscription's backlog (or a
        topic queue it kept for a peer whose link is down): it is made here first."""
        broker = self.vhosts.get(spec.vhost)
        if broker is None:  # its messages get BUSY: they stay with the sender
            log.warning("mesh: %s hands over durable subscription %s of vhost %s, which this node does not have",
                        link.peer_name, quoted(spec.name), quoted(spec.vhost))
        elif isinstance(spec, LinkHandover):
            broker.links.bind(spec.link, spec.patterns)
        else:
            broker.links.ensure_durable(spec.name, spec.topic, spec.selector)

    # -- other nodes leaving ---------------------------------------------------------------

    def leaving_received(self, link: LinkSender, payload: bytes) -> None:
        """The peer scaled down and holds nothing: it will not resend, nor hold
        anything of ours after this node restarts."""
        log.info("mesh: %s scaled down and left the mesh", link.peer_name)
        self.topology.node_leaving(link.peer_id, link.peer_name)
        self.custody.stop_counting_on(link.peer_id)

    def forget(self, node_id: str) -> str | None:
        """An administrator says a node crashed and will not come back: stop
        waiting for it, release its duplicate markers, drop the topic messages kept
        for it, and tell every node. Returns why not, if it cannot be forgotten."""
        if node_id == self.node_id:
            return "a node cannot forget itself"
        if node_id in self.linked:
            return f"node {node_id} is linked with this node; stop it before forgetting it"
        ago = self.topology.heard_ago(node_id)
        if ago is not None:
            return (f"node {node_id} is still in the mesh (heard of {ago:.0f} s ago); a node is dropped "
                    f"{self.topology.expiry():.0f} s after it was last heard of")
        self._forget(node_id, str(uuid.uuid4()), None)
        return None

    def forget_departed(self) -> list[str]:
        """Forget, as ``meshgate forget`` would, every node this node has linked with
        that no node has heard of for ``peer_retention_s``: what is kept for it (a
        topic backlog, markers, waits) would otherwise grow or wait forever. The
        clock runs from when the last link with it went (kept in the store, so a
        restart does not reset it), or from this node's start when it was linked
        as this node stopped."""
        retention, now = self.config.peer_retention_s, self.clock.seconds()
        forgotten = []
        for peer_id in list(self.custody.known_peers):
            ago = self.topology.heard_ago(peer_id)
            if peer_id in self.linked or (ago is not None and ago < retention):
                continue
            since = max(self.custody.last_linked(peer_id) or self.identity.started_at,
                        self.peers.link_down_since.get(peer_id, 0.0))
            if now - since < retention:
                continue
            departed = self.topology.departed.get(peer_id)
            name = departed.node.name if departed is not None else peer_id
            reason = f"not heard of for {spoken(now - since)} (mesh.peer_retention_s); forgotten"
            log.warning("mesh: node %s %s, with what was kept for it", name, reason)
            self.events.emit(NodeLeft(subject=peer_id, name=name, reason=reason))
            self._forget(peer_id, str(uuid.uuid4()), None)
            forgotten.append(peer_id)
        return forgotten

    def forget_received(self, link: LinkSender, request: Forget) -> None:
        self._forget(request.node, request.id, link.peer_id)

    def _forget(self, node_id: str, request_id: str, source: str | None) -> None:
        if request_id in self._forget_requests:
            return  # it came round another way
        self._forget_requests.add(request_id)
        request = Forget(node_id, request_id)
        for peer_id, peer in self.linked.items():
            if peer_id != source:
                peer.link.send_control(FrameType.FORGET, request)
        if node_id in self.linked:
            log.warning("mesh: told to forget %s, which is linked with this node: kept", node_id)
            return
        log.warning("mesh: forgetting node %s: it is not waited for, and what was kept for it is dropped", node_id)
        self.peers.forget(node_id)  # with its peer record: a node forgotten may come back at any epoch
        self.custody.stop_counting_on(node_id)
        for broker in self.vhosts.values():
            broker.links.unbind(node_id)
        self.topology.forget(node_id)


def _held(broker: Broker) -> int:
    """The messages a vhost still holds here: queued, in flight, or in doubt."""
    durable = [b.queue for b in broker.bindings.values() if b.durable]
    return sum(len(q) + q.inflight + q.mesh.in_doubt for q in (*broker.queues.values(), *durable))
