"""What the AMQP connections of one listener share: the settings they are offered,
the authenticator (and the thread pool a blocking one runs on), both authorization
maps and the vhosts' limits, the vhosts connection.open chooses from, each vhost's
queue lifetimes, the connections themselves and the peer log their lines go
through. gateway.amqp.protocol's AmqpFactory is this listener building its
AmqpProtocols: kept apart from the connection's code, and not importing it."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from twisted.internet.protocol import Protocol, ServerFactory

from gateway.amqp.lifetimes import QueueLifetimes
from gateway.amqp.mesh_queues import MeshQueues
from gateway.auth import Authorizer
from gateway.broker.broker import Broker
from gateway.broker.vhost_limits import VhostLimits
from gateway.hostile_log import PeerLog
from gateway.permissions import AccessControl, VhostPermissions

if TYPE_CHECKING:
    from gateway.broker.vhosts import VirtualHosts

# The connections' lines keep the logger they have always had (operators filter by it).
log = logging.getLogger("gateway.amqp.protocol")

Connection = TypeVar("Connection", bound=Protocol)


@dataclass
class AmqpSettings:
    frame_max: int = 131072
    channel_max: int = 2047
    heartbeat_s: int = 60  # offered; the client's choice wins, 0 turns them off
    max_message_size: int = 100 * 1024 * 1024
    max_connections: int = 100000


class AmqpListener(ServerFactory[Connection]):
    def __init__(self, broker: Broker, settings: AmqpSettings, authenticator, authorizer, clock,
                 node_name: str = "meshgate", threadpool=None, vhosts: VirtualHosts | None = None,
                 permissions: VhostPermissions | None = None, limits: VhostLimits | None = None) -> None:
        self.broker = broker
        self.settings = settings
        self.authenticator = authenticator
        self.authorizer = authorizer
        # Both authorization maps (docs/vhosts.md, "Permissions") and the vhosts' limits.
        nobody_refused = Authorizer((), enabled=False)  # a factory may be made without a map (benches)
        self.access = AccessControl(authorizer if authorizer is not None else nobody_refused,
                                    permissions or VhostPermissions((), enabled=False))
        self.limits = limits or VhostLimits()
        self.clock = clock
        self.node_name = node_name
        self.threadpool = threadpool
        self.connections: set[Connection] = set()
        self.connection_ids = itertools.count(1)
        self.peer_log = PeerLog(log, clock.seconds)
        self.vhosts = vhosts
        self._lifetimes: dict[Broker, QueueLifetimes] = {}  # one per vhost
        # A node in a mesh: the other nodes' part of a queue (passive declare, get, purge).
        self.mesh_queues: MeshQueues | None = None

    def broker_for(self, vhost: str) -> Broker | None:
        """The broker of the vhost connection.open names, None if there is none. Without
        vhosts (a factory made on one broker) every name is that broker."""
        if self.vhosts is None:
            return self.broker
        return self.vhosts.get(vhost)

    def lifetimes(self, broker: Broker) -> QueueLifetimes:
        """Exclusive, auto-delete and x-expires queues of ``broker``'s vhost."""
        lifetimes = self._lifetimes.get(broker)
        if lifetimes is None:
            lifetimes = self._lifetimes[broker] = QueueLifetimes(broker, self.clock)
        return lifetimes
