"""Consumer demand: what this node advertises to each neighbour, the link
subscriptions that follow what neighbours advertise, and when a backlog may
follow consumers elsewhere (redistribution holds).

Demand names its vhost ("/" unless said). A peer of link protocol 4 is told the
demand of "/" alone, and what it says is taken as "/"'s: it never gets a link
subscription in another vhost, so no message of one can reach it. Demand of a
vhost this node does not have is not passed on (its messages could not cross
here)."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.broker.broker import Broker
from gateway.broker.links import LinkRole, LinkSubscription
from gateway.broker.message import QUEUE, TOPIC
from gateway.broker.queue import CLIENT_INDIVIDUAL, Queue, Subscription
from gateway.broker.vhosts import VirtualHosts
from mesh.forwarding import close_vhost, open_vhost
from mesh.peers import LINK_WINDOW, Peer, PeerTable, PeerVhost
from mesh.settings import Clock, MeshSettings
from mesh.wire import DEMAND, DemandRecord, FrameTable, FrameType, LinkSender
from model.definitions import DURABLE_SUBSCRIPTION
from model.names import DEFAULT_VHOST

QueueKey = tuple[str, str]  # (vhost, queue name)


class Demand:
    def __init__(self, node_id: str, config: MeshSettings, vhosts: VirtualHosts, peers: PeerTable, clock: Clock,
                 frames: FrameTable) -> None:
        self.node_id = node_id
        self.config = config
        self.vhosts = vhosts.brokers
        self.linked = peers.linked
        self.clock = clock
        # Scale-down: the links keep the subscriptions they have (they take everything away); none retires.
        self.frozen = False
        self._advertise_scheduled = False
        self._had_consumers: set[QueueKey] = set()
        self._holds: dict[QueueKey, Any] = {}
        self._released: set[QueueKey] = set()  # queues whose hold ran out: their backlog may follow consumers
        # Queues this node made only to follow a peer's demand: dropped when that demand
        # goes if nothing here used them, so a deleted queue is not left behind.
        self._made_for_demand: set[QueueKey] = set()
        for name, broker in vhosts.brokers.items():
            self._watch(name, broker)
        vhosts.watch(added=self._watch, removed=self.vhost_removed)
        frames.on(FrameType.DEMAND, DEMAND, self.demand_received)
        peers.watch(up=self.peer_up, down=self.peer_down)

    def _watch(self, vhost: str, broker: Broker) -> None:
        broker.watch_consumers(lambda: self.consumers_changed(vhost, broker))
        broker.queue_deleted_watchers.append(lambda name: self.queue_deleted(vhost, name))
        if vhost != DEFAULT_VHOST:
            self.schedule_advertise()  # a peer's demand in it may be followed now, and passed on

    def vhost_removed(self, vhost: str, broker: Broker) -> None:
        """The vhost went here: the links' sessions in it close (what was in flight comes
        back to queues about to go), its holds end, and its demand is no longer passed on."""
        for key in [key for key in self._holds if key[0] == vhost]:
            self._cancel_hold(key)
        self._had_consumers = {key for key in self._had_consumers if key[0] != vhost}
        self._released = {key for key in self._released if key[0] != vhost}
        self._made_for_demand = {key for key in self._made_for_demand if key[0] != vhost}
        for peer in self.linked.values():
            close_vhost(peer, vhost)
        self.schedule_advertise()

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
        records: list[DemandRecord] = []
        for vhost, broker in self.vhosts.items():
            self._local_demand_in(vhost, broker, records)
        return records

    def _local_demand_in(self, vhost: str, broker: Broker, records: list[DemandRecord]) -> None:
        carries = self.config.carries
        node_id = self.node_id
        strict = self.config.message_load_balancing == "STRICT"
        for name, queue in broker.queues.items():
            if (queue.consumers or strict) and carries("/queue/" + name):
                records.append(DemandRecord(kind=QUEUE, address=name, selector=_any_of(queue.consumers),
                                            consumers=len(queue.consumers), path=[node_id], vhost=vhost))
        patterns: dict[str, int] = {}
        for name, binding in broker.bindings.items():
            if binding.peer is not None or binding.active is None or not carries("/topic/" + binding.pattern):
                continue
            if binding.durable:
                # Every node holds a part of it (what was published there): the parts follow its subscriber.
                records.append(DemandRecord(kind=DURABLE_SUBSCRIPTION, address=name, path=[node_id], vhost=vhost))
            else:
                patterns[binding.pattern] = patterns.get(binding.pattern, 0) + 1
        for pattern, count in patterns.items():
            records.append(DemandRecord(kind=TOPIC, address=pattern, consumers=count, path=[node_id], vhost=vhost))

    def _advertise(self) -> None:
        self._advertise_scheduled = False
        local = self.local_demand()
        max_hops = self.config.max_hops
        node_id = self.node_id
        peers = self.linked
        vhosts = self.vhosts
        for peer_id, peer in peers.items():
            every_vhost = peer.vhosts
            records = list(local) if every_vhost else [r for r in local if r.vhost == DEFAULT_VHOST]
            # Demand crosses every link there is (allow_direct_connections_only limits
            # whom a node dials, not what its links carry): else an explicit chain strands.
            for other_id, other in peers.items():
                if other_id == peer_id:
                    continue
                for record in other.demand:
                    path = record.path
                    if peer_id in path or node_id in path or len(path) >= max_hops:
                        continue
                    if record.vhost != DEFAULT_VHOST and not (every_vhost and record.vhost in vhosts):
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
        node_id = self.node_id
        vhosts = self.vhosts
        every_vhost = peer.vhosts  # a peer of an older release speaks of "/" alone, whatever it says
        demand = []
        for record in records:
            vhost = record.vhost
            if node_id in record.path or (vhost != DEFAULT_VHOST and not every_vhost):
                continue
            broker = vhosts.get(vhost)
            # A service is never a queue here: demand for one is ignored.
            if broker is not None and record.kind == QUEUE and record.address in broker.services:
                continue
            demand.append(record)
        if demand == peer.demand:
            return
        peer.demand = demand
        self._reconcile(link.peer_id, peer)
        self.schedule_advertise()

    def _reconcile(self, peer_id: str, peer: Peer) -> None:
        """Make the link's subscriptions match the demand learned over it, vhost by vhost."""
        forwarding = self._forwards_to(peer)
        for channel, broker, demand in self._channels(peer, forwarding):
            self._reconcile_vhost(peer_id, peer, channel, broker, demand, forwarding)

    def _channels(self, peer: Peer, forwarding: bool) -> list[tuple[PeerVhost, Broker, list[DemandRecord]]]:
        """Each vhost the peer is linked in or wants something of, with its demand there;
        the peer's session in a vhost is opened when it first wants something of it."""
        by_vhost: dict[str, list[DemandRecord]] = {name: [] for name in peer.channels}
        for record in peer.demand:
            by_vhost.setdefault(record.vhost, []).append(record)
        found = []
        for name, demand in by_vhost.items():
            broker = self.vhosts.get(name)
            if broker is None:
                continue
            channel = peer.channels.get(name)
            if channel is None:
                if not forwarding or self.frozen:
                    continue
                channel = open_vhost(peer, name, broker, self.node_id)
            found.append((channel, broker, demand))
        return found

    def _reconcile_vhost(self, peer_id: str, peer: Peer, channel: PeerVhost, broker: Broker,
                         demand: list[DemandRecord], forwarding: bool) -> None:
        config = self.config
        vhost = channel.name
        wanted: dict[str, list[str | None]] = {}
        patterns = []
        for record in demand:
            if record.kind == QUEUE:
                wanted.setdefault(record.address, []).append(record.selector)
            elif record.kind == TOPIC:
                patterns.append(record.address)
        session = channel.session
        queue_subs = channel.queue_subs
        for address, sub in list(queue_subs.items()):
            selector = _combine(wanted.get(address, []))
            if self.frozen:
                break
            if address not in wanted or sub.selector_text != selector:
                del queue_subs[address]
                self.retire(peer, sub)
                if address not in wanted:
                    self._drop_if_unused(vhost, broker, address)
        direct = {r.address for r in demand if r.kind == QUEUE and r.path == [peer_id]}
        weights: dict[str, int] = {}
        for record in demand:
            if record.kind == QUEUE:
                weights[record.address] = weights.get(record.address, 0) + max(1, record.consumers)
        for address, selectors in wanted.items():
            if address in queue_subs:
                link = queue_subs[address].link
                if link is not None and link.may_revisit != (address in direct):
                    link.may_revisit = address in direct
                    queue_subs[address].queue.dispatch()
            elif forwarding:
                key = (vhost, address)
                if address not in broker.queues:
                    self._made_for_demand.add(key)
                queue = broker.queue(address)
                if config.message_load_balancing == "OFF_WITH_REDISTRIBUTION":
                    # Nothing is forwarded on send: a backlog moves only by redistribution.
                    if queue.consumers:
                        queue.mesh.remote_dispatch = False
                    elif queue.mesh.remote_dispatch and key not in self._holds and key not in self._released:
                        self._hold(key, queue)
                if len(queue) and not queue.consumers and queue.mesh.remote_dispatch:
                    queue.mesh.backlog = len(queue)  # consumers appeared elsewhere: what waits here follows them
                queue_subs[address] = session.subscribe(
                    peer.subscription_id(address), QUEUE, address, CLIENT_INDIVIDUAL, LINK_WINDOW,
                    _combine(selectors), link=LinkSubscription(peer_id, LinkRole.DEMAND, may_revisit=address in direct),
                )
            following = queue_subs.get(address)
            if following is not None and following.link is not None:
                following.link.weight = weights.get(address, 1)
        self._reconcile_durables(peer, channel, broker, demand, forwarding)
        patterns = sorted(set(patterns))
        links = broker.links
        if patterns and forwarding:
            binding = links.binding(peer_id)
            if binding is None or links.patterns.get(peer_id) != patterns:
                binding = links.bind(peer_id, patterns)
            if channel.topic_sub is None:
                channel.topic_sub = links.attach_topics(session, binding, LINK_WINDOW)
        elif not patterns:
            if channel.topic_sub is not None:
                session.subscriptions.pop(channel.topic_sub.id, None)
                channel.topic_sub = None
            links.unbind(peer_id)

    def _reconcile_durables(self, peer: Peer, channel: PeerVhost, broker: Broker, demand: list[DemandRecord],
                            forwarding: bool) -> None:
        """This node's part of a durable subscription goes to a peer whose demand says
        the subscriber is there or beyond, while it has no subscriber here."""
        wanted = {r.address for r in demand if r.kind == DURABLE_SUBSCRIPTION}
        bindings = broker.bindings
        durable_subs = channel.durable_subs
        for name, sub in list(durable_subs.items()):
            binding = bindings.get(name)
            if name not in wanted or binding is None or binding.queue is not sub.queue or binding.active is not None:
                del durable_subs[name]
                self.retire(peer, sub)
        if not forwarding or self.frozen:
            return
        for name in wanted - durable_subs.keys():
            binding = bindings.get(name)
            if binding is None or not binding.durable or binding.peer is not None or binding.active is not None:
                continue
            sub = broker.links.attach_durable(channel.session, "d:" + name, binding, LINK_WINDOW, peer.link.peer_id,
                                              LinkRole.DURABLE)
            durable_subs[name] = sub
            binding.queue.dispatch()

    def durable_subscriber_at(self, name: str, vhost: str = DEFAULT_VHOST) -> str | None:
        """The node where a durable subscription's subscriber is connected, as the
        demand heard from the peers says (None: none heard of)."""
        for peer in self.linked.values():
            for record in peer.demand:
                if record.kind == DURABLE_SUBSCRIPTION and record.address == name and record.vhost == vhost:
                    return record.path[0]
        return None

    def durables_changed(self) -> None:
        """Durable subscriptions came, went or changed, or a subscriber attached or left."""
        for peer in self.linked.values():
            forwarding = self._forwards_to(peer)
            for channel, broker, demand in self._channels(peer, forwarding):
                self._reconcile_durables(peer, channel, broker, demand, forwarding)

    def _forwards_to(self, peer: Peer) -> bool:
        # Without duplex, traffic flows only over links this node dialled.
        return self.config.message_load_balancing != "OFF" and (self.config.duplex or peer.link.dialled)

    def queue_deleted(self, vhost: str, name: str) -> None:
        """An administrator deleted the queue: its link subscriptions held the old
        queue; follow the same demand on the new one (made when it is next used)."""
        key = (vhost, name)
        self._cancel_hold(key)
        self._released.discard(key)
        self._had_consumers.discard(key)
        self._made_for_demand.discard(key)
        for peer_id, peer in self.linked.items():
            channel = peer.channels.get(vhost)
            sub = None if channel is None else channel.queue_subs.pop(name, None)
            if sub is not None:
                self.retire(peer, sub)
                self._reconcile(peer_id, peer)

    def _drop_if_unused(self, vhost: str, broker: Broker, address: str) -> None:
        key = (vhost, address)
        if key not in self._made_for_demand:
            return
        queue = broker.queues.get(address)
        if queue is not None and (queue.remotes or queue.consumers or len(queue) or queue.mesh.in_doubt):
            return  # still followed by another peer, or used here
        self._made_for_demand.discard(key)
        if queue is not None and not queue.enqueued and address not in broker.queue_settings:
            broker.drop_queue(queue)

    def retire(self, peer: Peer, sub: Subscription) -> None:
        """Demand over the link went away: take nothing new, but let what is in
        flight be confirmed there rather than come back and go out twice."""
        if not sub.inflight:
            sub.session.unsubscribe(sub.id)
            return
        sub.prefetch = 0
        peer.retiring.add(sub)

    # -- redistribution -------------------------------------------------------------------

    def consumers_changed(self, vhost: str, broker: Broker) -> None:
        self.schedule_advertise()
        self.durables_changed()
        mode = self.config.message_load_balancing
        for queue_name, queue in broker.queues.items():
            name = (vhost, queue_name)
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

    def _hold(self, name: QueueKey, queue: Queue) -> None:
        """The last local consumer left: keep the backlog for redistribution_delay_ms
        (-1: keep it) before letting it follow consumers on other nodes (the delay is
        the queue's address's, alike in every vhost)."""
        delay = self.config.redistribution_delay_for("/queue/" + name[1])
        if delay == 0:
            self._redistribute(queue)
            return
        queue.mesh.remote_dispatch = False
        if delay > 0:
            self._holds[name] = self.clock.callLater(delay / 1000.0, self._release_hold, name)

    def _release_hold(self, name: QueueKey) -> None:
        self._holds.pop(name, None)
        self._released.add(name)
        broker = self.vhosts.get(name[0])
        queue = None if broker is None else broker.queues.get(name[1])
        if queue is not None and not queue.consumers:
            self._redistribute(queue)

    @staticmethod
    def _redistribute(queue: Queue) -> None:
        queue.mesh.remote_dispatch = True
        queue.mesh.backlog = len(queue)
        queue.dispatch()

    def redistribute_now(self, vhost: str, name: str) -> str | None:
        """End the hold on a queue's backlog at once, as its delay running out would (the
        ``redistribute`` request). Returns why it cannot be (None: done)."""
        broker = self.vhosts.get(vhost)
        queue = None if broker is None else broker.queues.get(name)
        key = (vhost, name)
        if queue is None:
            return f"no queue {name!r} on this node"
        if queue.consumers:
            return (f"queue {name!r} has {len(queue.consumers)} consumer(s) on this node: they take its backlog, "
                    "it is not held for redistribution")
        mode = self.config.message_load_balancing
        if mode in ("OFF", "STRICT"):
            return (f'mesh.message_load_balancing = "{mode}" on this node: a backlog never follows consumers '
                    "elsewhere; move it instead")
        if not any(record.kind == QUEUE and record.address == name and record.vhost == vhost
                   for peer in self.linked.values() for record in peer.demand):
            return f"no other node is heard of with consumers of queue {name!r}: there is nowhere to send it"
        if queue.mesh.remote_dispatch and key not in self._holds:
            return f"queue {name!r} is not held: its backlog may follow consumers elsewhere already"
        self._cancel_hold(key)
        self._released.add(key)
        self._redistribute(queue)
        return None

    def hold_pending(self, vhost: str, name: str) -> bool:
        """Whether a redistribution delay is running for the queue (the doctor asks)."""
        return (vhost, name) in self._holds

    def _cancel_hold(self, name: QueueKey) -> None:
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
