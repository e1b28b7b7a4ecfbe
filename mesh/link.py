"""One inter-broker link: handshake with mutual proof of the cluster password,
health checks, and the frames of an established link handed to the part that
registered for their type (mesh.wire.FrameTable). Either side may have dialled.

The handshake: both sides send a HELLO (who they are, and a nonce); the dialler
proves the password first (AUTH: an HMAC on the listener's nonce), and the listener
proves it only once it has checked the dialler's proof. So a node never makes a
proof for someone who has not proven the password: otherwise anyone could connect
to one node, hand it another node's nonce, and relay the proof it gets back to pass
for it there. What a HELLO claims (a node id, an epoch) is acted upon only once its
sender has proven the password: a refusal that fences a replaced process, or the
stop of a node whose data dir was copied, is never caused by an unproven peer.

A link is in one state (LinkState) at a time::

    AWAITING_HELLO --HELLO--> PROVING --AUTH--> PROVEN --admitted--> ESTABLISHED
          |  (listening: a VOTE is answered, then closed)                   |
          +------------- refused, or the connection went -------------> CLOSED"""

from __future__ import annotations

import enum
import hashlib
import hmac
import logging
import os
from typing import TYPE_CHECKING, Any, Protocol, cast

from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import ClientFactory, ServerFactory
from twisted.internet.protocol import Protocol as TwistedProtocol
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.broker.errors import BrokerError
from gateway.hostile_log import PeerLog
from gateway.transport import Transport
from mesh.codec import LinkParser, encode_control, encode_frame
from mesh.identity import OLDEST_PROTOCOL, PROTOCOL_VERSION, SELF_LINK, Identity
from mesh.large import ChunkedSender
from mesh.peers import DUPLICATE_LINK, PeerTable
from mesh.quorum import VoteJudge, answer_vote, same_proof
from mesh.settings import Clock, MeshSettings
from mesh.wire import (
    Auth,
    FrameTable,
    FrameType,
    Hello,
    LinkError,
    Refuse,
    decode_auth,
    decode_control,
    decode_hello,
    decode_refuse,
)

if TYPE_CHECKING:
    from mesh.dialling import Connector

__all__ = ["PROTOCOL_VERSION", "SELF_LINK", "LinkContext", "LinkProtocol", "LinkServerFactory", "LinkClientFactory",
           "LinkState"]

log = logging.getLogger(__name__)
REASON_LIMIT = 200  # characters of a peer's refusal reason that are logged and passed on
_TLS_RECORDS = (b"\x16\x03", b"\x15\x03")  # a TLS handshake or alert record where a HELLO should be


class LinkState(enum.Enum):
    AWAITING_HELLO = "awaiting the peer's HELLO"  # (a listener: or a VOTE instead)
    PROVING = "awaiting the peer's proof"  # its HELLO read; the dialler has proven the password already
    PROVEN = "proven"  # the peer proved the password; its HELLO is checked against what this node knows
    ESTABLISHED = "established"  # frames go to the frame table
    CLOSED = "closed"  # refused, closing or gone: nothing more is read


_ESTABLISHED = LinkState.ESTABLISHED  # read per frame: a module global, not an enum attribute lookup
_CLOSED = LinkState.CLOSED
_PROVEN = (LinkState.PROVEN, LinkState.ESTABLISHED)


class LinkContext:
    """What the links of one node share: who the node is, its peer table and frame
    table, the quorum votes it answers, its clock and settings, and one PeerLog for
    what unproven peers make it log (rate-limited per address: anyone can connect)."""

    def __init__(self, identity: Identity, peers: PeerTable, frames: FrameTable, votes: VoteJudge, clock: Clock,
                 config: MeshSettings) -> None:
        self.identity = identity
        self.peers = peers
        self.frames = frames
        self.votes = votes
        self.clock = clock
        self.config = config
        self.peer_log = PeerLog(log, clock.seconds)


class _Transport(Transport, Protocol):
    """What a link uses of its Twisted transport: a stream's, and whose producer it has."""

    producer: Any


def _proof(password: str, nonce: str, node_id: str) -> str:
    return hmac.new(password.encode(), (nonce + node_id).encode(), hashlib.sha256).hexdigest()


def _fence_proof(password: str, nonce: str, node_id: str, epoch: int) -> str:
    """Proof that a fencing refusal comes from a node of the mesh (it knows the
    cluster password), made on the refused side's nonce so it cannot be replayed."""
    return hmac.new(password.encode(), f"fence:{nonce}:{node_id}:{epoch}".encode(), hashlib.sha256).hexdigest()


@implementer(IPushProducer)
class LinkProtocol(TwistedProtocol):
    def __init__(self, context: LinkContext, dialled: bool) -> None:
        self.context = context
        self._handlers = context.frames.handlers
        self.dialled = dialled
        self.state = LinkState.AWAITING_HELLO
        self.parser = LinkParser()
        self.nonce = os.urandom(16).hex()
        self._hello: Hello | None = None  # the peer's
        self.peer_id = ""
        self.last_received = 0.0
        self._health: Any = None
        self._pending: list[bytes] = []  # encoded messages, written together at the end of this reactor turn
        self.down_reason = ""  # why the link went, when this side knows better than "connection lost"
        self.connector: Connector | None = None  # the Connector that dialled it (dialled links)
        self.large: ChunkedSender | None = None
        self._chunks = False  # the peer takes large messages in pieces
        self.protocol = OLDEST_PROTOCOL  # the link protocol both sides speak, once the peer's HELLO is read
        self.out: _Transport = cast(_Transport, None)  # the transport, once connected

    # -- lifecycle ----------------------------------------------------------------------

    def connectionMade(self) -> None:
        context = self.context
        clock = context.clock
        self.out = out = cast(_Transport, self.transport)
        self.last_received = clock.seconds()
        context.identity.own_nonces.add(self.nonce)
        self.large = ChunkedSender(clock, out.write, self._queue)
        out.registerProducer(self, True)  # pauses the large messages' pieces while the socket lags
        if hasattr(out, "setTcpNoDelay"):  # STORED and RELEASED are small: no Nagle wait
            out.setTcpNoDelay(True)
        self.send_control(FrameType.HELLO, context.identity.hello(self.nonce))
        self._health = clock.callLater(context.config.check_period_ms / 1000.0, self._check)

    def connectionLost(self, reason: Failure | None = None) -> None:
        if self.dialled and self.state is LinkState.AWAITING_HELLO and reason is not None \
                and reason.check(ConnectionDone):
            self.context.peer_log.warning(self.peer_host, "mesh link to %s closed before its HELLO: does it "
                                          "require TLS ([mesh.tls] on one side only)?", self.peer_name)
        self.state = _CLOSED
        self.context.identity.own_nonces.discard(self.nonce)
        if self.large is not None:
            self.large.stop()
        if self._health is not None and self._health.active():
            self._health.cancel()
        if not self.down_reason:
            self.down_reason = "connection lost" if reason is None or not reason.check(ConnectionDone) \
                else "closed by the peer"
        if self._hello is not None:
            self.context.peers.link_lost(self)

    def _check(self) -> None:
        if self.state is _CLOSED:
            return
        context = self.context
        ttl_ms = context.config.connection_ttl_ms
        if context.clock.seconds() - self.last_received > ttl_ms / 1000.0:
            log.warning("mesh link to %s: nothing received for connection_ttl; dropping it", self.peer_name)
            self.down_reason = f"nothing received for {ttl_ms} ms (connection_ttl_ms)"
            self.out.abortConnection()
            return
        self.send_control(FrameType.PING)
        self._health = context.clock.callLater(context.config.check_period_ms / 1000.0, self._check)

    @property
    def hello(self) -> Hello:
        """The peer's HELLO (a link past AWAITING_HELLO has one)."""
        if self._hello is None:
            raise LinkError("the peer has not said HELLO")
        return self._hello

    @property
    def peer_name(self) -> str:
        return self._hello.name if self._hello is not None else str(self.out.getPeer())

    @property
    def peer_host(self) -> str:
        return str(getattr(self.out.getPeer(), "host", "?"))

    @property
    def peer_address(self) -> tuple[str, int]:
        address = self.out.getPeer()
        return (address.host, address.port)

    def refuse(self, reason: str, expected: bool = False, fenced: int | None = None) -> None:
        """Close the link telling the peer why; ``expected`` refusals (two nodes that
        dialled each other keep one link) are not worth a warning. ``fenced``: the
        peer presented an older epoch of its node id than this node has seen; the
        refusal carries that epoch with a proof, so the peer knows it was replaced."""
        if expected or self.state in _PROVEN:
            log.log(logging.DEBUG if expected else logging.WARNING, "mesh link %s refused: %s", self.peer_name, reason)
        else:
            self.context.peer_log.warning(self.peer_host, "mesh link %s refused: %s", self.peer_name, reason)
        self.down_reason = f"refused: {reason}"
        body = Refuse(reason)
        if fenced is not None and self._hello is not None:
            body = Refuse(reason, fenced, _fence_proof(self.context.config.cluster_password, self._hello.nonce,
                                                       self.context.identity.node_id, fenced))
        self.send_control(FrameType.REFUSE, body)
        self.close()

    def close(self) -> None:
        """Close once what is written is out. The producer goes first: Twisted closes a
        connection whose producer it paused (the socket was full) only once that
        producer is unregistered; it would resume it instead and the socket would stay
        open for good."""
        self.state = _CLOSED
        if getattr(self.out, "producer", None) is not None:
            self.out.unregisterProducer()
        self.out.loseConnection()

    def refuse_stale(self, newer: int) -> None:
        """The peer's node id has been seen at epoch ``newer``, above the one it presents."""
        self.refuse(f"node id {self.peer_id} presented epoch {self.hello.epoch}, but this node has seen "
                    f"epoch {newer} of it: it was replaced (its data dir taken over by another process) and "
                    "must stop", fenced=newer)

    # -- frames -------------------------------------------------------------------------

    def send_control(self, kind: int, body: object = None) -> None:
        if self._pending:
            self.flush()  # frames keep their order on the wire
        self.out.write(encode_control(kind, body))

    def send_encoded(self, kind: int, payload: bytes) -> None:
        """A control frame whose JSON body is encoded already."""
        if self._pending:
            self.flush()
        self.out.write(encode_frame(kind, payload))

    def send_message(self, frame: bytes, address: str = "") -> None:
        """Send an encoded message: a large one in pieces (mesh.large), keeping the
        order of messages for one ``address``."""
        if self._chunks and self.large is not None:
            self.large.offer(frame, address)
        else:
            self._queue(frame)

    def _queue(self, frame: bytes) -> None:
        """Queue an encoded frame; a dispatch burst goes out as one write."""
        pending = self._pending
        pending.append(frame)
        if len(pending) == 1:
            self.context.clock.callLater(0, self.flush)

    def flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending = []
            self.out.write(data)

    # -- IPushProducer: the socket says when its buffer is full ---------------------------

    def pauseProducing(self) -> None:
        if self.large is not None:
            self.large.pause()

    def resumeProducing(self) -> None:
        if self.large is not None and self.state is not _CLOSED:
            self.large.resume()

    def stopProducing(self) -> None:
        pass

    def dataReceived(self, data: bytes) -> None:
        if self.state is _CLOSED:
            return
        self.last_received = self.context.clock.seconds()
        try:
            for kind, payload in self.parser.feed(data):
                if self.state is _CLOSED:
                    return
                self._handle(kind, payload)
        except LinkError as error:
            reason = str(error)
            if self.state is LinkState.AWAITING_HELLO and data[:2] in _TLS_RECORDS:
                reason = f"peer {self.peer_host} speaks TLS; this node has no [mesh.tls] (docs/mesh.md)"
            self.refuse(reason)
        except BrokerError as error:  # what the peer asked of the broker is refused (a selector that does not parse)
            self.refuse(str(error)[:REASON_LIMIT])
        except Exception as error:  # a bug of ours on what the peer sent: this link goes, the node goes on
            self.context.peer_log.internal_error(self.peer_host, f"mesh link {self.peer_name}", error)
            self.refuse("internal error on a frame from this peer (see this node's log)")

    def _handle(self, kind: int, payload: bytes) -> None:
        if self.state is _ESTABLISHED:
            handler = self._handlers.get(kind)
            if handler is not None:
                handler(self, payload)
                return
        state = self.state
        if kind == FrameType.PING:
            self.send_control(FrameType.PONG)
        elif kind == FrameType.PONG:
            pass
        elif kind == FrameType.REFUSE:
            self._refused(decode_refuse(payload))
        elif kind == FrameType.HELLO and state is LinkState.AWAITING_HELLO:
            self._hello_received(payload)
        elif kind == FrameType.VOTE and state is LinkState.AWAITING_HELLO and not self.dialled:
            self._vote(decode_control(payload))
        elif kind == FrameType.AUTH and state is LinkState.PROVING:
            self._auth(decode_auth(payload))
        else:
            raise LinkError(f"unexpected link frame type {kind} at this point")

    # -- the handshake --------------------------------------------------------------------

    def _refused(self, refusal: Refuse) -> None:
        reason = refusal.reason[:REASON_LIMIT]
        proven = self.state in _PROVEN
        self.close()
        if proven:
            # Two nodes that dialled each other keep one link: the other one's refusal is routine,
            # and so is the end of this link, should it have been up here.
            duplicate = reason == DUPLICATE_LINK
            if duplicate:
                self.down_reason = DUPLICATE_LINK
            log.log(logging.DEBUG if duplicate else logging.WARNING, "mesh: %s refused the link: %s", self.peer_name,
                    reason)
        else:  # as above, but anyone can connect and refuse: rate-limited
            self.context.peer_log.warning(self.peer_host, "mesh: %s refused the link: %s", self.peer_name, reason)
        if refusal.fenced is not None:
            self._fenced(refusal.fenced, refusal.proof, reason)

    def _fenced(self, epoch: int, proof: str | None, reason: str) -> None:
        """The peer refused this node as a replaced one: stop, if the refusal is
        proven (made with the cluster password on this link's nonce) and names an
        epoch above this node's; a refusal anyone could forge stops nothing."""
        if self._hello is None:
            return
        identity = self.context.identity
        expected = _fence_proof(self.context.config.cluster_password, self.nonce, self.peer_id, epoch)
        if not same_proof(proof, expected):
            self.context.peer_log.warning(self.peer_host, "mesh: %s sent a fencing refusal without a valid proof; "
                                                          "ignored", self.peer_name)
            return
        if epoch > identity.epoch:
            identity.fenced(f"{self.peer_name} has seen epoch {epoch} of this node id {identity.node_id}, above "
                            f"this node's epoch {identity.epoch}: another process took this node's data dir over, "
                            f"so this one was replaced ({reason})")

    def _vote(self, request: object) -> None:
        """A backup asks, instead of a HELLO, whether this node still hears its primary
        (mesh.quorum): one answer, then the connection closes; it never is a link."""
        address = self.out.getPeer()
        voter = f"{getattr(address, 'host', '?')}:{getattr(address, 'port', '?')}"
        self.send_control(FrameType.VOTED, answer_vote(self.context.votes, self.nonce, request, voter))
        self.close()

    def _hello_received(self, payload: bytes) -> None:
        hello = self._hello = decode_hello(payload, OLDEST_PROTOCOL, PROTOCOL_VERSION)
        self.peer_id = hello.node_id
        self.protocol = hello.protocol(PROTOCOL_VERSION)
        self._chunks = hello.chunks
        self.state = LinkState.PROVING
        identity = self.context.identity
        if hello.node_id == identity.node_id and hello.nonce in identity.own_nonces:
            # Its own HELLO came back (a discovery listed its own address): nothing to prove.
            self._reached_itself()
            self.refuse(SELF_LINK, expected=True)
            return
        if hello.user != self.context.config.cluster_user:
            self.refuse("wrong cluster_user")
            return
        if self.dialled:  # the dialler proves the password first; the listener once it has checked that proof
            self._prove()

    def _prove(self) -> None:
        proof = _proof(self.context.config.cluster_password, self.hello.nonce, self.context.identity.node_id)
        self.send_control(FrameType.AUTH, Auth(proof))

    def _auth(self, auth: Auth | None) -> None:
        context = self.context
        expected = _proof(context.config.cluster_password, self.nonce, self.peer_id)
        if auth is None or not same_proof(auth.proof, expected):
            self.refuse("wrong cluster_password")
            return
        self.state = LinkState.PROVEN
        newer = context.peers.newer_epoch(self.hello)
        if newer is not None:
            self.refuse_stale(newer)  # its proof tells the replaced process, which needs no AUTH of ours
            return
        if not self.dialled:
            # Proven, the peer may have ours: a copy of a data dir learns it is one (check_peer) only
            # from a peer that proved the password.
            self._prove()
        problem = context.identity.check_peer(self.hello)
        if problem:
            if problem == SELF_LINK:
                self._reached_itself()
            self.refuse(problem, expected=problem == SELF_LINK)
            return
        self.state = _ESTABLISHED
        connector = self.connector
        if connector is not None and connector.address == self.peer_address:
            connector.connected(self.peer_id)
        context.peers.admit(self)

    def _reached_itself(self) -> None:
        if self.connector is not None:
            self.connector.reached_itself()


class LinkServerFactory(ServerFactory):
    def __init__(self, context: LinkContext) -> None:
        self.context = context

    def buildProtocol(self, addr: Any) -> LinkProtocol:
        return LinkProtocol(self.context, dialled=False)


class LinkClientFactory(ClientFactory):
    def __init__(self, context: LinkContext, connector: Connector) -> None:
        self.context = context
        self.connector_state = connector

    def buildProtocol(self, addr: Any) -> LinkProtocol:
        link = LinkProtocol(self.context, dialled=True)
        link.connector = self.connector_state
        return link

    def clientConnectionFailed(self, connector: Any, reason: Failure) -> None:
        self.connector_state.failed()

    def clientConnectionLost(self, connector: Any, reason: Failure) -> None:
        self.connector_state.failed()
