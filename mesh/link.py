"""One inter-broker link: handshake with mutual proof of the cluster password,
health checks, and frames handed to the mesh node. Either side may have dialled.

The handshake: both sides send a HELLO (who they are, and a nonce); the dialler
proves the password first (AUTH: an HMAC on the listener's nonce), and the listener
proves it only once it has checked the dialler's proof. So a node never makes a
proof for someone who has not proven the password: otherwise anyone could connect
to one node, hand it another node's nonce, and relay the proof it gets back to pass
for it there. What a HELLO claims (a node id, an epoch) is acted upon only once its
sender has proven the password: a refusal that fences a replaced process, or the
stop of a node whose data dir was copied, is never caused by an unproven peer."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import ClientFactory, Protocol, ServerFactory
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.broker.errors import BrokerError
from gateway.hostile_log import PeerLog
from mesh.codec import (
    FrameType,
    LinkError,
    LinkParser,
    check_hello,
    decode_checked,
    decode_control,
    decode_message,
    encode_control,
    encode_frame,
)
from mesh.large import ChunkAssembler, ChunkedSender
from mesh.quorum import answer_vote, same_proof

if TYPE_CHECKING:
    from mesh.node import MeshNode

log = logging.getLogger(__name__)
# 2: messages carry their accept time; 3: mesh-wide definitions; 4: HELLO carries the node's epoch (fencing).
# Quorum votes (mesh.quorum) need no new version: a HELLO's "votes" flag says a node answers them, a VOTE is
# only sent to such a node, and it comes on a connection that never becomes a link.
PROTOCOL_VERSION = 4
SELF_LINK = "a link to this node itself"  # a refusal: a discovery listed this node's own address
REASON_LIMIT = 200  # characters of a peer's refusal reason that are logged and passed on
_peer_logs: WeakKeyDictionary = WeakKeyDictionary()  # mesh node -> its PeerLog for unproven peers


def _peer_log(mesh: MeshNode) -> PeerLog:
    """What unproven peers make a node log is rate-limited per address (anyone can connect)."""
    peer_log = _peer_logs.get(mesh)
    if peer_log is None:
        peer_log = _peer_logs[mesh] = PeerLog(log, mesh.reactor.seconds)
    return peer_log


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

    @property
    def peer_host(self) -> str:
        return str(getattr(self.transport.getPeer(), "host", "?"))

    def refuse(self, reason: str, expected: bool = False, fenced: int | None = None) -> None:
        """Close the link telling the peer why; ``expected`` refusals (two nodes that
        dialled each other keep one link) are not worth a warning. ``fenced``: the
        peer presented an older epoch of its node id than this node has seen; the
        refusal carries that epoch with a proof, so the peer knows it was replaced."""
        if expected or self.authenticated:
            log.log(logging.DEBUG if expected else logging.WARNING, "mesh link %s refused: %s", self.peer_name, reason)
        else:
            _peer_log(self.mesh).warning(self.peer_host, "mesh link %s refused: %s", self.peer_name, reason)
        self.down_reason = f"refused: {reason}"
        body: dict = {"reason": reason}
        if fenced is not None and self.peer is not None:
            body["fenced"] = fenced
            body["proof"] = _fence_proof(self.mesh.config.cluster_password, str(self.peer.get("nonce", "")),
                                         self.mesh.node_id, fenced)
        self.send_control(FrameType.REFUSE, body)
        self.close()

    def close(self) -> None:
        """Close once what is written is out. The producer goes first: Twisted closes a
        connection whose producer it paused (the socket was full) only once that
        producer is unregistered; it would resume it instead and the socket would stay
        open for good."""
        self.closing = True
        if getattr(self.transport, "producer", None) is not None:
            self.transport.unregisterProducer()
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
        except BrokerError as error:  # what the peer asked of the broker is refused (a selector that does not parse)
            self.refuse(str(error)[:REASON_LIMIT])
        except Exception as error:  # a bug of ours on what the peer sent: this link goes, the node goes on
            _peer_log(self.mesh).internal_error(self.peer_host, f"mesh link {self.peer_name}", error)
            self.refuse("internal error on a frame from this peer (see this node's log)")

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
            mesh.stored(self, decode_checked(kind, payload))
        elif kind == FrameType.BUSY and self.established:
            mesh.busy(self, decode_checked(kind, payload))
        elif kind == FrameType.RELEASED and self.established:
            mesh.released(self, decode_checked(kind, payload))
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
            reason = str(body.get("reason", ""))[:REASON_LIMIT]
            self.close()
            if self.authenticated:
                mesh.refused(self, reason)
            else:  # as mesh.refused says it, but anyone can connect and refuse: rate-limited
                _peer_log(mesh).warning(self.peer_host, "mesh: %s refused the link: %s", self.peer_name, reason)
            if "fenced" in body:
                self._fenced(body, reason)
        elif kind == FrameType.DEMAND and self.established:
            mesh.demand_received(self, decode_checked(kind, payload))
        elif kind == FrameType.TOPOLOGY and self.established:
            mesh.topology.received(self, payload)
        elif kind == FrameType.MARKERS and self.established:
            mesh.markers_received(self, decode_checked(kind, payload))
        elif kind == FrameType.DURABLE and self.established:
            mesh.durable_received(self, decode_checked(kind, payload))
        elif kind == FrameType.DEFINITIONS and self.established:
            mesh.definitions.received(self, decode_checked(kind, payload))
        elif kind == FrameType.ASK and self.established:
            mesh.ask_received(self, decode_checked(kind, payload))
        elif kind == FrameType.HAVE and self.established:
            mesh.have_received(self, decode_checked(kind, payload))
        elif kind == FrameType.LEAVING and self.established:
            mesh.leaving_received(self)
        elif kind == FrameType.FORGET and self.established:
            mesh.forget_received(self, decode_checked(kind, payload))
        elif kind == FrameType.REQUEST and self.established:
            mesh.router.request_received(self, decode_checked(kind, payload))
        elif kind == FrameType.REPLY and self.established:
            mesh.router.reply_received(self, decode_checked(kind, payload))
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
        if not same_proof(body.get("proof"), expected):
            _peer_log(mesh).warning(self.peer_host, "mesh: %s sent a fencing refusal without a valid proof; ignored",
                                    self.peer_name)
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
        self.close()

    def _hello(self, hello: object) -> None:
        self.peer = check_hello(hello, PROTOCOL_VERSION)
        self.peer_id = self.peer["node_id"]
        mesh = self.mesh
        if self.peer_id == mesh.node_id and self.peer["nonce"] in mesh.own_nonces:
            # Its own HELLO came back (a discovery listed its own address): nothing to prove.
            if self.dialled:
                mesh.dialled_itself(self)
            self.refuse(SELF_LINK, expected=True)
            return
        if self.peer.get("user") != mesh.config.cluster_user:
            self.refuse("wrong cluster_user")
            return
        if self.dialled:  # the dialler proves the password first; the listener once it has checked that proof
            self._prove()

    def _prove(self) -> None:
        proof = _proof(self.mesh.config.cluster_password, self.peer["nonce"], self.mesh.node_id)
        self.send_control(FrameType.AUTH, {"proof": proof})

    def _auth(self, auth: object) -> None:
        mesh = self.mesh
        expected = _proof(mesh.config.cluster_password, self.nonce, self.peer_id)
        if not isinstance(auth, dict) or not same_proof(auth.get("proof"), expected):
            self.refuse("wrong cluster_password")
            return
        self.authenticated = True
        newer = mesh.newer_epoch(self.peer)
        if newer is not None:
            self.refuse_stale(newer)  # its proof tells the replaced process, which needs no AUTH of ours
            return
        if not self.dialled:
            # Proven, the peer may have ours: a copy of a data dir learns it is one (check_peer) only
            # from a peer that proved the password.
            self._prove()
        problem = mesh.check_peer(self.peer)
        if problem:
            if problem == SELF_LINK and self.dialled:
                mesh.dialled_itself(self)
            self.refuse(problem, expected=problem == SELF_LINK)
            return
        self.established = True
        mesh.link_up(self)


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
