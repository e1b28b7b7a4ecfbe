"""Simulated mesh nodes with the management layer on top, as meshgate.node wires it:
each node has its EventLog (given to the Broker, so the broker and the mesh report
into it), a LocalState, LocalActions and a ManagementService answering both the
management address and the requests the mesh routes to it.

Everything runs over twisted.test.iosim on the harness's MemoryReactorClock: a
request is only carried when the harness pumps (``settle``), and a timeout only
fires when the clock is advanced. Restarts are not supported."""

from __future__ import annotations

from typing import Any

import msgspec
from twisted.internet import defer
from twisted.test import iosim

from gateway.broker.vhosts import VirtualHosts
from gateway.selector import compile_selector
from management.actions import LocalActions
from management.events import EventLog
from management.service import ManagementService
from management.state import LocalState
from mesh.link import LinkProtocol
from mesh.node import MeshNode
from mesh.wire import FrameType, decode_control
from meshgate.config import MeshConfig
from model.events import AdminAction
from model.mesh import Addresses, address_text
from model.requests import Reply, Request, decode_reply
from tests.protocol.mesh_harness import KeepingStore, MeshHarness, SimNode


class RecordingLink(LinkProtocol):
    """A link end that notes every frame its node receives, for tests to see which
    way a request went."""

    def __init__(self, node: ManagedNode, dialled: bool) -> None:
        super().__init__(node.mesh.links, dialled)
        self.received_frames = node.received_frames

    def _handle(self, kind: int, payload: bytes) -> None:
        self.received_frames.append((kind, payload))
        super()._handle(kind, payload)


class ManagedNode(SimNode):
    """A SimNode whose Broker reports into an EventLog, with the management layer."""

    def __init__(self, harness: ManagementHarness, name: str, node_id: str | None = None, **config) -> None:
        self._wanted_id = node_id
        super().__init__(harness, name, **config)

    def _boot(self, store: KeepingStore, node_id: str) -> None:
        if self.boots:
            raise NotImplementedError("the management harness does not restart nodes")
        node_id = self._wanted_id or node_id
        clock = self.harness.clock
        self.boots += 1
        self.events = EventLog(node_id, clock)
        self.vhosts = VirtualHosts(store, clock=clock, compile_selector=compile_selector, events=self.events,
                                   message_id_prefix=f"{self.name}-{self.boots}-")
        self.broker = self.vhosts.default
        self.mesh = MeshNode(MeshConfig(**self.config), node_id=node_id, name=self.name, vhosts=self.vhosts,
                             started_at=clock.seconds(), stomp_address=("127.0.0.1", 0), reactor=clock)
        self.received_frames: list[tuple[int, bytes]] = []  # (frame type, payload) as RecordingLink saw them
        self.state = LocalState(node_id=node_id, name=self.name, started_at=clock.seconds(), broker=self.broker,
                                mesh=self.mesh, clock=clock, addresses=self.addresses)
        self.actions = LocalActions(node_id=node_id, broker=self.broker, mesh=self.mesh, clock=clock,
                                    scale_down_and_stop=self._scale_down_and_stop)
        self.service = ManagementService(node_id=node_id, name=self.name, broker=self.broker, mesh=self.mesh,
                                         state=self.state, actions=self.actions, events=self.events,
                                         authorizer=None)
        self.scale_down_requested = 0

    def restart(self) -> None:
        raise NotImplementedError("the management harness does not restart nodes")

    def addresses(self) -> Addresses:
        return Addresses(stomp=address_text(*self.mesh.stomp_address), link=address_text(*self.mesh.link_address))

    def _scale_down_and_stop(self) -> None:
        self.scale_down_requested += 1

    @property
    def id(self) -> str:
        return self.mesh.node_id

    # -- asking -----------------------------------------------------------------------------

    def execute(self, request: Request | bytes, user: str = "tester", admin: bool = True) -> list[Reply]:
        """Start a request at this node; the list gets the Reply once it comes (pump to get it)."""
        body = request if isinstance(request, bytes) else msgspec.json.encode(request)
        replies: list[Reply] = []
        d: defer.Deferred = self.service.execute(body, user, admin)
        d.addCallback(replies.append)
        return replies

    def ask(self, request: Request | bytes, user: str = "tester", admin: bool = True) -> Reply:
        """A request executed here, the mesh settled, and the Reply as a client reads
        it off the wire (its result typed by model.requests.decode_reply)."""
        replies = self.execute(request, user, admin)
        self.harness.settle()
        assert len(replies) == 1, f"no reply to {request!r} after the mesh settled"
        return wire(replies[0])

    # -- looking ----------------------------------------------------------------------------

    def frames(self, kind: int) -> list[Any]:
        """The decoded control frames of this type this node received over its links."""
        return [decode_control(payload) for frame_kind, payload in self.received_frames if frame_kind == kind]

    def requests_seen(self) -> list[dict]:
        return self.frames(FrameType.REQUEST)

    def admin_events(self) -> list[AdminAction]:
        return [event for event in self.events.recent if isinstance(event, AdminAction)]


EPOCH = 1_700_000_000.0  # where the harness's clock starts: event logs and ages treat time 0 as "never"


class ManagementHarness(MeshHarness):
    def __init__(self, **defaults) -> None:
        super().__init__(**defaults)
        self.clock.advance(EPOCH)

    def node(self, name: str, node_id: str | None = None, **config) -> ManagedNode:
        return ManagedNode(self, name, node_id, **config)

    def link(self, dialler: SimNode, acceptor: SimNode):
        # As MeshHarness.link, with link ends that record what they receive.
        server = RecordingLink(acceptor, dialled=False)
        client = RecordingLink(dialler, dialled=True)
        pump = iosim.connect(server, iosim.FakeTransport(server, True), client, iosim.FakeTransport(client, False),
                             clock=self.clock)
        self.pumps.append(pump)
        self.settle()
        return pump

    def gossip(self, *nodes: SimNode) -> None:
        """Each node tells its neighbours what it knows of the mesh, in turn, as
        their check_period_ms loops would; the mesh settles after each."""
        for node in nodes:
            node.mesh.topology.gossip()
            self.settle()


def wire(reply: Reply) -> Reply:
    """A Reply as a client gets it: encoded to JSON, decoded with its result typed."""
    return decode_reply(msgspec.json.encode(reply))
