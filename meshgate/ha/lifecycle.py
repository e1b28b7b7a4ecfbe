"""A node's high-availability lifecycle (docs/ha.md).

How the process comes to serve (waiting as the standby on a shared store, or taking
its turn in a replicated pair), the epoch and lease it serves under, the
replication listener and witness heartbeats while it serves, being fenced when
another process took the node over, and the failback: handing the node over to the
backup, then rejoining as that one's backup.

The node drives it (``acquire``, ``hold``, ``serve``, ``stop_heartbeats``,
``release``) and gives it a :class:`NodeControl` for the little it needs back."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet import defer

from meshgate.config import NodeConfig
from meshgate.datadir import DataDir, EpochError, NodeStartError
from meshgate.ha.failback import hand_over
from meshgate.ha.lease import LeaseKeeper, Standby
from meshgate.ha.state import HaRole, HaState

if TYPE_CHECKING:
    from gateway.store.journal import JournalStore
    from gateway.tls import TlsMaterial
    from meshgate.replication import ReplicaFollower, ReplicationSource
    from meshgate.replication.quorum import MeshQuorum
    from meshgate.witness import WitnessClient, WitnessReporter

# The node's messages, under the logger operators (and docs/ha.md) know them by.
log = logging.getLogger("meshgate.node")


class NodeControl(Protocol):
    """What the HA lifecycle needs from the node it runs in."""

    fatal: str | None  # why the process stops with an error

    def pause_clients(self, pause: bool) -> None:
        """Stop (or resume) accepting client connections and reading the open ones."""

    def stop(self) -> defer.Deferred:
        """Stop the whole node, as at shutdown (it calls ``release`` last)."""

    def start_again(self) -> defer.Deferred:
        """Drop the stopped node's parts and start it anew; fires once it serves."""


class HaLifecycle:
    def __init__(self, config: NodeConfig, data_dir: DataDir, reactor: Any, node: NodeControl) -> None:
        self.config = config
        self.ha = config.ha
        self.data_dir = data_dir
        self.reactor = reactor
        self.node = node
        self.state = HaState.STARTING
        self.role = HaRole.NONE
        self.epoch = 0
        self.node_id = ""  # the node's id, once it serves
        self.standby: Standby | None = None
        self.lease: LeaseKeeper | None = None
        self.follower: ReplicaFollower | None = None  # replicated: while this process is the backup
        self.replication: ReplicationSource | None = None  # replicated: while this process serves
        self.witness_reporter: WitnessReporter | None = None
        self.failing_back = False  # replicated: a failback is under way
        self.rejoining = False  # replicated: starting again as the backup after a failback
        self.exit: Callable[[int], Any] = os._exit  # how a replaced process leaves (a seam: no graceful stop)

    # -- coming to serve ---------------------------------------------------------------------------

    @defer.inlineCallbacks
    def acquire(self):
        """Hold the data dir (on a shared store, after waiting as the standby) and, in a
        replicated pair, follow as the backup until this process is to serve."""
        if not self.data_dir.try_lock():
            if not self.ha.shared_store:
                self.data_dir.lock()  # raises NodeStartError, naming the holder
            yield self._wait_as_standby()
        if self.ha.replicated:
            yield self._take_turn()

    def hold(self, started_at: float) -> int:
        """This process serves from now on: the epoch it serves under, and its lease."""
        ha = self.ha
        self.state = HaState.ACTIVE
        try:
            # Every shared-store or replicated start is a new epoch, written before anything else
            # is: a process that held the data dir (or the node) before finds it was replaced.
            new_epoch = ha.shared_store or ha.replicated
            self.epoch = self.data_dir.next_epoch() if new_epoch else self.data_dir.epoch()
        except (EpochError, OSError) as error:
            raise NodeStartError(f"cannot start an epoch in data dir {self.data_dir.path}: {error}") from None
        self.lease = LeaseKeeper(self.data_dir, self.reactor, ha.lease_interval_ms / 1000.0, self.epoch, started_at,
                                 self.replaced, sync=ha.shared_store and self.config.store.sync == "always")
        try:
            self.lease.start()
        except OSError as error:
            log.warning("ha: cannot write the lease in %s: %s", self.data_dir.path / "lock", error)
        if ha.shared_store:
            log.info("ha: holding data dir %s as the active node, epoch %d", self.data_dir.path, self.epoch)
        if ha.replicated:
            self.role = HaRole.PRIMARY
            log.info("ha: serving as the primary of a replicated pair, epoch %d", self.epoch)
        return self.epoch

    def store_class(self) -> type[JournalStore]:
        """A replicated primary's journal streams to the backup; any other is the plain one."""
        if self.ha.replicated:
            from gateway.store.replicated import ReplicatedJournalStore

            return ReplicatedJournalStore
        from gateway.store.journal import JournalStore

        return JournalStore

    @defer.inlineCallbacks
    def serve(self, store: JournalStore, node_id: str):
        """Once the store is recovered: replicated, open the replication listener for the
        backup and send the witness heartbeats."""
        self.node_id = node_id
        if not self.ha.replicated:
            return
        from gateway.store.replicated import ReplicatedJournalStore
        from meshgate.replication import ReplicationSource
        from meshgate.witness import WitnessReporter

        ha = self.ha
        assert isinstance(store, ReplicatedJournalStore)  # store_class() made it
        assert ha.replication_bind is not None  # the config requires it with mode = "replicated"
        self.replication = ReplicationSource(
            store, self.reactor, node_id=node_id, epoch=self.epoch,
            password=self.config.replication_password, sync=ha.sync, heartbeat_s=ha.heartbeat_ms / 1000.0,
            backup_timeout_s=max(2 * ha.takeover_after_ms / 1000.0, 3.0), on_replaced=self.replaced, tls=ha.tls)
        yield self.replication.listen(ha.replication_bind)
        address = self.replication.address()
        assert address is not None  # listening
        log.info("ha: replication listener on %s:%d (sync %s, %s)", *address, "on" if ha.sync else "off",
                 "TLS" if ha.tls is not None else "plain TCP")
        witness = self.witness_client
        if witness is not None:
            self.witness_reporter = WitnessReporter(witness, node_id, self.epoch, ha.heartbeat_ms / 1000.0,
                                                    self.replaced)
            self.witness_reporter.start()

    def status(self) -> dict[str, Any]:
        """The Node fields of high availability (model.mesh.Node)."""
        status: dict[str, Any] = {
            "ha_mode": self.ha.mode, "ha_state": HaState.ACTIVE if self.state is HaState.ACTIVE else HaState.STANDBY,
            "epoch": self.epoch, "standbys": list(self.lease.standbys) if self.lease is not None else []}
        if self.replication is not None:
            backup = self.replication.backup
            status.update(ha_role=self.role, replication_state=self.replication.state,
                          replication_lag=self.replication.lag(), replication_sync=self.ha.sync,
                          replication_backup=backup.peer if backup is not None else "")
        return status

    # -- stopping ------------------------------------------------------------------------------------

    def stop_heartbeats(self) -> None:
        """The node stops: the witness hears no more from this process."""
        if self.witness_reporter is not None:
            self.witness_reporter.stop()

    @defer.inlineCallbacks
    def release(self):
        """Last in the node's stop, after its store closed: no more replication or lease
        renewal, and the data dir is let go (a standby takes over from here)."""
        if self.replication is not None:
            yield self.replication.stop()
        if self.lease is not None:
            yield self.lease.stop()
        self.data_dir.unlock()

    def replaced(self, reason: str) -> None:
        """Another process took this node over (its epoch is higher): stop at once. No
        graceful stop: that would write to a store another process now owns. Nothing
        unacknowledged is lost by it; what was acknowledged is on disk for the new holder."""
        message = f"fenced: {reason}"
        log.critical("%s; exiting now without writing to the data dir again", message)
        self.node.fatal = message
        try:
            sys.stderr.write(f"meshgate: {message}\n")
            sys.stderr.flush()
        finally:
            self.exit(1)

    # -- shared store: the standby ----------------------------------------------------------------------

    def _wait_as_standby(self) -> defer.Deferred:
        """Another process holds the data dir. Expose nothing and wait for its lock; the
        node then starts as a restart on this data dir would."""
        self.state = HaState.STANDBY
        standby = self.standby = Standby(self.data_dir, self.reactor, self.ha.poll_interval_ms / 1000.0,
                                         self.ha.lease_interval_ms / 1000.0)
        trigger = self.reactor.addSystemEventTrigger("before", "shutdown", standby.stop)

        def took_over(waited: float) -> float:
            self.reactor.removeSystemEventTrigger(trigger)
            return waited

        return standby.wait().addCallback(took_over)

    # -- replicated pairs: whose turn it is to serve ---------------------------------------------------

    @defer.inlineCallbacks
    def _take_turn(self):
        """Start as the backup (``ha.role``, a primary that was replaced while it was away,
        or a rejoin after a failback) and wait for a takeover; a primary serves at once."""
        from meshgate.replication import ReplicaFollower

        ha = self.ha
        witness = self.witness_client
        quorum = self._mesh_quorum()
        role = HaRole.BACKUP if self.rejoining else HaRole(ha.role)
        if self.rejoining:
            log.warning("ha: rejoining as the backup of the member that took over (failback); copying the node's "
                        "state from it")
        if role is HaRole.PRIMARY:
            reason = yield self._why_not_primary(witness, quorum)
            if not reason:
                return
            log.warning("ha: not starting as the primary: %s; this process rejoins as the backup and copies "
                        "the node's state from the serving member", reason)
        assert ha.peer is not None  # the config requires it with mode = "replicated"
        self.role = HaRole.BACKUP
        self.state = HaState.STANDBY
        follower = self.follower = ReplicaFollower(
            self.data_dir.path, self.reactor, peer=ha.peer, password=self.config.replication_password,
            witness=witness, heartbeat_s=ha.heartbeat_ms / 1000.0, takeover_after_s=ha.takeover_after_ms / 1000.0,
            force=ha.force_takeover, node_id=self._stored_node_id, tls=ha.tls, quorum=quorum)
        trigger = self.reactor.addSystemEventTrigger("before", "shutdown", follower.stop)
        yield follower.wait()
        self.reactor.removeSystemEventTrigger(trigger)
        self.follower = None

    @defer.inlineCallbacks
    def _why_not_primary(self, witness: WitnessClient | None, quorum: MeshQuorum | None):
        """Why this process, configured as the primary, must not serve ("" if nothing):
        the other member took the node over while this one was away."""
        from meshgate.replication import INCOMPLETE, primary_active_at
        from meshgate.witness import WitnessUnreachable

        own = self.data_dir.epoch()
        if (self.data_dir.path / INCOMPLETE).exists():
            return "its data dir holds an unfinished copy from the other member"
        node_id = self._stored_node_id()
        if witness is not None and node_id:
            try:
                known = (yield witness.ask("status", node_id=node_id, epoch=own)).get("epoch", 0)
            except WitnessUnreachable:
                known = 0
            if isinstance(known, int) and known > own:
                return f"the witness has seen epoch {known} of this node, above this data dir's {own}"
        if quorum is not None and node_id:
            known = yield quorum.highest_epoch(node_id)  # a backup may have taken over by the mesh's votes
            if known > own:
                return f"a node of the mesh has seen epoch {known} of this node, above this data dir's {own}"
        peer = self.ha.peer
        assert peer is not None  # the config requires it with mode = "replicated"
        if (yield primary_active_at(self.reactor, peer, tls=self.ha.tls)):
            return f"the other member serves (its replication listener {peer[0]}:{peer[1]} answers)"
        return ""

    def _stored_node_id(self) -> str:
        try:
            return str(json.loads((self.data_dir.path / "node.json").read_text())["id"])
        except (OSError, ValueError, KeyError, TypeError):
            return ""

    @cached_property
    def witness_client(self) -> WitnessClient | None:
        """The one client of ``ha.witness`` this process has, as backup and as primary
        (so that its TLS complaints share one once-a-minute budget)."""
        from meshgate.witness import WitnessClient

        if self.ha.witness is None:
            return None
        return WitnessClient(self.reactor, self.ha.witness, self.config.replication_password, tls=self.witness_tls)

    @property
    def witness_tls(self) -> TlsMaterial | None:
        """What this member speaks to the witness: TLS with ``[ha.tls]``'s material (the
        witness's certificate must name its address, as ``ha.peer``'s names that host),
        else ``[mesh.tls]``'s (with its ``verify_hostname``); plain TCP with neither. The
        same material as the links': a reload reaches the witness's dials too. With TLS a
        witness that speaks plaintext is refused (treated as unreachable)."""
        if self.ha.tls is not None:
            return self.ha.tls.material
        mesh = self.config.mesh
        return mesh.tls.material if mesh is not None and mesh.tls is not None else None

    def _mesh_quorum(self) -> MeshQuorum | None:
        """Without a witness, the mesh's other nodes (``[mesh] static``) are the backup's quorum."""
        from meshgate.replication.quorum import MeshQuorum

        mesh = self.config.mesh
        if self.ha.witness is not None or mesh is None:
            return None
        peers = tuple(p for p in mesh.static if tuple(p) != tuple(mesh.bind))
        if not peers:
            return None
        timeout_s = max(0.5, min(self.ha.takeover_after_ms / 1000.0, 2.0))
        tls = mesh.tls.material if mesh.tls is not None else None  # votes go to TLS-only listeners over TLS
        return MeshQuorum(self.reactor, peers, mesh.cluster_password, mesh.cluster_user, timeout_s, tls)

    # -- failback: a controlled switch of roles (meshgate ha failback) -----------------------------------

    @defer.inlineCallbacks
    def failback(self, drain_timeout_s: float = 10.0):
        """Hand the node over to the in-sync backup (:func:`meshgate.ha.failback.hand_over`),
        then rejoin as its backup. Fires with ``(epoch, backup address)``; fails with
        HandoverRefused, this process serving on."""
        from meshgate.replication import HandoverRefused

        source = self.replication
        if source is None or self.role is not HaRole.PRIMARY:
            raise HandoverRefused("this process is not the serving member of a replicated pair")
        if self.failing_back:
            raise HandoverRefused("a failback is under way already")
        self.failing_back = True
        try:
            epoch, backup = yield hand_over(
                source, self.witness_reporter, self.node.pause_clients, self.reactor, node_id=self.node_id,
                epoch=self.epoch, takeover_s=self.ha.takeover_after_ms / 1000.0, drain_timeout_s=drain_timeout_s)
        except Exception:
            self.failing_back = False
            raise
        self.reactor.callLater(0.3, self._rejoin_as_backup)  # the answer goes out first
        return epoch, backup

    @defer.inlineCallbacks
    def _rejoin_as_backup(self):
        """After a failback: stop the node (its clients go, the store closes with nothing
        more released) and start it again as the backup of the member that took over."""
        try:
            yield self.node.stop()
        except Exception:  # noqa: BLE001 -- it must rejoin whatever went wrong in stopping
            log.exception("failback: stopping the node failed; rejoining anyway")
        self.replication = self.witness_reporter = self.lease = None
        self.role = HaRole.NONE
        self.failing_back = False
        self.rejoining = True
        try:
            yield self.node.start_again()
        except Exception as error:  # noqa: BLE001 -- say why, and exit non-zero
            self.node.fatal = f"cannot rejoin as the backup after a failback: {error}"
            log.error("%s", self.node.fatal)
            self.reactor.stop()
        finally:
            self.rejoining = False
