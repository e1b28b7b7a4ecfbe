"""A broker node: its data dir, store, broker core, listeners, mesh, management and metrics.
How it comes to serve and stops serving (standby, takeover, failback) is :mod:`meshgate.ha`."""

from __future__ import annotations

import logging
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet import defer, endpoints, task

from gateway.auth import Authenticator, Authorizer
from gateway.broker.broker import Broker
from gateway.broker.tracing import Tracer
from gateway.broker.vhost_limits import VhostLimits
from gateway.broker.vhosts import VirtualHosts
from gateway.permissions import VhostPermissions
from gateway.selector import compile_selector
from gateway.stomp.protocol import StompFactory, StompSettings
from gateway.store.journal import JournalStore, StoreError
from management.actions import LocalActions
from management.doctor import Thresholds
from management.doctor_node import DoctorFacts
from management.events import EventLog
from management.journeys import JourneyStore
from management.service import ManagementService
from management.state import LocalState
from meshgate.certificates import NodeCertificates, node_materials
from meshgate.config import NodeConfig
from meshgate.config.mesh import DiscoveryConfig, MeshConfig
from meshgate.config.metrics import MetricsConfig
from meshgate.config.node import AmqpConfig, TlsConfig
from meshgate.datadir import DataDir, NodeStartError
from meshgate.ha import HaLifecycle
from meshgate.ha.state import HaState
from meshgate.health import HealthFacts, PeerFacts
from metrics.prometheus import NodeUp, exposition
from metrics.publisher import StreamPublisher
from metrics.reporter import MetricsReporter
from model.events import ProducersBlocked, ProducersResumed
from model.mesh import Addresses, MetricsStatus, address_text
from model.results import ListenerReload

if TYPE_CHECKING:
    from gateway.amqp.protocol import AmqpFactory
    from mesh.discovery import DiscoveryService
    from mesh.dns_discovery import DnsDiscovery
    from mesh.node import MeshNode

log = logging.getLogger(__name__)

EXPIRY_SWEEP_SECONDS = 5.0
JOURNEY_SWEEP_SECONDS = 10.0  # how often journey records past [journeys] max_age_s go

__all__ = ["DataDir", "Node", "NodeStartError"]


class Node:
    def __init__(self, config: NodeConfig, reactor) -> None:
        self.config = config
        self.reactor = reactor
        self.data_dir = DataDir(config.data_dir or os.path.join("data", config.name))
        self.identity: dict = {}
        self.store: JournalStore | None = None
        self.broker: Broker | None = None  # the default vhost's
        self.vhosts: VirtualHosts | None = None
        self.stomp_factory: StompFactory | None = None
        self.amqp_factory: AmqpFactory | None = None
        self.management: ManagementService | None = None
        self.ports: list = []
        self._sweeper: task.LoopingCall | None = None
        self.journeys: JourneyStore | None = None  # [journeys] on: the records of traced messages
        self._journey_sweeper: task.LoopingCall | None = None
        self.mesh: MeshNode | None = None
        self.discovery: DiscoveryService | None = None  # multicast
        self.dns_discovery: DnsDiscovery | None = None
        self.started_at = time.time()
        self.fatal: str | None = None
        self.events: EventLog | None = None
        self.state: LocalState | None = None
        self.metrics: MetricsReporter | None = None
        self.scale_down_requested = False
        self.serving = False  # started: the store recovered, the listeners open
        self.stopping = False
        self.http_port: Any = None  # [http]: /healthz, /readyz, /metrics (meshgate.http_endpoint)
        self.epoch = 0
        self.ha = HaLifecycle(config, self.data_dir, reactor, self)
        self.on_restarted: Callable[[Node], None] | None = None  # after a failback: serving again (a takeover)
        self.certificates = NodeCertificates(node_materials(config), reactor)  # every TLS listener's and dialler's

    @defer.inlineCallbacks
    def start(self):
        config = self.config
        _raise_fd_limit()
        self._reload_tls_on_sighup()  # first: a standby's replication dialler is reloaded too
        self.stopping = False
        if config.http is not None and self.http_port is None:  # before a standby waits: it answers "not ready"
            from meshgate.http_endpoint import site

            self.http_port = yield self._listen(config.http.bind, site(self.health_facts, self.own_metrics))
        yield self.ha.acquire()  # the data dir held; replicated, this process's turn to serve
        self.started_at = time.time()  # a standby's run starts when it takes over
        self.epoch = self.ha.hold(self.started_at)
        self.identity = self.data_dir.identity(config.name)
        store = self.store = self.ha.store_class()(
            self.data_dir.path,
            self.reactor,
            sync=config.store.sync == "always",
            segment_size=config.store.journal_file_size,
            max_sync_delay_ms=config.store.max_sync_delay_ms,
            limit=config.store.limit,
            max_disk_usage=config.store.max_disk_usage,
        )
        events = self.events = EventLog(self.identity["id"], self.reactor)
        store.on_blocked = lambda reason: events.emit(ProducersBlocked(reason=reason))
        store.on_resumed = lambda waited: events.emit(ProducersResumed(blocked_s=round(waited, 3)))
        tracer = self._start_journeys()
        vhosts = self.vhosts = VirtualHosts(
            store,
            config.vhosts.names,
            strict_stomp_host=config.vhosts.strict_stomp_host,
            events=events,
            message_id_prefix=f"{self.identity['id'][:8]}-{self.identity['boots']}-",
            clock=self.reactor,
            memory_limit=config.broker.memory_limit,
            default_prefetch=config.broker.default_prefetch,
            max_delivery_attempts=config.broker.max_delivery_attempts,
            dead_letter_queue=config.broker.dead_letter_queue,
            expiry_queue=config.broker.expiry_queue,
            compile_selector=compile_selector,
            node_id=self.identity["id"],
            tracer=tracer,
        )
        broker = self.broker = vhosts.default
        if config.mesh is not None:
            self.mesh = self._make_mesh(config)  # before recovery: it owns some store records
        recovered = vhosts.recover()
        if self.mesh is not None:
            self.mesh.hold_recovered()
        if recovered:
            log.info("recovered %d persistent messages", recovered)
        yield self.ha.serve(store, self.identity["id"])
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
        permissions = VhostPermissions(config.vhosts.permissions, enabled=not config.anonymous)
        vhosts.follow_permissions(permissions)  # and those made by command, as they change (after recovery)
        limits = VhostLimits(config.vhosts.limits, vhosts)  # after recovery: counts what vhosts hold
        authenticator = Authenticator(config.security.users)
        self.stomp_factory = StompFactory(
            broker,
            settings,
            authenticator,
            authorizer,
            self.reactor,
            node_name=config.name,
            threadpool=self.reactor.getThreadPool(),
            vhosts=vhosts,
            permissions=permissions,
            limits=limits,
        )
        # Before the listeners: its address is reserved from the first SEND.
        state = self._start_management(broker, events, authorizer)
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
            yield self._start_amqp(config.amqp, vhosts, authenticator, authorizer, permissions, limits)
        if self.mesh is not None and config.mesh is not None:
            self.mesh.stomp_address = (self.addresses()[0][1], self.addresses()[0][2])
            yield self.mesh.start()
            if config.mesh.discovery is not None:
                yield self._start_discovery(self.mesh, config.mesh, config.mesh.discovery)
        if config.metrics.redis_url is not None:
            self._start_metrics(config.metrics, config.metrics.redis_url, state, events)
        self._sweeper = task.LoopingCall(vhosts.sweep_expired)
        self._sweeper.clock = self.reactor
        self._sweeper.start(EXPIRY_SWEEP_SECONDS, now=False)
        self.certificates.watch(events)
        self.serving = True
        return self

    @defer.inlineCallbacks
    def start_again(self):
        """Drop the stopped node's parts and start anew (after a failback: as the backup)."""
        self.store = self.broker = self.vhosts = self.mesh = None
        self.stomp_factory = self.amqp_factory = self.discovery = self.dns_discovery = self.metrics = None
        self._sweeper = self._journey_sweeper = None
        self.ports = []
        yield self.start()
        if self.on_restarted is not None:
            self.on_restarted(self)

    def pause_clients(self, pause: bool) -> None:
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

    def _replaced(self, reason: str) -> None:
        """The mesh found this node was taken over by another process: fenced."""
        self.ha.replaced(reason)

    def _start_journeys(self) -> Tracer | None:
        """[journeys] on: the store that keeps the records and the tracer that makes them
        (the default vhost's; the others' are views of it). Off: no tracer, no cost."""
        config = self.config.journeys
        if not config.enabled:
            self.journeys = None
            return None
        journeys = self.journeys = JourneyStore(config.max_records, config.max_bytes, config.max_age_s,
                                                self.reactor.seconds)
        self._journey_sweeper = task.LoopingCall(journeys.sweep)
        self._journey_sweeper.clock = self.reactor
        self._journey_sweeper.start(JOURNEY_SWEEP_SECONDS, now=False)
        log.info("journeys: recording traced messages (at most %d records, %d bytes, %d s)",
                 config.max_records, config.max_bytes, config.max_age_s)
        return Tracer(journeys, self.identity["id"], self.config.name, self.reactor.seconds,
                      max_header_bytes=config.max_header_bytes, body_preview=config.body_preview)

    def _start_management(self, broker: Broker, events: EventLog, authorizer: Authorizer) -> LocalState:
        node_id = self.identity["id"]
        state = self.state = LocalState(
            node_id=node_id, name=self.config.name, started_at=self.started_at, broker=broker, mesh=self.mesh,
            clock=self.reactor, addresses=self.model_addresses,
            metrics=self.metrics_status, group_name=self.config.mesh.group_name if self.config.mesh else "",
            ha=self.ha.status, certificates=self.certificates.summaries, vhosts=self.vhosts,
        )
        actions = LocalActions(node_id=node_id, broker=broker, mesh=self.mesh, clock=self.reactor,
                               scale_down_and_stop=self.scale_down_and_stop,
                               failback=self.ha.failback if self.config.ha.replicated else None,
                               reload_tls=self.reload_tls, vhosts=self.vhosts)
        doctor_config = self.config.doctor
        doctor = DoctorFacts(state, window_s=doctor_config.window_s)
        self.management = ManagementService(node_id=node_id, name=self.config.name, broker=broker, mesh=self.mesh,
                                            state=state, actions=actions, events=events, authorizer=authorizer,
                                            journeys=self.journeys, doctor_thresholds=Thresholds.of(doctor_config),
                                            doctor=doctor)
        doctor.sampler.start(doctor_config.sample_s)
        return state

    def _start_metrics(self, config: MetricsConfig, redis_url: str, state: LocalState, events: EventLog) -> None:
        publisher = StreamPublisher(redis_url, config.stream_prefix, config.maxlen, config.buffer)
        metrics = self.metrics = MetricsReporter(publisher, state.snapshot, config.interval_ms / 1000.0, self.reactor,
                                                 config.snapshot_retention_s, roll_window=state.roll_depth_window)
        events.sinks.append(metrics.publish_event)
        if self.journeys is not None:
            self.journeys.sinks.append(metrics.publish_journey_step)
        metrics.start()
        log.info("metrics: writing snapshots every %d ms and events to %s (streams %s:snapshots, %s:events%s)",
                 config.interval_ms, redis_url, config.stream_prefix, config.stream_prefix,
                 f", {config.stream_prefix}:journeys" if self.journeys is not None else "")

    def metrics_status(self) -> MetricsStatus:
        return self.metrics.publisher.status() if self.metrics is not None else MetricsStatus()

    @defer.inlineCallbacks
    def _start_amqp(self, amqp: AmqpConfig, vhosts: VirtualHosts, authenticator: Authenticator,
                    authorizer: Authorizer, permissions: VhostPermissions, limits: VhostLimits):
        from gateway.amqp.protocol import AmqpFactory, AmqpSettings

        settings = AmqpSettings(frame_max=amqp.frame_max, channel_max=amqp.channel_max, heartbeat_s=amqp.heartbeat_s,
                                max_message_size=amqp.max_message_size, max_connections=amqp.max_connections)
        factory = self.amqp_factory = AmqpFactory(vhosts.default, settings, authenticator, authorizer, self.reactor,
                                                  node_name=self.config.name, threadpool=self.reactor.getThreadPool(),
                                                  vhosts=vhosts, permissions=permissions, limits=limits)
        if self.mesh is not None:  # a client on this node sees each queue of the whole mesh
            from management.amqp_mesh import AmqpMeshQueues

            assert self.management is not None  # started before the listeners
            factory.mesh_queues = AmqpMeshQueues(self.identity["id"], self.management, self.mesh.topology)
        self.ports.append(("amqp", (yield self._listen(amqp.bind, factory))))
        if amqp.tls is not None:
            self.ports.append(("amqps", (yield self._listen_tls(amqp.tls, factory))))

    def health_facts(self) -> HealthFacts:
        mesh = self.mesh
        peers = [] if mesh is None else [
            PeerFacts(address=address_text(*c.address), linked=c.peer_id in mesh.peers, gave_up=c.gave_up)
            for c in mesh.connectors]
        listeners = [f"{scheme}://{address_text(host, port)}" for scheme, host, port in self.addresses()]
        return HealthFacts(serving=self.serving, standby=self.ha.state is HaState.STANDBY, stopping=self.stopping,
                           scaling_down=self.scale_down_requested or (mesh is not None and mesh.scaling_down),
                           listeners=listeners, peers=peers)

    def own_metrics(self) -> str:
        """This node in the Prometheus text format, as the console exports it."""
        state = self.state
        if state is None:
            return exposition([], [])
        snapshot = state.current()
        return exposition([NodeUp(snapshot.node.name, snapshot.node.id, True)], [snapshot])

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

    def _listen_tls(self, tls: TlsConfig, factory):
        """With a CA, only clients holding a certificate it signed get in. The endpoint
        asks the material for a context per connection: a reload reaches new handshakes."""
        host, port = tls.bind
        endpoint = endpoints.SSL4ServerEndpoint(self.reactor, port, tls.material, backlog=1024, interface=host)
        return endpoint.listen(factory)

    def reload_tls(self) -> list[ListenerReload]:
        """Re-read every TLS listener's and dialler's files ("stomp+ssl", "wss", "amqps",
        "mesh", "replication"); one that cannot be used keeps its old certificate."""
        return self.certificates.reload()

    def _reload_tls_on_sighup(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set a signal handler (a node run inside a test's thread)
        # The handler runs between two bytecodes of whatever the reactor was doing: it only schedules.
        signal.signal(signal.SIGHUP, lambda signum, frame: self.reactor.callFromThread(self.reload_tls))

    def addresses(self) -> list[tuple[str, str, int]]:
        return [(scheme, port.getHost().host, port.getHost().port) for scheme, port in self.ports]

    @defer.inlineCallbacks
    def stop(self):
        """Stop accepting, close clients, let in-flight store writes finish."""
        self.stopping, self.serving = True, False
        if self._sweeper is not None and self._sweeper.running:
            self._sweeper.stop()
        if self.management is not None:
            self.management.doctor.sampler.stop()
        if self._journey_sweeper is not None and self._journey_sweeper.running:
            self._journey_sweeper.stop()
        self.certificates.stop()
        self.ha.stop_heartbeats()
        for _, port in self.ports:
            yield port.stopListening()
        self.ports = []
        if self.stomp_factory is not None:
            yield self._close_clients(self.stomp_factory.connections)
        if self.amqp_factory is not None:
            yield self._close_clients(self.amqp_factory.connections)
        mesh_config = self.config.mesh
        if self.mesh is not None and mesh_config is not None and (mesh_config.scale_down or self.scale_down_requested) \
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
        yield self.ha.release()  # the data dir is let go
        if self.http_port is not None:  # last: a probe hears "stopping" to the end
            port, self.http_port = self.http_port, None
            yield port.stopListening()

    def _make_mesh(self, config: NodeConfig) -> MeshNode:
        from mesh.node import MeshNode

        assert config.mesh is not None and self.vhosts is not None, "made for a mesh node, after its vhosts"
        return MeshNode(
            config.mesh,
            node_id=self.identity["id"],
            name=config.name,
            vhosts=self.vhosts,
            started_at=self.started_at,
            stomp_address=config.stomp.bind,
            reactor=self.reactor,
            on_fatal=self._fatal,
            epoch=self.epoch,
            on_fenced=self._replaced,
            tls=None if config.mesh.tls is None else config.mesh.tls.material,
        )

    def _start_discovery(self, mesh: MeshNode, mesh_config: MeshConfig, discovery: DiscoveryConfig):
        from mesh.discovery import Announcement, DiscoveryService
        from mesh.dns_discovery import DnsDiscovery, resolver_for

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
        announcement = Announcement(self.identity["id"], self.config.name, mesh.link_address, (stomp[1], stomp[2]),
                                    mesh_config.group_name, requires_tls=mesh_config.tls is not None)
        self.discovery = DiscoveryService(
            self.reactor, discovery.group, discovery.interface, announcement,
            mesh_config.cluster_password.encode(), discovery.broadcast_period_ms / 1000.0,
            discovery.refresh_timeout_ms / 1000.0,
            on_found=mesh.announced,  # dialled unless its TLS requirement differs from this node's
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
