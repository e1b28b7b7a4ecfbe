"""Consumer demand: what this node advertises to each neighbour, the link
subscriptions that follow what neighbours advertise, and when a backlog may
follow consumers elsewhere (redistribution holds)."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.broker.broker import Broker
from gateway.broker.links import LinkRole, LinkSubscription
from gateway.broker.message import QUEUE, TOPIC
from gateway.broker.queue import CLIENT_INDIVIDUAL, Queue, Subscription
from mesh.peers import LINK_WINDOW, Peer, PeerTable
from mesh.settings import Clock, MeshSettings
from mesh.wire import DEMAND, DemandRecord, FrameTable, FrameType, LinkSender
from model.definitions import DURABLE_SUBSCRIPTION


class Demand:
    def __init__(self, node_id: str, config: MeshSettings, broker: Broker, peers: PeerTable, clock: Clock,
                 frames: FrameTable) -> None:
        self.node_id = node_id
        self.config = config
        self.broker = broker
        self.linked = peers.linked
        self.clock = clock
        # Scale-down: the links keep the subscriptions they have (they take everything away); none retires.
        self.frozen = False
        self._advertise_scheduled = False
        self._had_consumers: set[str] = set()
        self._holds: dict[str, Any] = {}
        self._released: set[str] = set()  # queues whose hold ran out: their backlog may follow consumers
        broker.watch_consumers(self.consumers_changed)
        broker.queue_deleted_watchers.append(self.queue_deleted)
        frames.on(FrameType.DEMAND, DEMAND, self.demand_received)
        peers.watch(up=self.peer_up, down=self.peer_down)

    def peer_up(self, peer: Peer) -> None:
        self.schedule_advertise()

    def peer_down(self, peer: Peer, lost: bool) -> None:
        if lost:
            self.schedule_advertise()

    # -- advertising ----------------------------------------------------------------------

    def schedule_advertise(self) -> None:
        if not self._advertise_scheduled:
            self._advertise_scheduled = True
            self.clock.callLater(0, self._advertise)

    def local_demand(self) -> list[DemandRecord]:
        carries = self.config.carries
        records = []
        node_id = self.node_id
        strict = self.config.message_load_balancing == "STRICT"
        for name, queue in self.broker.queues.items():
            if (queue.consumers or strict) and carries("/queue/" + name):
                records.append(DemandRecord(kind=QUEUE, address=name, selector=_any_of(queue.consumers),
                                            consumers=len(queue.consumers), path=[node_id]))
        patterns: dict[str, int] = {}
        for name, binding in self.broker.bindings.items():
            if binding.peer is not None or binding.active is None or not carries("/topic/" + binding.pattern):
                continue
            if binding.durable:
                # Every node holds a part of it (what was published there): the parts follow its subscriber.
                records.append(DemandRecord(kind=DURABLE_SUBSCRIPTION, address=name, path=[node_id]))
            else:
                patterns[binding.pattern] = patterns.get(binding.pattern, 0) + 1
        for pattern, count in patterns.items():
            records.append(DemandRecord(kind=TOPIC, address=pattern, consumers=count, path=[node_id]))
        return records

    def _advertise(self) -> None:
        self._advertise_scheduled = False
        local = self.local_demand()
        max_hops = self.config.max_hops
        node_id = self.node_id
        peers = self.linked
        for peer_id, peer in peers.items():
            records = list(local)
            # Demand crosses every link there is (allow_direct_connections_only limits
            # whom a node dials, not what its links carry): else an explicit chain strands.
            for other_id, other in peers.items():
                if other_id == peer_id:
                    continue
                for record in other.demand:
                    path = record.path
                    if peer_id in path or node_id in path or len(path) >= max_hops:
                        continue
                    records.append(msgspec.structs.replace(record, path=[*path, node_id]))
            if records != peer.advertised:  # unchanged demand is not news: no ping-pong between nodes
                peer.advertised = records
                peer.link.send_control(FrameType.DEMAND, records)

    # -- following what neighbours advertise ----------------------------------------------

    def demand_received(self, link: LinkSender, records: list[DemandRecord]) -> None:
        peer = self.linked.get(link.peer_id)
        if peer is None or peer.link is not link:
            return
        services = self.broker.services  # never a queue here: demand for one is ignored
        node_id = self.node_id
        demand = [r for r in records if node_id not in r.path and not (r.kind == QUEUE and r.address in services)]
        if demand == peer.demand:
            return
        peer.demand = demand
        self._reconcile(link.peer_id, peer)
        self.schedule_advertise()

    def _reconcile(self, peer_id: str, peer: Peer) -> None:
        """Make the link's subscriptions match the demand learned over it."""
        config = self.config
        wanted: dict[str, list[str | None]] = {}
        patterns = []
        for record in peer.demand:
            if record.kind == QUEUE:
                wanted.setdefault(record.address, []).append(record.selector)
            elif record.kind == TOPIC:
                patterns.append(record.address)
        session = peer.session
        forwarding = self._forwards_to(peer)
        for address, sub in list(peer.queue_subs.items()):
            selector = _combine(wanted.get(address, []))
            if self.frozen:
                break
            if address not in wanted or sub.selector_text != selector:
                del peer.queue_subs[address]
                self.retire(peer, sub)
        direct = {r.address for r in peer.demand if r.kind == QUEUE and r.path == [peer_id]}
        weights: dict[str, int] = {}
        for record in peer.demand:
            if record.kind == QUEUE:
                weights[record.address] = weights.get(record.address, 0) + max(1, record.consumers)
        for address, selectors in wanted.items():
            if address in peer.queue_subs:
                link = peer.queue_subs[address].link
                if link is not None and link.may_revisit != (address in direct):
                    link.may_revisit = address in direct
                    peer.queue_subs[address].queue.dispatch()
            elif forwarding:
                queue = self.broker.queue(address)
                if config.message_load_balancing == "OFF_WITH_REDISTRIBUTION":
                    # Nothing is forwarded on send: a backlog moves only by redistribution.
                    if queue.consumers:
                        queue.mesh.remote_dispatch = False
                    elif queue.mesh.remote_dispatch and address not in self._holds and address not in self._released:
                        self._hold(address, queue)
                if len(queue) and not queue.consumers and queue.mesh.remote_dispatch:
                    queue.mesh.backlog = len(queue)  # consumers appeared elsewhere: what waits here follows them
                peer.queue_subs[address] = session.subscribe(
                    peer.subscription_id(address), QUEUE, address, CLIENT_INDIVIDUAL, LINK_WINDOW,
                    _combine(selectors), link=LinkSubscription(peer_id, LinkRole.DEMAND, may_revisit=address in direct),
                )
            following = peer.queue_subs.get(address)
            if following is not None and following.link is not None:
                following.link.weight = weights.get(address, 1)
        self._reconcile_durables(peer_id, peer, forwarding)
        patterns = sorted(set(patterns))
        links = self.broker.links
        if patterns and forwarding:
            binding = links.binding(peer_id)
            if binding is None or links.patterns.get(peer_id) != patterns:
                binding = links.bind(peer_id, patterns)
            if peer.topic_sub is None:
                peer.topic_sub = links.attach_topics(session, binding, LINK_WINDOW)
        elif not patterns:
            if peer.topic_sub is not None:
                session.subscriptions.pop(peer.topic_sub.id, None)
                peer.topic_sub = None
            links.unbind(peer_id)

    def _reconcile_durables(self, peer_id: str, peer: Peer, forwarding: bool) -> None:
        """This node's part of a durable subscription goes to a peer whose demand says
        the subscriber is there or beyond, while it has no subscriber here."""
        wanted = {r.address for r in peer.demand if r.kind == DURABLE_SUBSCRIPTION}
        bindings = self.broker.bindings
        for name, sub in list(peer.durable_subs.items()):
            binding = bindings.get(name)
            if name not in wanted or binding is None or binding.queue is not sub.queue or binding.active is not None:
                del peer.durable_subs[name]
                self.retire(peer, sub)
        if not forwarding or self.frozen:
            return
        for name in wanted - peer.durable_subs.keys():
            binding = bindings.get(name)
            if binding is None or not binding.durable or binding.peer is not None or binding.active is not None:
                continue
            sub = self.broker.links.attach_durable(peer.session, "d:" + name, binding, LINK_WINDOW, peer_id,
                                                   LinkRole.DURABLE)
            peer.durable_subs[name] = sub
            binding.queue.dispatch()

    def durable_subscriber_at(self, name: str) -> str | None:
        """The node where a durable subscription's subscriber is connected, as the
        demand heard from the peers says (None: none heard of)."""
        for peer in self.linked.values():
            for record in peer.demand:
                if record.kind == DURABLE_SUBSCRIPTION and record.address == name:
                    return record.path[0]
        return None

    def durables_changed(self) -> None:
        """Durable subscriptions came, went or changed, or a subscriber attached or left."""
        for peer_id, peer in self.linked.items():
            self._reconcile_durables(peer_id, peer, self._forwards_to(peer))

    def _forwards_to(self, peer: Peer) -> bool:
        # Without duplex, traffic flows only over links this node dialled.
        return self.config.message_load_balancing != "OFF" and (self.config.duplex or peer.link.dialled)

    def queue_deleted(self, name: str) -> None:
        """An administrator deleted the queue: its link subscriptions held the old
        queue; follow the same demand on the new one (made when it is next used)."""
        self._cancel_hold(name)
        self._released.discard(name)
        self._had_consumers.discard(name)
        for peer_id, peer in self.linked.items():
            sub = peer.queue_subs.pop(name, None)
            if sub is not None:
                self.retire(peer, sub)
                self._reconcile(peer_id, peer)

    def retire(self, peer: Peer, sub: Subscription) -> None:
        """Demand over the link went away: take nothing new, but let what is in
        flight be confirmed there rather than come back and go out twice."""
        if not sub.inflight:
            peer.session.unsubscribe(sub.id)
            return
        sub.prefetch = 0
        peer.retiring.add(sub)

    # -- redistribution -------------------------------------------------------------------

    def consumers_changed(self) -> None:
        self.schedule_advertise()
        self.durables_changed()
        mode = self.config.message_load_balancing
        for name, queue in self.broker.queues.items():
            has = bool(queue.consumers)
            if has:
                queue.mesh.backlog = 0  # local consumers take the backlog: nothing to redistribute
            if mode == "OFF_WITH_REDISTRIBUTION":
                # Nothing leaves while local consumers exist; once they are gone the
                # backlog follows consumers elsewhere, after a fresh delay.
                if has:
                    queue.mesh.remote_dispatch = False
                    self._cancel_hold(name)
                    self._released.discard(name)
                    self._had_consumers.add(name)
                elif name in self._had_consumers:
                    self._had_consumers.discard(name)
                    self._hold(name, queue)
            elif has:
                self._had_consumers.add(name)
                queue.mesh.remote_dispatch = mode != "STRICT"
                self._cancel_hold(name)
            elif name in self._had_consumers and mode != "STRICT":
                self._had_consumers.discard(name)
                self._hold(name, queue)

    def _hold(self, name: str, queue: Queue) -> None:
        """The last local consumer left: keep the backlog for redistribution_delay_ms
        (-1: keep it) before letting it follow consumers on other nodes."""
        delay = self.config.redistribution_delay_for("/queue/" + name)
        if delay == 0:
            self._redistribute(queue)
            return
        queue.mesh.remote_dispatch = False
        if delay > 0:
            self._holds[name] = self.clock.callLater(delay / 1000.0, self._release_hold, name)

    def _release_hold(self, name: str) -> None:
        self._holds.pop(name, None)
        self._released.add(name)
        queue = self.broker.queues.get(name)
        if queue is not None and not queue.consumers:
            self._redistribute(queue)

    @staticmethod
    def _redistribute(queue: Queue) -> None:
        queue.mesh.remote_dispatch = True
        queue.mesh.backlog = len(queue)
        queue.dispatch()

    def _cancel_hold(self, name: str) -> None:
        call = self._holds.pop(name, None)
        if call is not None and call.active():
            call.cancel()


def _any_of(subscriptions: list[Subscription]) -> str | None:
    return _combine([sub.selector_text for sub in subscriptions])


def _combine(selectors: list[str | None]) -> str | None:
    """A link subscription takes what any consumer beyond it would take."""
    present = [s for s in selectors if s]
    if not selectors or len(present) < len(selectors):
        return None
    unique = sorted(set(present))
    return unique[0] if len(unique) == 1 else " OR ".join(f"({s})" for s in unique)
