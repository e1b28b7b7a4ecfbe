"""Consumer demand: what this node advertises to each neighbour, the link
subscriptions that follow what neighbours advertise, and when a backlog may
follow consumers elsewhere (redistribution holds)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.broker.message import QUEUE, TOPIC
from gateway.broker.queue import CLIENT_INDIVIDUAL, Queue, Subscription
from mesh.codec import FrameType
from mesh.peer import LINK_WINDOW, Peer
from model.definitions import DURABLE_SUBSCRIPTION

if TYPE_CHECKING:
    from mesh.link import LinkProtocol
    from mesh.node import MeshNode


class Demand:
    def __init__(self, mesh: MeshNode) -> None:
        self.mesh = mesh
        self.config = mesh.config
        self.broker = mesh.broker
        self._advertise_scheduled = False
        self._had_consumers: set[str] = set()
        self._holds: dict[str, object] = {}
        self._released: set[str] = set()  # queues whose hold ran out: their backlog may follow consumers
        mesh.broker.watch_consumers(self.consumers_changed)

    # -- advertising ----------------------------------------------------------------------

    def schedule_advertise(self) -> None:
        if not self._advertise_scheduled:
            self._advertise_scheduled = True
            self.mesh.reactor.callLater(0, self._advertise)

    def local_demand(self) -> list[dict]:
        carries = self.config.carries
        records = []
        node_id = self.mesh.node_id
        strict = self.config.message_load_balancing == "STRICT"
        for name, queue in self.broker.queues.items():
            if (queue.consumers or strict) and carries("/queue/" + name):
                records.append({"kind": QUEUE, "address": name, "selector": _any_of(queue.consumers),
                                "consumers": len(queue.consumers), "path": [node_id]})
        patterns: dict[str, int] = {}
        for name, binding in self.broker.bindings.items():
            if binding.peer is not None or binding.active is None or not carries("/topic/" + binding.pattern):
                continue
            if binding.durable:
                # Every node holds a part of it (what was published there): the parts follow its subscriber.
                records.append({"kind": DURABLE_SUBSCRIPTION, "address": name, "selector": None, "consumers": 1,
                                "path": [node_id]})
            else:
                patterns[binding.pattern] = patterns.get(binding.pattern, 0) + 1
        for pattern, count in patterns.items():
            records.append({"kind": TOPIC, "address": pattern, "selector": None, "consumers": count,
                            "path": [node_id]})
        return records

    def _advertise(self) -> None:
        self._advertise_scheduled = False
        local = self.local_demand()
        max_hops = self.config.max_hops
        node_id = self.mesh.node_id
        peers = self.mesh.peers
        for peer_id, peer in peers.items():
            records = list(local)
            # Demand crosses every link there is (allow_direct_connections_only limits
            # whom a node dials, not what its links carry): else an explicit chain strands.
            for other_id, other in peers.items():
                if other_id == peer_id:
                    continue
                for record in other.demand:
                    path = record["path"]
                    if peer_id in path or node_id in path or len(path) >= max_hops:
                        continue
                    records.append({**record, "path": [*path, node_id]})
            if records != peer.advertised:  # unchanged demand is not news: no ping-pong between nodes
                peer.advertised = records
                peer.link.send_control(FrameType.DEMAND, records)

    # -- following what neighbours advertise ----------------------------------------------

    def demand_received(self, link: LinkProtocol, records: list[dict]) -> None:
        peer = self.mesh.peers.get(link.peer_id)
        if peer is None or peer.link is not link:
            return
        services = self.broker.services  # never a queue here: demand for one is ignored
        node_id = self.mesh.node_id
        demand = [r for r in records
                  if node_id not in r.get("path", ()) and not (r["kind"] == QUEUE and r["address"] in services)]
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
            if record["kind"] == QUEUE:
                wanted.setdefault(record["address"], []).append(record.get("selector"))
            elif record["kind"] == TOPIC:
                patterns.append(record["address"])
        session = peer.session
        forwarding = self._forwards_to(peer)
        for address, sub in list(peer.queue_subs.items()):
            selector = _combine(wanted.get(address, []))
            if self.mesh.scaling_down:
                break
            if address not in wanted or sub.selector_text != selector:
                del peer.queue_subs[address]
                self.retire(peer, sub)
        direct = {r["address"] for r in peer.demand if r["kind"] == QUEUE and r.get("path") == [peer_id]}
        weights: dict[str, int] = {}
        for record in peer.demand:
            if record["kind"] == QUEUE:
                weights[record["address"]] = weights.get(record["address"], 0) + max(1, int(record.get("consumers", 1)))
        for address, selectors in wanted.items():
            if address in peer.queue_subs:
                sub = peer.queue_subs[address]
                if sub.tag != (address in direct):
                    sub.tag = address in direct
                    sub.queue.dispatch()
            elif forwarding:
                queue = self.broker.queue(address)
                if config.message_load_balancing == "OFF_WITH_REDISTRIBUTION":
                    # Nothing is forwarded on send: a backlog moves only by redistribution.
                    if queue.consumers:
                        queue.remote_dispatch = False
                    elif queue.remote_dispatch and address not in self._holds and address not in self._released:
                        self._hold(address, queue)
                if len(queue) and not queue.consumers and queue.remote_dispatch:
                    queue.backlog = len(queue)  # consumers appeared elsewhere: what waits here follows them
                peer.queue_subs[address] = session.subscribe(
                    self.mesh.link_subscription_id(address), QUEUE, address, CLIENT_INDIVIDUAL, LINK_WINDOW,
                    _combine(selectors), tag=address in direct, peer=peer_id,
                )
            if address in peer.queue_subs:
                peer.queue_subs[address].weight = weights.get(address, 1)
        self._reconcile_durables(peer_id, peer, forwarding)
        patterns = sorted(set(patterns))
        if patterns and forwarding:
            if self.broker.link_patterns.get(peer_id) != patterns or ("link/" + peer_id) not in self.broker.bindings:
                binding = self.broker.link_binding(peer_id, patterns)
            else:
                binding = self.broker.bindings["link/" + peer_id]
            if peer.topic_sub is None:
                peer.topic_sub = self.broker.attach_link(session, binding, LINK_WINDOW)
                session.subscriptions[peer.topic_sub.id] = peer.topic_sub
        elif not patterns:
            if peer.topic_sub is not None:
                session.subscriptions.pop(peer.topic_sub.id, None)
                peer.topic_sub = None
            self.broker.unbind_link(peer_id)

    def _reconcile_durables(self, peer_id: str, peer: Peer, forwarding: bool) -> None:
        """This node's part of a durable subscription goes to a peer whose demand says
        the subscriber is there or beyond, while it has no subscriber here."""
        wanted = {r["address"] for r in peer.demand if r["kind"] == DURABLE_SUBSCRIPTION}
        bindings = self.broker.bindings
        for name, sub in list(peer.durable_subs.items()):
            binding = bindings.get(name)
            if name not in wanted or binding is None or binding.queue is not sub.queue or binding.active is not None:
                del peer.durable_subs[name]
                self.retire(peer, sub)
        if not forwarding or self.mesh.scaling_down:
            return
        for name in wanted - peer.durable_subs.keys():
            binding = bindings.get(name)
            if binding is None or not binding.durable or binding.peer is not None or binding.active is not None:
                continue
            sub = self.broker.attach_handover(peer.session, "d:" + name, binding, LINK_WINDOW, peer_id)
            peer.session.subscriptions[sub.id] = sub
            peer.durable_subs[name] = sub
            binding.queue.dispatch()

    def durable_subscriber_at(self, name: str) -> str | None:
        """The node where a durable subscription's subscriber is connected, as the
        demand heard from the peers says (None: none heard of)."""
        for peer in self.mesh.peers.values():
            for record in peer.demand:
                if record["kind"] == DURABLE_SUBSCRIPTION and record["address"] == name:
                    return record["path"][0]
        return None

    def durables_changed(self) -> None:
        """Durable subscriptions came, went or changed, or a subscriber attached or left."""
        for peer_id, peer in self.mesh.peers.items():
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
        for peer_id, peer in self.mesh.peers.items():
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
                queue.backlog = 0  # local consumers take the backlog: nothing to redistribute
            if mode == "OFF_WITH_REDISTRIBUTION":
                # Nothing leaves while local consumers exist; once they are gone the
                # backlog follows consumers elsewhere, after a fresh delay.
                if has:
                    queue.remote_dispatch = False
                    self._cancel_hold(name)
                    self._released.discard(name)
                    self._had_consumers.add(name)
                elif name in self._had_consumers:
                    self._had_consumers.discard(name)
                    self._hold(name, queue)
            elif has:
                self._had_consumers.add(name)
                queue.remote_dispatch = mode != "STRICT"
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
        queue.remote_dispatch = False
        if delay > 0:
            self._holds[name] = self.mesh.reactor.callLater(delay / 1000.0, self._release_hold, name)

    def _release_hold(self, name: str) -> None:
        self._holds.pop(name, None)
        self._released.add(name)
        queue = self.broker.queues.get(name)
        if queue is not None and not queue.consumers:
            self._redistribute(queue)

    @staticmethod
    def _redistribute(queue: Queue) -> None:
        queue.remote_dispatch = True
        queue.backlog = len(queue)
        queue.dispatch()

    def _cancel_hold(self, name: str) -> None:
        call = self._holds.pop(name, None)
        if call is not None and call.active():
            call.cancel()


def _any_of(subscriptions: list[Subscription]) -> str | None:
    return _combine([sub.selector_text for sub in subscriptions])


def _combine(selectors: list[str | None]) -> str | None:
    """A link subscription takes what any consumer beyond it would take."""
    if not selectors or any(not s for s in selectors):
        return None
    unique = sorted(set(selectors))
    return unique[0] if len(unique) == 1 else " OR ".join(f"({s})" for s in unique)
