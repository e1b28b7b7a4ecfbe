"""One inter-broker link: handshake with mutual proof of the cluster password,
health checks, and frames handed to the mesh node. Either side may have dialled."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from typing import TYPE_CHECKING

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import ClientFactory, Protocol, ServerFactory
from twisted.python.failure import Failure
from zope.interface import implementer

from mesh.codec import (
    FrameType,
    LinkError,
    LinkParser,
    decode_control,
    decode_message,
    encode_control,
    encode_frame,
)
from mesh.large import ChunkAssembler, ChunkedSender
from mesh.quorum import answer_vote

if TYPE_CHECKING:
    from mesh.node import MeshNode

log = logging.getLogger(__name__)
# 2: messages carry their accept time; 3: mesh-wide definitions; 4: HELLO carries the node's epoch (fencing).
# Quorum votes (mesh.quorum) need no new version: a HELLO's "votes" flag says a node answers them, a VOTE is
# only sent to such a node, and it comes on a connection that never becomes a link.
PROTOCOL_VERSION = 4
SELF_LINK = "a link to this node itself"  # a refusal: a discovery listed this node's own address


def _proof(password: str, nonce: str, node_id: str) -> str:
    return hmac.new(password.encode(), (nonce + node_id).encode(), hashlib.sha256).hexdigest()


def _fence_proof(password: str, nonce: str, node_id: str, epoch: int) -> str:
    """Proof that a fencing refusal comes from a node of the mesh (it knows the
    cluster password), made on the refused side's nonce so it cannot be replayed."""
    return hmac.new(password.encode(), f"fence:{nonce}:{node_id}:{epoch}".encode(), hashlib.sha256).hexdigest()


def hello_epoch(hello: dict | None) -> int:
    """The epoch a peer's HELLO presents (0 if none)."""
    epoch = (hello or {}).get("epoch", 0)
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0 else 0


@implementer(IPushProducer)
class LinkProtocol(Protocol):
    def __init__(self, mesh: MeshNode, dialled: bool) -> None:
        self.mesh = mesh
        self.duplicate = False  # refused by the peer as the second of two links dialled both ways
        self.dialled = dialled
        self.parser = LinkParser()
        self.nonce = os.urandom(16).hex()
        self.peer: dict | None = None  # the peer's HELLO
        self.peer_id = ""
        self.authenticated = False
        self.established = False
        self.closing = False
        self.last_received = 0.0
        self._health = None
        self._pending: list[bytes] = []  # encoded messages, written together at the end of this reactor turn
        self.down_reason = ""  # why the link went, when this side knows better than "connection lost"
        self.connector = None  # the Connector that dialled it (dialled links)
        self.large: ChunkedSender | None = None
        self.assembler = ChunkAssembler()

    # -- lifecycle ----------------------------------------------------------------------

    def connectionMade(self) -> None:
        mesh = self.mesh
        self.last_received = mesh.reactor.seconds()
        mesh.own_nonces.add(self.nonce)
        self.large = ChunkedSender(mesh.reactor, self.transport.write, self._queue)
        self.transport.registerProducer(self, True)  # pauses the large messages' pieces while the socket lags
        if hasattr(self.transport, "setTcpNoDelay"):  # STORED and RELEASED are small: no Nagle wait
            self.transport.setTcpNoDelay(True)
        self.send_control(FrameType.HELLO, mesh.hello(self.nonce))
        self._health = mesh.reactor.callLater(mesh.config.check_period_ms / 1000.0, self._check)

    def connectionLost(self, reason: Failure = None) -> None:
        self.closing = True
        self.mesh.own_nonces.discard(self.nonce)
        if self.large is not None:
            self.large.stop()
        if self._health is not None and self._health.active():
            self._health.cancel()
        if self.established:
            self.established = False
            if not self.down_reason:
                self.down_reason = "connection lost" if reason is None or not reason.check(ConnectionDone) \
                    else "closed by the peer"
            self.mesh.link_down(self)

    def _check(self) -> None:
        if self.closing:
            return
        mesh = self.mesh
        if mesh.reactor.seconds() - self.last_received > mesh.config.connection_ttl_ms / 1000.0:
            log.warning("mesh link to %s: nothing received for connection_ttl; dropping it", self.peer_name)
            self.down_reason = f"nothing received for {mesh.config.connection_ttl_ms} ms (connection_ttl_ms)"
            self.transport.abortConnection()
            return
        self.send_control(FrameType.PING)
        self._health = mesh.reactor.callLater(mesh.config.check_period_ms / 1000.0, self._check)

    @property
    def peer_name(self) -> str:
        return self.peer.get("name", "?") if self.peer else str(self.transport.getPeer())

    def refuse(self, reason: str, expected: bool = False, fenced: int | None = None) -> None:
        """Close the link telling the peer why; ``expected`` refusals (two nodes that
        dialled each other keep one link) are not worth a warning. ``fenced``: the
        peer presented an older epoch of its node id than this node has seen; the
        refusal carries that epoch with a proof, so the peer knows it was replaced."""
        log.log(logging.DEBUG if expected else logging.WARNING, "mesh link %s refused: %s", self.peer_name, reason)
        self.down_reason = f"refused: {reason}"
        body: dict = {"reason": reason}
        if fenced is not None and self.peer is not None:
            body["fenced"] = fenced
            body["proof"] = _fence_proof(self.mesh.config.cluster_password, str(self.peer.get("nonce", "")),
                                         self.mesh.node_id, fenced)
        self.send_control(FrameType.REFUSE, body)
        self.closing = True
        self.transport.loseConnection()

    def refuse_stale(self, newer: int) -> None:
        """The peer's node id has been seen at epoch ``newer``, above the one it presents."""
        self.refuse(f"node id {self.peer_id} presented epoch {hello_epoch(self.peer)}, but this node has seen "
                    f"epoch {newer} of it: it was replaced (its data dir taken over by another process) and "
                    "must stop", fenced=newer)

    # -- frames -------------------------------------------------------------------------

    def send_control(self, kind: int, body: object = None) -> None:
        if self._pending:
            self.flush()  # frames keep their order on the wire
        self.transport.write(encode_control(kind, body))

    def send_encoded(self, kind: int, payload: bytes) -> None:
        """A control frame whose JSON body is encoded already."""
        if self._pending:
            self.flush()
        self.transport.write(encode_frame(kind, payload))

    def send_message(self, frame: bytes, address: str = "") -> None:
        """Send an encoded message: a large one in pieces (mesh.large), keeping the
        order of messages for one ``address``."""
        if self.peer is not None and self.peer.get("chunks") and self.large is not None:
            self.large.offer(frame, address)
        else:
            self._queue(frame)

    def _queue(self, frame: bytes) -> None:
        """Queue an encoded frame; a dispatch burst goes out as one write."""
        pending = self._pending
        pending.append(frame)
        if len(pending) == 1:
            self.mesh.reactor.callLater(0, self.flush)

    def flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending = []
            self.transport.write(data)

    # -- IPushProducer: the socket says when its buffer is full ---------------------------

    def pauseProducing(self) -> None:
        if self.large is not None:
            self.large.pause()

    def resumeProducing(self) -> None:
        if self.large is not None and not self.closing:
            self.large.resume()

    def stopProducing(self) -> None:
        pass

    def dataReceived(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_received = self.mesh.reactor.seconds()
        try:
            frames = self.parser.feed(data)
            for kind, payload in frames:
                if self.closing:
                    return
                self._handle(kind, payload)
        except LinkError as error:
            self.refuse(str(error))

    def _handle(self, kind: int, payload: bytes) -> None:
        mesh = self.mesh
        if kind == FrameType.MESSAGE and self.established:
            message, origin, target, redistributed = decode_message(payload)
            mesh.message_received(self, message, origin, target, redistributed)
        elif kind == FrameType.CHUNK and self.established:
            whole = self.assembler.add(payload)
            if whole is not None:
                self._handle(FrameType.MESSAGE, whole)
        elif kind == FrameType.STORED and self.established:
            mesh.stored(self, decode_control(payload))
        elif kind == FrameType.BUSY and self.established:
            mesh.busy(self, decode_control(payload))
        elif kind == FrameType.RELEASED and self.established:
            mesh.released(self, decode_control(payload))
        elif kind == FrameType.PING:
            self.send_control(FrameType.PONG)
        elif kind == FrameType.PONG:
            pass
        elif kind == FrameType.HELLO and self.peer is None:
            self._hello(decode_control(payload))
        elif kind == FrameType.VOTE and self.peer is None and not self.dialled:
            self._vote(decode_control(payload))
        elif kind == FrameType.AUTH and self.peer is not None and not self.authenticated:
            self._auth(decode_control(payload))
        elif kind == FrameType.REFUSE:
            body = decode_control(payload)
            body = body if isinstance(body, dict) else {}
            reason = str(body.get("reason", ""))
            self.closing = True
            self.transport.loseConnection()
            mesh.refused(self, reason)
            if "fenced" in body:
                self._fenced(body, reason)
        elif kind == FrameType.DEMAND and self.established:
            mesh.demand_received(self, decode_control(payload))
        elif kind == FrameType.TOPOLOGY and self.established:
            mesh.topology.received(self, payload)
        elif kind == FrameType.MARKERS and self.established:
            mesh.markers_received(self, decode_control(payload))
        elif kind == FrameType.DURABLE and self.established:
            mesh.durable_received(self, decode_control(payload))
        elif kind == FrameType.DEFINITIONS and self.established:
            mesh.definitions.received(self, decode_control(payload))
        elif kind == FrameType.ASK and self.established:
            mesh.ask_received(self, decode_control(payload))
        elif kind == FrameType.HAVE and self.established:
            mesh.have_received(self, decode_control(payload))
        elif kind == FrameType.LEAVING and self.established:
            mesh.leaving_received(self)
        elif kind == FrameType.FORGET and self.established:
            mesh.forget_received(self, decode_control(payload))
        elif kind == FrameType.REQUEST and self.established:
            mesh.router.request_received(self, decode_control(payload))
        elif kind == FrameType.REPLY and self.established:
            mesh.router.reply_received(self, decode_control(payload))
        else:
            raise LinkError(f"unexpected link frame type {kind} at this point")

    def _fenced(self, body: dict, reason: str) -> None:
        """The peer refused this node as a replaced one: stop, if the refusal is
        proven (made with the cluster password on this link's nonce) and names an
        epoch above this node's; a refusal anyone could forge stops nothing."""
        mesh = self.mesh
        epoch = body.get("fenced")
        if not isinstance(epoch, int) or self.peer is None:
            return
        expected = _fence_proof(mesh.config.cluster_password, self.nonce, self.peer_id, epoch)
        if not hmac.compare_digest(str(body.get("proof", "")), expected):
            log.warning("mesh: %s sent a fencing refusal without a valid proof; ignored", self.peer_name)
            return
        if epoch > mesh.epoch:
            mesh.fenced(f"{self.peer_name} has seen epoch {epoch} of this node id {mesh.node_id}, above this "
                        f"node's epoch {mesh.epoch}: another process took this node's data dir over, so this one "
                        f"was replaced ({reason})")

    def _vote(self, request: object) -> None:
        """A backup asks, instead of a HELLO, whether this node still hears its primary
        (mesh.quorum): one answer, then the connection closes; it never is a link."""
        address = self.transport.getPeer()
        voter = f"{getattr(address, 'host', '?')}:{getattr(address, 'port', '?')}"
        self.send_control(FrameType.VOTED, answer_vote(self.mesh, self.nonce, request, voter))
        self.closing = True
        self.transport.loseConnection()

    def _hello(self, hello: dict) -> None:
        if not isinstance(hello, dict) or hello.get("version") != PROTOCOL_VERSION or "node_id" not in hello:
            raise LinkError("not a Meshgate link peer of this protocol version")
        self.peer = hello
        self.peer_id = hello["node_id"]
        newer = self.mesh.newer_epoch(hello)
        if newer is not None:
            self.refuse_stale(newer)
            return
        problem = self.mesh.check_peer(hello)
        if problem == SELF_LINK:
            if self.dialled:
                self.mesh.dialled_itself(self)
            self.refuse(problem, expected=True)
            return
        if problem:
            self.refuse(problem)
            return
        config = self.mesh.config
        if hello.get("user") != config.cluster_user:
            self.refuse("wrong cluster_user")
            return
        self.send_control(FrameType.AUTH, {"proof": _proof(config.cluster_password, hello["nonce"], self.mesh.node_id)})

    def _auth(self, auth: dict) -> None:
        expected = _proof(self.mesh.config.cluster_password, self.nonce, self.peer_id)
        if not isinstance(auth, dict) or not hmac.compare_digest(str(auth.get("proof", "")), expected):
            self.refuse("wrong cluster_password")
            return
        self.authenticated = True
        self.established = True
        self.mesh.link_up(self)


class LinkServerFactory(ServerFactory):
    def __init__(self, mesh: MeshNode) -> None:
        self.mesh = mesh

    def buildProtocol(self, addr) -> LinkProtocol:
        return LinkProtocol(self.mesh, dialled=False)


class LinkClientFactory(ClientFactory):
    def __init__(self, mesh: MeshNode, connector) -> None:
        self.mesh = mesh
        self.connector_state = connector

    def buildProtocol(self, addr) -> LinkProtocol:
        link = LinkProtocol(self.mesh, dialled=True)
        link.connector = self.connector_state
        return link

    def clientConnectionFailed(self, connector, reason: Failure) -> None:
        self.connector_state.failed()

    def clientConnectionLost(self, connector, reason: Failure) -> None:
        self.connector_state.failed()
