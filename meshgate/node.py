"""A broker node: its data dir (identity and lock), store, broker core and listeners."""

from __future__ import annotations

import logging
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

from twisted.internet import defer, endpoints, task

from gateway.auth import Authenticator, Authorizer
from gateway.broker.broker import Broker
from gateway.selector import compile_selector
from gateway.stomp.protocol import StompFactory, StompSettings
from gateway.store.journal import JournalStore, StoreError
from management.actions import LocalActions
from management.events import EventLog
from management.service import ManagementService
from management.state import LocalState
from meshgate.config import NodeConfig
from meshgate.config.metrics import MetricsConfig
from meshgate.datadir import DataDir, EpochError, NodeStartError
from meshgate.ha import LeaseKeeper, Standby
from metrics.publisher import StreamPublisher
from metrics.reporter import MetricsReporter
from model.events import ProducersBlocked, ProducersResumed
from model.mesh import Addresses, MetricsStatus, address_text

log = logging.getLogger(__name__)

EXPIRY_SWEEP_SECONDS = 5.0

__all__ = ["DataDir", "Node", "NodeStartError"]


class Node:
    def __init__(self, config: NodeConfig, reactor) -> None:
        self.config = config
        self.reactor = reactor
        self.data_dir = DataDir(config.data_dir or os.path.join("data", config.name))
        self.identity: dict = {}
        self.store: JournalStore | None = None
        self.broker: Broker | None = None
        self.stomp_factory: StompFactory | None = None
        self.amqp_factory = None
        self.ports: list = []
        self._sweeper: task.LoopingCall | None = None
        self.mesh = None
        self.discovery = None  # multicast
        self.dns_discovery = None
        self.started_at = time.time()
        self.fatal: str | None = None
        self.events: EventLog | None = None
        self.state: LocalState | None = None
        self.metrics: MetricsReporter | None = None
        self.scale_down_requested = False
        self.ha_state = "starting"  # then "standby" while waiting for the data dir, "active" once it holds it
        self.epoch = 0
        self.standby: Standby | None = None
        self.lease: LeaseKeeper | None = None
        self.ha_role = ""  # replicated: "primary" (serving) or "backup" (following); "" otherwise
        self.follower = None  # replicated: the ReplicaFollower while this process is the backup
        self.replication = None  # replicated: the ReplicationSource while this process serves
        self.witness_reporter = None
        self._exit = os._exit  # how a replaced node leaves (a seam: no graceful stop)
        self.failing_back = False  # replicated: a failback is under way
        self._rejoin = False  # replicated: restarting as the backup after a failback
        self.on_restarted: Callable[[Node], None] | None = None  # after a failback: serving again (a takeover)

    @defer.inlineCallbacks
    def start(self):
        config = self.config
        _raise_fd_limit()
        if not self.data_dir.try_lock():
            if not config.ha.shared_store:
                self.data_dir.lock()  # raises NodeStartError, naming the holder
            yield self._wait_as_standby()
        if config.ha.replicated:
            yield self._take_turn()  # as the backup, until a takeover; or at once as the primary
        self.ha_state = "active"
        self.started_at = time.time()  # a standby's run starts when it takes over
        try:
            # Every shared-store or replicated start is a new epoch, written before anything else
            # is: a process that held the data dir (or the node) before finds it was replaced.
            new_epoch = config.ha.shared_store or config.ha.replicated
            self.epoch = self.data_dir.next_epoch() if new_epoch else self.data_dir.epoch()
        except (EpochError, OSError) as error:
            raise NodeStartError(f"cannot start an epoch in data dir {self.data_dir.path}: {error}") from None
        self.lease = LeaseKeeper(self.data_dir, self.reactor, config.ha.lease_interval_ms / 1000.0, self.epoch,
                                 self.started_at, self._replaced,
                                 sync=config.ha.shared_store and config.store.sync == "always")
        try:
            self.lease.start()
        except OSError as error:
            log.warning("ha: cannot write the lease in %s: %s", self.data_dir.path / "lock", error)
        if config.ha.shared_store:
            log.info("ha: holding data dir %s as the active node, epoch %d", self.data_dir.path, self.epoch)
        self.identity = self.data_dir.identity(config.name)
        store_class = JournalStore
        if config.ha.replicated:
            from gateway.store.replicated import ReplicatedJournalStore

            store_class = ReplicatedJournalStore
            self.ha_role = "primary"
            log.info("ha: serving as the primary of a replicated pair, epoch %d", self.epoch)
        self.store = store_class(
            self.data_dir.path,
            self.reactor,
            sync=config.store.sync == "always",
            segment_size=config.store.journal_file_size,
            max_sync_delay_ms=config.store.max_sync_delay_ms,
            limit=config.store.limit,
            max_disk_usage=config.store.max_disk_usage,
        )
        self.events = EventLog(self.identity["id"], self.reactor)
        self.store.on_blocked = lambda reason: self.events.emit(ProducersBlocked(reason=reason))
        self.store.on_resumed = lambda waited: self.events.emit(ProducersResumed(blocked_s=round(waited, 3)))
        self.broker = Broker(
            self.store,
            events=self.events,
            message_id_prefix=f"{self.identity['id'][:8]}-{self.identity['boots']}-",
            clock=self.reactor,
            memory_limit=config.broker.memory_limit,
            default_prefetch=config.broker.default_prefetch,
            max_delivery_attempts=config.broker.max_delivery_attempts,
            dead_letter_queue=config.broker.dead_letter_queue,
            expiry_queue=config.broker.expiry_queue,
            compile_selector=compile_selector,
            node_id=self.identity["id"],
        )
        if config.mesh is not None:
            self.mesh = self._make_mesh(config)  # before recovery: it owns some store records
        recovered = self.broker.recover()
        if self.mesh is not None:
            self.mesh.hold_recovered()
        if recovered:
            log.info("recovered %d persistent messages", recovered)
        if config.ha.replicated:
            yield self._start_replication()
        if config.anonymous:
            exposed = [host for _, (host, _) in config.client_binds() if not _loopback(host)]
            # Anonymous on loopback is the documented local default; reachable from elsewhere it is a risk.
            log.log(logging.WARNING if exposed else logging.INFO,
                    "no users configured: any client may connect without credentials%s",
                    f" (listening on {', '.join(exposed)})" if exposed else " (loopback only)")
        stomp = config.stomp
        settings = StompSettings(
            max_frame_size=stomp.max_frame_size,
            max_headers=stomp.max_headers,
            max_header_length=stomp.max_header_length,
            heartbeat_send_ms=stomp.heartbeat_send_ms,
            heartbeat_receive_ms=stomp.heartbeat_receive_ms,
            heartbeat_grace=stomp.heartbeat_grace,
            max_connections=stomp.max_connections,
            no_space_fail_after_ms=config.store.fail_after_ms,
        )
        authorizer = Authorizer(config.security.authorization, enabled=not config.anonymous)
        self.stomp_factory = StompFactory(
            self.broker,
            settings,
            Authenticator(config.security.users),
            authorizer,
            self.reactor,
            node_name=config.name,
            threadpool=self.reactor.getThreadPool(),
        )
        self._start_management(authorizer)  # before the listeners: its address is reserved from the first SEND
        self.ports.append(("stomp", (yield self._listen(stomp.bind, self.stomp_factory))))
        if stomp.tls is not None:
            self.ports.append(("stomp+ssl", (yield self._listen_tls(stomp.tls, self.stomp_factory))))
        if stomp.websocket is not None:
            from gateway.stomp.websocket import WebSocketSettings, WebSocketStompFactory

            websocket = WebSocketStompFactory(self.stomp_factory, WebSocketSettings(stomp.websocket.allowed_origins))
            self.ports.append(("ws", (yield self._listen(stomp.websocket.bind, websocket))))
            if stomp.websocket.tls is not None:
                self.ports.append(("wss", (yield self._listen_tls(stomp.websocket.tls, websocket))))
        if config.amqp is not None:
            yield self._start_amqp(config.amqp, authorizer)
        if self.mesh is not None:
            self.mesh.stomp_address = (self.addresses()[0][1], self.addresses()[0][2])
            yield self.mesh.start()
            if config.mesh.discovery is not None:
                yield self._start_discovery(config)
        if config.metrics.redis_url is not None:
            self._start_metrics(config.metrics)
        self._sweeper = task.LoopingCall(self.broker.sweep_expired)
        self._sweeper.clock = self.reactor
        self._sweeper.start(EXPIRY_SWEEP_SECONDS, now=False)
        return self

    def _wait_as_standby(self) -> defer.Deferred:
        """Shared store: another process holds the data dir. Expose nothing and wait
        for its lock; the node then starts as a restart on this data dir would."""
        ha = self.config.ha
        self.ha_state = "standby"
        self.standby = Standby(self.data_dir, self.reactor, ha.poll_interval_ms / 1000.0,
                               ha.lease_interval_ms / 1000.0)
        trigger = self.reactor.addSystemEventTrigger("before", "shutdown", self.standby.stop)

        def took_over(waited: float) -> float:
            self.reactor.removeSystemEventTrigger(trigger)
            return waited

        return self.standby.wait().addCallback(took_over)

    def ha_status(self) -> dict:
        """The Node fields of high availability (model.mesh.Node)."""
        status = {"ha_mode": self.config.ha.mode, "ha_state": "active" if self.ha_state == "active" else "standby",
                  "epoch": self.epoch, "standbys": list(self.lease.standbys) if self.lease is not None else []}
        if self.replication is not None:
            backup = self.replication.backup
            status.update(ha_role=self.ha_role, replication_state=self.replication.state,
                          replication_lag=self.replication.lag(), replication_sync=self.config.ha.sync,
                          replication_backup=backup.peer if backup is not None else "")
        return status

    # -- replicated pairs (docs/ha.md) ---------------------------------------------------------------

    def _witness_client(self):
        from meshgate.witness import WitnessClient

        ha = self.config.ha
        if ha.witness is None:
            return None
        return WitnessClient(self.reactor, ha.witness, self.config.replication_password)

    def _mesh_quorum(self):
        """Without a witness, the mesh's other nodes (``[mesh] static``) are the backup's quorum."""
        from meshgate.replication.quorum import MeshQuorum

        mesh = self.config.mesh
        if self.config.ha.witness is not None or mesh is None:
            return None
        peers = tuple(p for p in mesh.static if tuple(p) != tuple(mesh.bind))
        if not peers:
            return None
        timeout_s = max(0.5, min(self.config.ha.takeover_after_ms / 1000.0, 2.0))
        return MeshQuorum(self.reactor, peers, mesh.cluster_password, mesh.cluster_user, timeout_s)

    @defer.inlineCallbacks
    def _take_turn(self):
        """Replicated: start as the backup (``ha.role``, or a primary that was replaced
        while it was away) and wait for a takeover; a primary serves at once."""
        from meshgate.replication import INCOMPLETE, ReplicaFollower, primary_active_at
        from meshgate.witness import WitnessUnreachable

        ha = self.config.ha
        witness = self._witness_client()
        quorum = self._mesh_quorum()
        role = "backup" if self._rejoin else ha.role
        if self._rejoin:
            log.warning("ha: rejoining as the backup of the member that took over (failback); copying the node's "
                        "state from it")
        if role == "primary":
            own = self.data_dir.epoch()
            reason = ""
            if (self.data_dir.path / INCOMPLETE).exists():
                reason = "its data dir holds an unfinished copy from the other member"
            node_id = self._stored_node_id()
            if not reason and witness is not None and node_id:
                try:
                    known = (yield witness.ask("status", node_id=node_id, epoch=own)).get("epoch", 0)
                except WitnessUnreachable:
                    known = 0
                if isinstance(known, int) and known > own:
                    reason = f"the witness has seen epoch {known} of this node, above this data dir's {own}"
            if not reason and quorum is not None and node_id:
                known = yield quorum.highest_epoch(node_id)  # a backup may have taken over by the mesh's votes
                if known > own:
                    reason = f"a node of the mesh has seen epoch {known} of this node, above this data dir's {own}"
            if not reason and (yield primary_active_at(self.reactor, ha.peer, tls=ha.tls)):
                reason = f"the other member serves (its replication listener {ha.peer[0]}:{ha.peer[1]} answers)"
            if reason:
                log.warning("ha: not starting as the primary: %s; this process rejoins as the backup and copies "
                            "the node's state from the serving member", reason)
                role = "backup"
        if role == "primary":
            return
        self.ha_role = "backup"
        self.ha_state = "standby"
        self.follower = ReplicaFollower(self.data_dir.path, self.reactor, peer=ha.peer,
                                        password=self.config.replication_password, witness=witness,
                                        heartbeat_s=ha.heartbeat_ms / 1000.0,
                                        takeover_after_s=ha.takeover_after_ms / 1000.0, force=ha.force_takeover,
                                        node_id=self._stored_node_id, tls=ha.tls, quorum=quorum)
        trigger = self.reactor.addSystemEventTrigger("before", "shutdown", self.follower.stop)
        yield self.follower.wait()
        self.reactor.removeSystemEventTrigger(trigger)
        self.follower = None

    def _stored_node_id(self) -> str:
        import json

        try:
            return str(json.loads((self.data_dir.path / "node.json").read_text())["id"])
        except (OSError, ValueError, KeyError, TypeError):
            return ""

    @defer.inlineCallbacks
    def _start_replication(self):
        from meshgate.replication import ReplicationSource
        from meshgate.witness import WitnessReporter

        ha = self.config.ha
        self.replication = ReplicationSource(
            self.store, self.reactor, node_id=self.identity["id"], epoch=self.epoch,
            password=self.config.replication_password, sync=ha.sync, heartbeat_s=ha.heartbeat_ms / 1000.0,
            backup_timeout_s=max(2 * ha.takeover_after_ms / 1000.0, 3.0), on_replaced=self._replaced, tls=ha.tls)
        yield self.replication.listen(ha.replication_bind)
        host, port = self.replication.address()
        log.info("ha: replication listener on %s:%d (sync %s, %s)", host, port, "on" if ha.sync else "off",
                 "TLS" if ha.tls is not None else "plain TCP")
        witness = self._witness_client()
        if witness is not None:
            self.witness_reporter = WitnessReporter(witness, self.identity["id"], self.epoch,
                                                    ha.heartbeat_ms / 1000.0, self._replaced)
            self.witness_reporter.start()

    # -- failback: a controlled switch of roles (meshgate ha failback) -----------------------------------

    @defer.inlineCallbacks
    def failback(self, drain_timeout_s: float = 10.0):
        """Hand the node over to the in-sync backup, then rejoin as its backup.

        1. Refuse unless a backup is connected and in sync (nothing changes then).
        2. Stop taking client work: the client listeners stop accepting and every client
           connection stops being read (what it sends waits in its socket).
        3. Wait until the journal is flushed, synced here and acknowledged by the backup
           (lag 0): everything receipted so far is on both.
        4. Tell the witness this epoch hands over (``release``), after the last heartbeat.
        5. ``TAKEOVER`` over the replication link: the backup claims the next epoch from the
           witness and starts serving as a takeover does; it answers ``TAKEN`` first.
        6. From then on nothing written here counts as durable (no RECEIPT or STORED for it);
           this process closes its clients (their failover URLs take them to the other
           member), stops its node and starts it again as the other member's backup.

        If 3–5 fail, clients are read again and this process serves on. Fires with a
        ``(epoch, backup address)`` pair; fails with HandoverRefused."""
        from meshgate.replication import HandoverRefused
        from meshgate.witness import WitnessUnreachable

        source = self.replication
        if source is None or self.ha_role != "primary":
            raise HandoverRefused("this process is not the serving member of a replicated pair")
        if self.failing_back:
            raise HandoverRefused("a failback is under way already")
        if source.backup is None or source.state != "in-sync":
            raise HandoverRefused(f"no backup in sync: replication is {source.state}, lag {source.lag()} bytes; "
                                  "a failback needs a connected backup in sync (meshgate ha status)")
        backup = source.backup.peer
        self.failing_back = True
        log.warning("failback: requested; no new client work is taken while the backup %s catches the last "
                    "writes", backup)
        self._pause_clients(True)
        reporter = self.witness_reporter
        released = False
        try:
            waited = 0.0
            while True:
                if source.backup is None or source.state != "in-sync":
                    raise HandoverRefused(f"the backup is no longer in sync (replication is {source.state})")
                if not self.store._buffer and self.store.local_durable >= self.store.written \
                        and source.lag() == 0:
                    break
                if waited >= drain_timeout_s:
                    raise HandoverRefused(f"the backup did not acknowledge everything within {drain_timeout_s:g} s "
                                          f"(lag {source.lag()} bytes)")
                yield task.deferLater(self.reactor, 0.01, lambda: None)
                waited += 0.01
            if reporter is not None:
                reporter.stop()
                while reporter.busy:
                    yield task.deferLater(self.reactor, 0.01, lambda: None)
                try:
                    answer = yield reporter.client.ask("release", node_id=self.identity["id"], epoch=self.epoch)
                except WitnessUnreachable as problem:
                    raise HandoverRefused(f"the witness cannot be reached ({problem})") from None
                if not answer.get("released"):
                    raise HandoverRefused(f"the witness knows epoch {answer.get('epoch')} of this node, not this "
                                          f"process's {self.epoch}")
                released = True
            takeover_s = self.config.ha.takeover_after_ms / 1000.0
            try:
                epoch = yield source.hand_over(timeout_s=max(5.0, 2 * takeover_s))
            except HandoverRefused:
                # The link may have dropped after the backup took over: the witness knows.
                epoch = (yield self._taken_over_meanwhile(reporter)) if released else 0
                if not epoch:
                    raise
                log.warning("failback: no answer from the backup, but the witness has seen epoch %d: it took over",
                            epoch)
                source.handed_over = True
                self.store.hand_over()
        except Exception as problem:
            self.failing_back = False
            if source.handed_over:  # the answer came, but this side failed after: it must not serve
                raise
            if reporter is not None:
                if released:
                    log.warning("failback: refused after the witness was told; heartbeats resume")
                reporter.start()
            self._pause_clients(False)
            log.warning("failback: not done (%s); serving on", problem)
            raise
        log.warning("failback: the backup %s took over at epoch %d; closing the clients and rejoining as its "
                    "backup", backup, epoch)
        self.reactor.callLater(0.3, self._rejoin_as_backup)  # the answer goes out first
        return epoch, backup

    @defer.inlineCallbacks
    def _taken_over_meanwhile(self, reporter):
        """The epoch the witness knows of this node if above this process's, else 0."""
        from meshgate.witness import WitnessUnreachable

        try:
            known = (yield reporter.client.ask("status", node_id=self.identity["id"], epoch=self.epoch)).get("epoch")
        except WitnessUnreachable:
            return 0
        return known if isinstance(known, int) and known > self.epoch else 0

    def _pause_clients(self, pause: bool) -> None:
        """Stop (or resume) accepting client connections and reading the open ones."""
        for _, port in self.ports:
            (port.stopReading if pause else port.startReading)()
        for factory in (self.stomp_factory, self.amqp_factory):
            if factory is None:
                continue
            for connection in list(factory.connections):
                transport = connection.transport
                method = getattr(transport, "pauseProducing" if pause else "resumeProducing", None)
                if method is not None:
                    method()

    @defer.inlineCallbacks
    def _rejoin_as_backup(self):
        """After a failback: stop this node (its clients go, the store closes with nothing
        more released) and start it again as the backup of the member that took over."""
        try:
            yield self.stop()
        except Exception:  # noqa: BLE001 -- it must rejoin whatever went wrong in stopping
            log.exception("failback: stopping the node failed; rejoining anyway")
        self.store = self.broker = self.mesh = self.replication = self.witness_reporter = None
        self.stomp_factory = self.amqp_factory = self.discovery = self.dns_discovery = self.metrics = None
        self._sweeper = None
        self.lease = None
        self.ports = []
        self.ha_role = ""
        self.failing_back = False
        self._rejoin = True
        try:
            yield self.start()
        except Exception as error:  # noqa: BLE001 -- say why, and exit non-zero
            self.fatal = f"cannot rejoin as the backup after a failback: {error}"
            log.error("%s", self.fatal)
            self.reactor.stop()
            return
        finally:
            self._rejoin = False
        if self.on_restarted is not None:
            self.on_restarted(self)

    def _replaced(self, reason: str) -> None:
        """Another process took this node's data dir over (its epoch is higher): stop
        at once. No graceful stop: that would write to a store another process now
        owns. Nothing unacknowledged is lost by it; what was acknowledged is on disk
        for the new holder."""
        message = f"fenced: {reason}"
        log.critical("%s; exiting now without writing to the data dir again", message)
        self.fatal = message
        try:
            sys.stderr.write(f"meshgate: {message}\n")
            sys.stderr.flush()
        finally:
            self._exit(1)

    def _start_management(self, authorizer: Authorizer) -> None:
        node_id = self.identity["id"]
        self.state = LocalState(
            node_id=node_id, name=self.config.name, started_at=self.started_at, broker=self.broker, mesh=self.mesh,
            clock=self.reactor, addresses=self.model_addresses,
            metrics=self.metrics_status, group_name=self.config.mesh.group_name if self.config.mesh else "",
            ha=self.ha_status,
        )
        actions = LocalActions(node_id=node_id, broker=self.broker, mesh=self.mesh, clock=self.reactor,
                               scale_down_and_stop=self.scale_down_and_stop,
                               failback=self.failback if self.config.ha.replicated else None)
        ManagementService(node_id=node_id, name=self.config.name, broker=self.broker, mesh=self.mesh,
                          state=self.state, actions=actions, events=self.events, authorizer=authorizer)

    def _start_metrics(self, config: MetricsConfig) -> None:
        publisher = StreamPublisher(config.redis_url, config.stream_prefix, config.maxlen, config.buffer)
        self.metrics = MetricsReporter(publisher, self.state.snapshot, config.interval_ms / 1000.0, self.reactor,
                                       config.snapshot_retention_s, roll_window=self.state.roll_depth_window)
        self.events.sinks.append(self.metrics.publish_event)
        self.metrics.start()
        log.info("metrics: writing snapshots every %d ms and events to %s (streams %s:snapshots, %s:events)",
                 config.interval_ms, config.redis_url, config.stream_prefix, config.stream_prefix)

    def metrics_status(self) -> MetricsStatus:
        return self.metrics.publisher.status() if self.metrics is not None else MetricsStatus()

    @defer.inlineCallbacks
    def _start_amqp(self, amqp, authorizer: Authorizer):
        from gateway.amqp.protocol import AmqpFactory, AmqpSettings

        settings = AmqpSettings(frame_max=amqp.frame_max, channel_max=amqp.channel_max, heartbeat_s=amqp.heartbeat_s,
                                max_message_size=amqp.max_message_size, max_connections=amqp.max_connections)
        self.amqp_factory = AmqpFactory(self.broker, settings, self.stomp_factory.authenticator, authorizer,
                                        self.reactor, node_name=self.config.name,
                                        threadpool=self.reactor.getThreadPool())
        self.ports.append(("amqp", (yield self._listen(amqp.bind, self.amqp_factory))))
        if amqp.tls is not None:
            self.ports.append(("amqps", (yield self._listen_tls(amqp.tls, self.amqp_factory))))

    def model_addresses(self) -> Addresses:
        listeners = {scheme: address_text(host, port) for scheme, host, port in self.addresses()}
        link = address_text(*self.mesh.link_address) if self.mesh is not None else None
        return Addresses(stomp=listeners.get("stomp"), stomp_tls=listeners.get("stomp+ssl"), link=link,
                         websocket=listeners.get("ws"), websocket_tls=listeners.get("wss"),
                         amqp=listeners.get("amqp"), amqp_tls=listeners.get("amqps"))

    def scale_down_and_stop(self) -> None:
        """An administrator asked this node to hand everything over and go."""
        log.warning("scale-down requested by an administrator: handing every message over, then stopping")
        self.scale_down_requested = True
        self.reactor.stop()

    def _listen(self, bind: tuple[str, int], factory):
        host, port = bind
        return endpoints.TCP4ServerEndpoint(self.reactor, port, backlog=1024, interface=host).listen(factory)

    def _listen_tls(self, tls, factory):
        from twisted.internet import ssl

        key = ssl.PrivateCertificate.loadPEM(
            Path(tls.certificate).read_text() + Path(tls.private_key).read_text()
        )
        # With a CA, only clients holding a certificate it signed get in.
        authorities = [ssl.Certificate.loadPEM(Path(tls.ca_certificate).read_text())] if tls.ca_certificate else []
        context = key.options(*authorities)
        host, port = tls.bind
        endpoint = endpoints.SSL4ServerEndpoint(self.reactor, port, context, backlog=1024, interface=host)
        return endpoint.listen(factory)

    def addresses(self) -> list[tuple[str, str, int]]:
        return [(scheme, port.getHost().host, port.getHost().port) for scheme, port in self.ports]

    @defer.inlineCallbacks
    def stop(self):
        """Stop accepting, close clients, let in-flight store writes finish."""
        if self._sweeper is not None and self._sweeper.running:
            self._sweeper.stop()
        if self.witness_reporter is not None:
            self.witness_reporter.stop()
        for _, port in self.ports:
            yield port.stopListening()
        self.ports = []
        if self.stomp_factory is not None:
            yield self._close_clients(self.stomp_factory.connections)
        if self.amqp_factory is not None:
            yield self._close_clients(self.amqp_factory.connections)
        if self.mesh is not None and (self.config.mesh.scale_down or self.scale_down_requested) \
                and self.fatal is None:
            yield self.mesh.scale_down()
        if self.events is not None:
            self.events.flush()
        if self.metrics is not None:
            self.metrics.stop()
        if self.dns_discovery is not None:
            self.dns_discovery.stop()
        if self.discovery is not None:
            yield self.discovery.stop()
        if self.mesh is not None:
            yield self.mesh.stop()
        if self.store is not None:
            try:
                yield self.store.close()
            except StoreError as error:  # a full or failing disk: say so, exit non-zero
                self.fatal = f"stopped with the store failing: {error}; the next start recovers what was acknowledged"
        if self.replication is not None:
            yield self.replication.stop()
        if self.lease is not None:
            yield self.lease.stop()
        self.data_dir.unlock()  # last: a standby takes over from here

    def _make_mesh(self, config: NodeConfig):
        from mesh.node import MeshNode

        return MeshNode(
            config.mesh,
            node_id=self.identity["id"],
            name=config.name,
            broker=self.broker,
            started_at=self.started_at,
            stomp_address=config.stomp.bind,
            reactor=self.reactor,
            on_fatal=self._fatal,
            epoch=self.epoch,
            on_fenced=self._replaced,
        )

    def _start_discovery(self, config: NodeConfig):
        from mesh.discovery import Announcement, DiscoveryService
        from mesh.dns_discovery import DnsDiscovery, resolver_for

        discovery, mesh = config.mesh.discovery, self.mesh
        if discovery.dns is not None:
            name, port = discovery.dns
            self.dns_discovery = DnsDiscovery(
                self.reactor, name, port, resolver_for(discovery.dns_servers, self.reactor),
                discovery.refresh_timeout_ms / 1000.0,
                on_found=lambda address: mesh.found(address, "dns"),
                on_lost=lambda address: mesh.lost(address, "dns"),
            )
            self.dns_discovery.start()
        if discovery.group is None:
            return None
        stomp = self.addresses()[0]
        announcement = Announcement(self.identity["id"], config.name, mesh.link_address, (stomp[1], stomp[2]),
                                    config.mesh.group_name)
        self.discovery = DiscoveryService(
            self.reactor, discovery.group, discovery.interface, announcement,
            config.mesh.cluster_password.encode(), discovery.broadcast_period_ms / 1000.0,
            discovery.refresh_timeout_ms / 1000.0,
            on_found=lambda peer: mesh.found(peer.link, "multicast"),
            on_lost=lambda peer: mesh.lost(peer.link, "multicast"),
        )
        return self.discovery.start()

    def _fatal(self, reason: str) -> None:
        """The mesh found this node must not run (a copied data dir): stop, exit non-zero."""
        log.error("%s", reason)
        self.fatal = reason
        self.reactor.callLater(0, self.reactor.stop)

    @defer.inlineCallbacks
    def _close_clients(self, connections: set, patience: float = 2.0):
        """Close every client and wait until each session has ended, so what
        they release (acks, returned messages) reaches the store before it closes."""
        for connection in list(connections):
            connection.closing = True
            connection.transport.loseConnection()
        waited = 0.0
        while connections and waited < patience:
            yield task.deferLater(self.reactor, 0.05, lambda: None)
            waited += 0.05
        for connection in list(connections):
            connection.transport.abortConnection()
        while connections and waited < patience + 1:
            yield task.deferLater(self.reactor, 0.05, lambda: None)
            waited += 0.05


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
