"""Mesh-wide definitions on the wire: every node sends all it holds when a link
comes up (so a node that was away catches up, and so does the other side), and
each change as it is made or first learned; a node passes on only what won over
what it held, so a change floods the mesh once and stops."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from mesh.codec import FrameType
from model.definitions import Definition

if TYPE_CHECKING:
    from mesh.link import LinkProtocol
    from mesh.node import MeshNode

log = logging.getLogger(__name__)


class DefinitionSync:
    def __init__(self, mesh: MeshNode) -> None:
        self.mesh = mesh
        self.definitions = mesh.broker.definitions
        mesh.broker.on_definition = self.changed_here

    def link_up(self, link: LinkProtocol) -> None:
        link.send_control(FrameType.DEFINITIONS, msgspec.to_builtins(self.definitions.records()))

    def changed_here(self, record: Definition) -> None:
        self._send([record], source=None)
        self._applied([record])

    def received(self, link: LinkProtocol, payload: list) -> None:
        try:
            records = msgspec.convert(payload, list[Definition])
        except msgspec.ValidationError as error:
            log.error("mesh: definitions from %s not understood (%s); ignored", link.peer_name, error)
            return
        won = [record for record in records if self.mesh.broker.merge_definition(record)]
        if not won:
            return
        for record in won:
            log.info("mesh: %s %s %r from node %s", "deleted" if record.deleted else "defined", record.kind,
                     record.name, record.origin)
        self._send(won, source=link.peer_id)
        self._applied(won)

    def drop_old_tombstones(self) -> None:
        retention = self.mesh.config.peer_retention_s
        if retention:
            self.mesh.broker.forget_deletions(self.mesh.broker.seconds() - retention)

    def _applied(self, records: list[Definition]) -> None:
        self.mesh.demand.durables_changed()

    def _send(self, records: list[Definition], source: str | None) -> None:
        payload = msgspec.to_builtins(records)
        for peer_id, peer in self.mesh.peers.items():
            if peer_id != source:
                peer.link.send_control(FrameType.DEFINITIONS, payload)
