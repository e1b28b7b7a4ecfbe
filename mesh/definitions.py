"""Mesh-wide definitions on the wire: every node sends all it holds when a link
comes up (so a node that was away catches up, and so does the other side), and
each change as it is made or first learned; a node passes on only what won over
what it held, so a change floods the mesh once and stops.

A node before vhosts reads a frame of definitions as one list of known kinds and
ignores the whole frame if one record is of a kind it does not know; so the
kinds it knows and those it does not (vhosts) travel in separate frames, and it
loses only the latter. This node reads each record alone and skips what it cannot."""

from __future__ import annotations

import logging
from typing import Any, Callable

import msgspec

from gateway.broker.broker import Broker
from mesh.peers import Peer, PeerTable
from mesh.wire import DEFINITIONS, FrameTable, FrameType, LinkSender
from model.definitions import VHOST, Definition

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
        for frame in _frames(self.definitions.records()):
            peer.link.send_encoded(FrameType.DEFINITIONS, frame)

    def changed_here(self, record: Definition) -> None:
        self._send([record], source=None)
        self.applied()

    def received(self, link: LinkSender, payload: list[Any]) -> None:
        records = []
        for entry in payload:
            try:
                records.append(msgspec.convert(entry, Definition))
            except msgspec.ValidationError as error:  # a kind of a newer release, say
                log.warning("mesh: a definition from %s not understood (%s); ignored", link.peer_name,
                            str(error)[:200])
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
        frames = _frames(records)
        for peer_id, peer in self.linked.items():
            if peer_id != source:
                for frame in frames:
                    peer.link.send_encoded(FrameType.DEFINITIONS, frame)


def _frames(records: list[Definition]) -> list[bytes]:
    """The records as frames: the kinds every release knows in one (sent even empty,
    as before), vhosts in another if any."""
    vhosts = [record for record in records if record.kind == VHOST]
    frames = [msgspec.json.encode([record for record in records if record.kind != VHOST])]
    return frames + [msgspec.json.encode(vhosts)] if vhosts else frames
