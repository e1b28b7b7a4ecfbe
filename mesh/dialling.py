"""Dialling peers: one connector per configured or discovered address."""

from __future__ import annotations

import logging
from typing import Any, Callable

from gateway.hostile_log import PeerLog
from gateway.tls import TlsMaterial
from mesh.link import LinkClientFactory, LinkContext

log = logging.getLogger("mesh.node")


class Connector:
    """Dials one peer address and keeps dialling, with backoff, while not linked."""

    def __init__(self, context: LinkContext, address: tuple[str, int], reactor: Any,
                 reached_itself: Callable[[tuple[str, int]], None],
                 tls: tuple[TlsMaterial, PeerLog] | None = None) -> None:
        self.context = context
        self.tls = tls  # every dial speaks TLS, checking the peer's certificate against the host dialled
        self.config = context.config
        self.address = address
        self.reactor = reactor  # connectTCP and callLater
        self._reached_itself = reached_itself
        self.peer_id: str | None = None
        self.attempts = 0
        self.stopped = False
        self._timer: Any = None

    def start(self) -> None:
        self._dial()

    def stop(self) -> None:
        self.stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()

    def _dial(self) -> None:
        self._timer = None
        if self.stopped:
            return
        if self.peer_id is not None and self.peer_id in self.context.peers.linked:
            self._schedule(self.config.retry_interval_ms / 1000.0)  # linked already, perhaps the other way
            return
        host, port = self.address
        factory: Any = LinkClientFactory(self.context, self)
        if self.tls is not None:
            material, tls_log = self.tls
            factory = material.client_factory(factory, host, port, tls_log, self.reactor)
        self.reactor.connectTCP(host, port, factory, timeout=5)

    @property
    def gave_up(self) -> bool:
        """mesh.reconnect_attempts ran out: this address is not dialled again."""
        attempts = self.config.reconnect_attempts
        return self._timer is None and 0 <= attempts < self.attempts

    def connected(self, peer_id: str) -> None:
        self.peer_id = peer_id
        self.attempts = 0

    def reached_itself(self) -> None:
        """A link this connector opened reached this very node."""
        self._reached_itself(self.address)

    def failed(self) -> None:
        if self.stopped or self._timer is not None:
            return
        config = self.config
        self.attempts += 1
        if 0 <= config.reconnect_attempts < self.attempts:
            log.warning("mesh: giving up on %s:%d after %d attempts", *self.address, self.attempts - 1)
            return
        delay = min(config.retry_interval_ms * config.retry_interval_multiplier ** (self.attempts - 1),
                    config.max_retry_interval_ms)
        self._schedule(delay / 1000.0)

    def _schedule(self, delay: float) -> None:
        self._timer = self.reactor.callLater(delay, self._dial)
