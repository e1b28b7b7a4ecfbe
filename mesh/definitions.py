"""Mesh-wide definitions on the wire: every node sends all it holds when a link
comes up (so a node that was away catches up, and so does the other side), and
each change as it is made or first learned; a node passes on only what won over
what it held, so a change floods the mesh once and stops.

A node before vhosts reads a frame of definitions as one list of known kinds and
ignores the whole frame if one record is of a kind it does not know; so the
kinds it knows and those it does not (vhosts, vhost permissions) travel in separate
frames, and it loses only the latter. This node reads each record alone and skips what it cannot.

Each vhost but "/" has definitions of its own (its broker's: queue settings,
durable subscriptions, exchanges, bindings), which travel in VHOST_DEFINITIONS
frames, to peers of link protocol 5 only: a node of an earlier release would read
them as "/"'s. A frame names its vhost and that vhost's incarnation
(gateway.broker.vhosts: the record that made it); a receiver takes it only if it
has the vhost, in the same incarnation. So what a node that was away still holds
of a vhost deleted and made again meanwhile is never taken by the others (and
that node drops it as it learns of the new vhost).

How a node that was away, or lacked a vhost, catches up:

- on link up each side sends "/"'s frames first (they hold the vhost records that
  make the vhosts on the other side, in order on the link), then one frame per
  vhost of its own: the other side has the vhost by then, or never will;
- whenever a vhost's incarnation changes here (the vhost is made, made again, or a
  vhost of the configuration is defined by command too) this node sends all it
  holds of that vhost to every peer, after the "/" frames that tell them;
- a change is sent as it is made, and a change learned is passed on, as for "/"."""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

import msgspec

from gateway.broker.broker import Broker
from gateway.broker.vhosts import Incarnation, VirtualHosts
from mesh.peers import Peer, PeerTable
from mesh.wire import (
    DEFINITIONS,
    VHOST_DEFINITIONS,
    FrameTable,
    FrameType,
    LinkError,
    LinkSender,
    VhostDefinitions,
)
from model.definitions import KINDS_BEFORE_VHOSTS, VHOST, Definition
from model.names import DEFAULT_VHOST, quoted

log = logging.getLogger(__name__)


class DefinitionSync:
    def __init__(self, node_id: str, vhosts: VirtualHosts, peers: PeerTable, peer_retention_s: int,
                 applied: Callable[[], None], frames: FrameTable) -> None:
        self.node_id = node_id
        self.vhosts = vhosts
        self.broker = vhosts.default
        self.linked = peers.linked
        self.peer_retention_s = peer_retention_s
        self.applied = applied  # what follows a change, in any vhost (durable subscriptions: mesh.demand)
        self.definitions = self.broker.definitions
        # vhost -> the incarnation its definitions were last sent to every peer in
        self.sent_in: dict[str, Incarnation | None] = {}
        for name, broker in vhosts.brokers.items():
            self._hook(name, broker)
        vhosts.watch(added=self._hook, removed=self._unhook)
        frames.on(FrameType.DEFINITIONS, DEFINITIONS, self.received)
        frames.on(FrameType.VHOST_DEFINITIONS, VHOST_DEFINITIONS, self.received_in_vhost)
        peers.watch(up=self.peer_up)

    def _hook(self, name: str, broker: Broker) -> None:
        broker.definitions.origin = self.node_id
        if name == DEFAULT_VHOST:
            broker.on_definition = self.changed_here
        else:
            broker.on_definition = functools.partial(self.changed_in_vhost, name)
            self.sent_in[name] = self.vhosts.incarnation(name)  # a vhost made now holds nothing yet

    def _unhook(self, name: str, broker: Broker) -> None:
        broker.on_definition = None  # a deleted vhost: nothing of it is sent any more
        self.sent_in.pop(name, None)

    def peer_up(self, peer: Peer) -> None:
        for frame in _frames(self.definitions.records()):
            peer.link.send_encoded(FrameType.DEFINITIONS, frame)
        if peer.vhosts:
            for name, broker in self.vhosts.brokers.items():
                if name != DEFAULT_VHOST:
                    peer.link.send_encoded(FrameType.VHOST_DEFINITIONS,
                                           self._vhost_frame(name, broker.definitions.records()))

    # -- "/" ----------------------------------------------------------------------------------

    def changed_here(self, record: Definition) -> None:
        self._send([record], source=None)
        if record.kind == VHOST:
            self._send_new_incarnations()
        self.applied()

    def received(self, link: LinkSender, payload: list[Any]) -> None:
        won = [record for record in _read(payload, link) if self.broker.merge_definition(record)]
        if not won:
            return
        _log_won(won, "")
        self._send(won, source=link.peer_id)
        if any(record.kind == VHOST for record in won):
            self._send_new_incarnations()
        self.applied()

    def _send(self, records: list[Definition], source: str | None) -> None:
        frames = _frames(records)
        for peer_id, peer in self.linked.items():
            if peer_id != source:
                for frame in frames:
                    peer.link.send_encoded(FrameType.DEFINITIONS, frame)

    # -- the other vhosts ---------------------------------------------------------------------

    def changed_in_vhost(self, vhost: str, record: Definition) -> None:
        self._send_in_vhost(vhost, [record], source=None)
        self.applied()

    def received_in_vhost(self, link: LinkSender, body: VhostDefinitions) -> None:
        peer = self.linked.get(link.peer_id)
        if peer is not None and not peer.vhosts:
            raise LinkError(f"a link frame of type {FrameType.VHOST_DEFINITIONS} ({FrameType.VHOST_DEFINITIONS.name}) "
                            "on a link of protocol 4")
        vhost = body.vhost
        broker = self.vhosts.brokers.get(vhost)
        if broker is None or vhost == DEFAULT_VHOST:
            log.debug("mesh: definitions of vhost %s from %s ignored: no such vhost here", quoted(vhost),
                      link.peer_name)
            return
        if body.incarnation != self.vhosts.incarnation(vhost):
            log.info("mesh: definitions of vhost %s from %s ignored: of another incarnation of it (%s)", quoted(vhost),
                     link.peer_name, body.incarnation)
            return
        # Vhost records belong to "/" alone: one in another vhost's frame is no one's.
        records = [record for record in _read(body.records, link) if record.kind != VHOST]
        won = [record for record in records if broker.merge_definition(record)]
        if not won:
            return
        _log_won(won, f" in vhost {quoted(vhost)}")
        self._send_in_vhost(vhost, won, source=link.peer_id)
        self.applied()

    def _send_new_incarnations(self) -> None:
        """Send all that this node holds of each vhost whose incarnation changed here
        (made, made again, or a configured one now defined) to every peer: they may
        have ignored it until now."""
        vhosts = self.vhosts
        for name, broker in vhosts.brokers.items():
            incarnation = vhosts.incarnation(name)
            if name == DEFAULT_VHOST or self.sent_in.get(name) == incarnation:
                continue
            if incarnation is None and name not in vhosts.configured:
                continue  # deleted here this moment: its broker goes next, with nothing more to say
            self.sent_in[name] = incarnation
            records = broker.definitions.records()
            if records:
                self._send_in_vhost(name, records, source=None)

    def _send_in_vhost(self, vhost: str, records: list[Definition], source: str | None) -> None:
        frame = self._vhost_frame(vhost, records)
        for peer_id, peer in self.linked.items():
            if peer_id != source and peer.vhosts:  # a node of an earlier release would take them as "/"'s
                peer.link.send_encoded(FrameType.VHOST_DEFINITIONS, frame)

    def _vhost_frame(self, vhost: str, records: list[Definition]) -> bytes:
        return msgspec.json.encode(VhostDefinitions(vhost=vhost, incarnation=self.vhosts.incarnation(vhost),
                                                    records=list(records)))

    # -- retention ----------------------------------------------------------------------------

    def drop_old_tombstones(self) -> None:
        retention = self.peer_retention_s
        if retention:
            for broker in self.vhosts:
                broker.forget_deletions(broker.seconds() - retention)


def _read(entries: list[Any], link: LinkSender) -> list[Definition]:
    records = []
    for entry in entries:
        try:
            records.append(msgspec.convert(entry, Definition))
        except msgspec.ValidationError as error:  # a kind of a newer release, say
            log.warning("mesh: a definition from %s not understood (%s); ignored", link.peer_name, str(error)[:200])
    return records


def _log_won(records: list[Definition], where: str) -> None:
    for record in records:
        log.info("mesh: %s %s %r%s from node %s", "deleted" if record.deleted else "defined", record.kind,
                 record.name, where, record.origin)


def _frames(records: list[Definition]) -> list[bytes]:
    """The records as frames: the kinds every release knows in one (sent even empty,
    as before), every kind the release before vhosts did not know (vhosts, their
    permissions) in another if any, so that such a node loses only those."""
    newer = [record for record in records if record.kind not in KINDS_BEFORE_VHOSTS]
    frames = [msgspec.json.encode([record for record in records if record.kind in KINDS_BEFORE_VHOSTS])]
    return frames + [msgspec.json.encode(newer)] if newer else frames
