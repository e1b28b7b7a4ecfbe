"""Dialling peers: one connector per configured or discovered address."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mesh.link import LinkClientFactory

if TYPE_CHECKING:
    from mesh.node import MeshNode

log = logging.getLogger("mesh.node")


class Connector:
    """Dials one peer address and keeps dialling, with backoff, while not linked."""

    def __init__(self, mesh: MeshNode, address: tuple[str, int]) -> None:
        self.mesh = mesh
        self.address = address
        self.peer_id: str | None = None
        self.attempts = 0
        self.stopped = False
        self._timer = None

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
        if self.peer_id is not None and self.peer_id in self.mesh.peers:
            self._schedule(self.mesh.config.retry_interval_ms / 1000.0)  # linked already, perhaps the other way
            return
        host, port = self.address
        self.mesh.reactor.connectTCP(host, port, LinkClientFactory(self.mesh, self), timeout=5)

    def connected(self, peer_id: str) -> None:
        self.peer_id = peer_id
        self.attempts = 0

    def failed(self) -> None:
        if self.stopped or self._timer is not None:
            return
        config = self.mesh.config
        self.attempts += 1
        if 0 <= config.reconnect_attempts < self.attempts:
            log.warning("mesh: giving up on %s:%d after %d attempts", *self.address, self.attempts - 1)
            return
        delay = min(config.retry_interval_ms * config.retry_interval_multiplier ** (self.attempts - 1),
                    config.max_retry_interval_ms)
        self._schedule(delay / 1000.0)

    def _schedule(self, delay: float) -> None:
        self._timer = self.mesh.reactor.callLater(delay, self._dial)
