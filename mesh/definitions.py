"""Mesh-wide definitions on the wire: every node sends all it holds when a link
comes up (so a node that was away catches up, and so does the other side), and
each change as it is made or first learned; a node passes on only what won over
what it held, so a change floods the mesh once and stops."""

from __future__ import annotations

import logging
from typing import Any, Callable

import msgspec

from gateway.broker.broker import Broker
from mesh.peers import Peer, PeerTable
from mesh.wire import DEFINITIONS, FrameTable, FrameType, LinkSender
from model.definitions import Definition

log = logging.getLogger(__name__)


class DefinitionSync:
    def __init__(self, broker: Broker, peers: PeerTable, peer_retention_s: int, applied: Callable[[], None],
                 frames: FrameTable) -> None:
        self.broker = broker
        self.linked = peers.linked
        self.peer_retention_s = peer_retention_s
        self.applied = applied  # what follows a change (durable subscriptions: mesh.demand)
        self.definitions = broker.definitions
        broker.on_definition = self.changed_here
        frames.on(FrameType.DEFINITIONS, DEFINITIONS, self.received)
        peers.watch(up=self.peer_up)

    def peer_up(self, peer: Peer) -> None:
        peer.link.send_encoded(FrameType.DEFINITIONS, msgspec.json.encode(self.definitions.records()))

    def changed_here(self, record: Definition) -> None:
        self._send([record], source=None)
        self.applied()

    def received(self, link: LinkSender, payload: list[Any]) -> None:
        try:
            records = msgspec.convert(payload, list[Definition])
        except msgspec.ValidationError as error:
            log.error("mesh: definitions from %s not understood (%s); ignored", link.peer_name, error)
            return
        won = [record for record in records if self.broker.merge_definition(record)]
        if not won:
            return
        for record in won:
            log.info("mesh: %s %s %r from node %s", "deleted" if record.deleted else "defined", record.kind,
                     record.name, record.origin)
        self._send(won, source=link.peer_id)
        self.applied()

    def drop_old_tombstones(self) -> None:
        retention = self.peer_retention_s
        if retention:
            self.broker.forget_deletions(self.broker.seconds() - retention)

    def _send(self, records: list[Definition], source: str | None) -> None:
        payload = msgspec.json.encode(records)
        for peer_id, peer in self.linked.items():
            if peer_id != source:
                peer.link.send_encoded(FrameType.DEFINITIONS, payload)
