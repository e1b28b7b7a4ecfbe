"""Producer flow control of one STOMP connection: its client is not read on while
the node's memory is full, while its vhost holds ``max_messages``, or (a persistent
producer) while the store has no room, and is read again once that ends. Apart from
the protocol because it is a policy of its own; the protocol consults it once per
read, never per frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from gateway.broker.broker import Broker
from gateway.broker.producer_pauses import (
    MAX_MESSAGES,
    MEMORY_LIMIT,
    ProducerPause,
    max_messages_state,
    store_limit_key,
)
from gateway.broker.vhost_limits import StoredMessages
from gateway.store.base import Store
from gateway.transport import Transport

if TYPE_CHECKING:
    from gateway.stomp.versions import Stomp10


class FlowControlled(Protocol):
    """What flow control needs of the connection it pauses (a StompProtocol)."""

    transport: Transport
    closing: bool
    vhost: str
    handler: Stomp10 | None

    def fail(self, message: str, receipt: str | None = None, extra: dict | None = None) -> None: ...


class ProducerFlow:
    def __init__(self, connection: FlowControlled, broker: Broker, clock: Any, no_space_fail_after_ms: int) -> None:
        self._connection = connection
        self._broker = broker  # the default vhost's: the node's store and memory budget are every vhost's
        self._clock = clock
        self._no_space_fail_after_ms = no_space_fail_after_ms
        self._timers: list = []
        self.paused = False
        self.partial = 0  # bytes of a frame still arriving, counted against the broker's memory
        self.stored: StoredMessages | None = None  # its vhost's max_messages, if it has one (set at CONNECT)

    def count_partial(self, buffered: int) -> None:
        """A large frame counts against the memory limit as it arrives, and a client
        whose frame arrives while memory is full is not read on (unless its frame
        and its open transactions are most of what fills it: only reading on can
        end that)."""
        broker = self._broker
        grown, self.partial = buffered - self.partial, buffered
        if grown > 0:
            broker.reserve_memory(grown)
            if broker.memory_full and not broker.memory.held_mostly_by(self._own_bytes()):
                self._pause(MEMORY_LIMIT)
        elif grown < 0:
            broker.release_memory(-grown)

    def after_sends(self, persistent: bool) -> None:
        """A read held SENDs (``persistent``: one at least was): pause if they filled what they went to."""
        broker = self._broker
        if broker.memory_full and not broker.memory.held_mostly_by(self._own_bytes()):
            self._pause(MEMORY_LIMIT)  # producer flow control: stop reading this client until memory drains
        stored = self.stored
        if stored is not None and stored.full:
            # Its vhost holds max_messages: likewise, until one goes.
            self._pause(MAX_MESSAGES, stored.when_below, stored)
        store = broker.store
        if persistent and store.blocked is not None and not self.paused:
            # Store flow control: not read while the store is at store.limit or
            # store.max_disk_usage; after no_space_fail_after_ms of that, an ERROR.
            self._pause(store_limit_key(store.blocked), store.when_room)
            wait_ms = self._no_space_fail_after_ms
            if wait_ms:
                self._timers.append(self._clock.callLater(wait_ms / 1000.0, self._no_room, store))

    def stop(self) -> None:
        """The connection is gone: no ERROR for it any more, and its partial frame's memory back."""
        for timer in self._timers:
            if timer.active():
                timer.cancel()
        self._timers.clear()
        self.count_partial(0)
        self._broker.paused_producers.pop(self, None)

    def _no_room(self, store: Store) -> None:
        if self.paused and store.blocked is not None:
            self._connection.fail(f"no room for persistent messages: {store.blocked} (waited store.fail_after_ms)")

    def _pause(self, limit_key: str, until: Callable[[Callable[[], None]], None] | None = None,
               stored: StoredMessages | None = None) -> None:
        """Stop reading this client until ``until`` (the broker's memory by default)
        calls back; ``limit_key`` (the limit it reached) is kept for the doctor."""
        if not self.paused:
            self.paused = True
            broker = self._broker
            broker.paused_producers[self] = ProducerPause(
                limit_key=limit_key, since=self._clock.seconds(), protocol="stomp",
                vhost=self._connection.vhost, connection_name=self._connection_name,
                limit_state=max_messages_state(self._connection.vhost, stored) if stored is not None else None)
            self._connection.transport.pauseProducing()
            (until or broker.when_memory_available)(self._resume)

    def _connection_name(self) -> str | None:
        handler = self._connection.handler
        return handler.session.name if handler is not None else None

    def _own_bytes(self) -> int:
        """What of the memory this connection holds: its partial frame and its open transactions."""
        handler = self._connection.handler
        return self.partial + (handler.session.transaction_bytes if handler is not None else 0)

    def _resume(self) -> None:
        if self.paused and not self._connection.closing:
            self.paused = False
            self._broker.paused_producers.pop(self, None)
            self._connection.transport.resumeProducing()
