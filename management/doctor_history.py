"""What the doctor needs over time, kept by its sampler (management/doctor_node.py):
how each queue's dead-lettered and expired counters and its dead-letter queues'
depths moved over the last ``window_s`` ([doctor], ``WINDOW_S`` by default), and since
when each durable subscription has been without a subscriber here.

Each sample walks the queues and durable subscriptions (O(queues), every
``sample_s``), never the messages; a snapshot holds only the queues that ever
dead-lettered or expired something, and the dead-letter and expiry queues."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from gateway.broker.queue import AUTO, Subscription
from model.diagnosis import DeadLetterFacts, DurableFacts, StalledFacts

if TYPE_CHECKING:
    from gateway.broker.broker import Broker

# Growth is judged over this much history (seconds; the default of [doctor] window_s):
# long enough that a trickle of dead letters shows, short enough that an old incident
# does not stay a finding for long.
WINDOW_S = 300.0

_QueueKey = tuple[str, str]  # (vhost, queue name)
_Counts = tuple[int, int, int]  # (dead_lettered, expired, depth)


class DeadLetterWindow:
    """Snapshots of the counters, the oldest no older than ``window_s`` (plus one sample)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._snapshots: deque[tuple[float, dict[_QueueKey, _Counts]]] = deque()

    def sample(self, now: float, brokers: dict[str, Broker]) -> None:
        snapshots = self._snapshots
        snapshots.append((now, _snapshot(brokers)))
        # Keep the newest sample at least the window old, so the window is covered whole.
        while len(snapshots) > 1 and snapshots[1][0] <= now - self.window_s:
            snapshots.popleft()

    def facts(self, now: float, brokers: dict[str, Broker]) -> list[DeadLetterFacts]:
        """How each queue moved from the oldest sample kept to now (a look not kept: an ask,
        however frequent, adds nothing to the history)."""
        start, before = self._snapshots[0] if self._snapshots else (now, {})
        facts = []
        for (vhost, name), (dead_lettered, expired, depth) in sorted(_snapshot(brokers).items()):
            broker = brokers[vhost]
            was = before.get((vhost, name), (0, 0, 0))  # not there then: nothing counted yet, empty
            is_target = name in _targets(broker)
            fact = DeadLetterFacts(vhost=vhost, name=name, over_s=max(0.0, now - start), depth=depth,
                                   depth_growth=depth - was[2], dead_lettered=max(0, dead_lettered - was[0]),
                                   expired=max(0, expired - was[1]), is_target=is_target, **_settings(broker, name))
            if fact.dead_lettered or fact.expired or (is_target and fact.depth_growth > 0):
                facts.append(fact)
        return facts


def _snapshot(brokers: dict[str, Broker]) -> dict[_QueueKey, _Counts]:
    snapshot: dict[_QueueKey, _Counts] = {}
    for vhost, broker in brokers.items():
        targets = _targets(broker)
        for name, queue in broker.queues.items():
            if queue.dead_lettered or queue.expired or name in targets:
                snapshot[(vhost, name)] = (queue.dead_lettered, queue.expired, len(queue))
    return snapshot


def _targets(broker: Broker) -> set[str]:
    """The dead-letter and expiry queues of the broker and of its queues' settings."""
    targets = {broker.dead_letter_queue, broker.expiry_queue}
    for settings in broker.queue_settings.values():
        targets.add(settings.dead_letter_queue or "")
        targets.add(settings.expiry_queue or "")
    targets.discard("")
    return targets


def _settings(broker: Broker, name: str) -> dict:
    """Where the queue's dead letters and expired messages go, and the keys that decide
    when (as gateway/broker/dead_letters.py reads them)."""
    settings = broker.queue_settings.get(name)
    own_attempts = settings is not None and settings.max_delivery_attempts is not None
    return dict(
        dead_letter_queue=(settings.dead_letter_queue if settings is not None else None) or broker.dead_letter_queue,
        expiry_queue=(broker.expiry_queue if settings is None or settings.expiry_queue is None
                      else settings.expiry_queue),
        max_delivery_attempts=(settings.max_delivery_attempts if settings is not None and own_attempts else None)
        or broker.max_delivery_attempts,
        max_delivery_attempts_key=f"max_delivery_attempts of queue {name} (meshgate define-queue)" if own_attempts
        else "broker.max_delivery_attempts",
        message_ttl_ms=settings.message_ttl_ms if settings is not None else None)


class DetachedDurables:
    """Since when each durable subscription of this node has had no subscriber here: the
    first sample that sees it without one (a node's start, for those recovered)."""

    def __init__(self) -> None:
        self._since: dict[tuple[str, str], float] = {}

    def sample(self, now: float, brokers: dict[str, Broker]) -> None:
        since = {}
        for vhost, broker in brokers.items():
            for name, binding in broker.bindings.items():
                if binding.durable and binding.active is None:
                    key = (vhost, name)
                    since[key] = self._since.get(key, now)
        self._since = since  # reattached or deleted ones drop out

    def facts(self, now: float, brokers: dict[str, Broker],
              subscribed_elsewhere=lambda vhost, name: False) -> list[DurableFacts]:
        facts = []
        for (vhost, name), since in sorted(self._since.items()):
            broker = brokers.get(vhost)
            binding = broker.bindings.get(name) if broker is not None else None
            if binding is None or binding.active is not None:
                continue
            facts.append(DurableFacts(vhost=vhost, name=name, topic=binding.pattern, depth=len(binding.queue),
                                      detached_for_s=max(0.0, now - since),
                                      subscribed_elsewhere=subscribed_elsewhere(vhost, name)))
        return facts


class StalledConsumers:
    """Since when each queue with waiting messages has had every local consumer take no
    more: the first sample that saw it so. Only queues with both waiting messages and
    consumers are looked at, O(consumers) each."""

    def __init__(self) -> None:
        self._since: dict[tuple[str, str, str], float] = {}

    def sample(self, now: float, brokers: dict[str, Broker]) -> None:
        since = {}
        for vhost, broker in brokers.items():
            for name, queue in broker.queues.items():
                if not queue.consumers or not len(queue):
                    continue
                cause = _stall(queue.consumers)
                if cause is not None:
                    key = (vhost, name, cause)
                    since[key] = self._since.get(key, now)
        self._since = since  # queues that drained, or whose consumers took again, drop out

    def facts(self, now: float, brokers: dict[str, Broker]) -> list[StalledFacts]:
        facts = []
        for (vhost, name, cause), since in sorted(self._since.items()):
            broker = brokers.get(vhost)
            queue = broker.queues.get(name) if broker is not None else None
            if queue is None or not queue.consumers:
                continue
            consumers = queue.consumers
            connections = sorted({_connection(sub) for sub in consumers})
            facts.append(StalledFacts(vhost=vhost, name=name, cause=cause,
                                      for_s=max(0.0, now - since), depth=len(queue), consumers=len(consumers),
                                      unacked=sum(len(sub.inflight) for sub in consumers),
                                      prefetch=max(sub.prefetch for sub in consumers), connections=connections))
        return facts


def _stall(consumers: list[Subscription]) -> str | None:
    """Why none of ``consumers`` takes more now (None: one of them does)."""
    if all(not sub.session.writable for sub in consumers):
        return "unwritable"
    if any(sub.ready() for sub in consumers):
        return None
    # None ready, and not all for a backed-up socket: the windows (prefetch) hold them.
    full = [sub for sub in consumers if sub.ack_mode != AUTO and len(sub.inflight) >= sub.prefetch]
    return "prefetch" if full else None


def _connection(sub: Subscription) -> str:
    info = sub.session.connection
    return (info.name if info is not None else None) or sub.session.name
