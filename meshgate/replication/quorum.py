"""The backup's quorum in a mesh (docs/ha.md, "Takeover and quorum"): without a
witness, a backup whose primary looks gone asks the mesh's other nodes — the
``[mesh] static`` peers in its own configuration — whether they still hear the
primary's node id, over one short-lived connection to each peer's mesh listener
that never becomes a link (the wire and the peer's side: :mod:`mesh.quorum`).

It takes over only if a strict majority of those peers says yes; a peer that
cannot be reached, does not answer in time, runs a Meshgate without votes, or
cannot prove the cluster password counts as a no."""

from __future__ import annotations

import logging
import os
from typing import Any

from twisted.internet import defer, endpoints, error
from twisted.internet.protocol import ClientFactory, Protocol
from twisted.python.failure import Failure

from gateway.hostile_log import PeerLog
from gateway.tls import TlsMaterial
from mesh.codec import LinkParser, encode_control
from mesh.quorum import check_voted, make_vote
from mesh.wire import FrameType, LinkError, decode_control

log = logging.getLogger("meshgate.replication")


class _Ask(Protocol):
    """One question to one peer: wait for its HELLO, send the VOTE, read the VOTED."""

    def __init__(self, factory: _AskFactory) -> None:
        self.factory = factory
        self.parser = LinkParser()
        self.nonce = os.urandom(16).hex()
        self.peer_name = ""

    def dataReceived(self, data: bytes) -> None:
        try:
            for kind, payload in self.parser.feed(data):
                self._frame(kind, decode_control(payload))
                if self.factory.done.called:
                    break
        except LinkError as problem:
            self._finish(f"sent something that is not a link frame ({problem})")
        if self.factory.done.called:
            self.transport.loseConnection()

    def _frame(self, kind: int, body: object) -> None:
        ask = self.factory
        body = body if isinstance(body, dict) else {}
        if kind == FrameType.HELLO and not self.peer_name:
            self.peer_name = str(body.get("name", "?"))
            if not body.get("votes"):
                self._finish("runs a Meshgate that answers no quorum votes (its HELLO has no \"votes\")")
                return
            if body.get("node_id") == ask.node_id:
                self._finish("is the primary itself (the same node id): it lives")
                return
            self.transport.write(encode_control(FrameType.VOTE, make_vote(
                ask.password, str(body.get("nonce", "")), op=ask.op, node_id=ask.node_id, epoch=ask.epoch,
                after_ms=ask.after_ms, user=ask.user, nonce=self.nonce)))
        elif kind == FrameType.VOTED:
            answer = check_voted(ask.password, self.nonce, body)
            if answer is None or answer.get("nonce") != self.nonce:
                self._finish("answered without a valid proof of the cluster password")
                return
            ask.done.callback(answer)
        elif kind == FrameType.REFUSE:
            self._finish(f"refused the question: {body.get('reason', '')}")
        else:
            self._finish(f"sent frame type {kind} instead of an answer")

    def _finish(self, reason: str) -> None:
        if not self.factory.done.called:
            self.factory.done.callback({"granted": False, "reason": reason, "name": self.peer_name, "error": True})

    def connectionLost(self, reason: Failure = None) -> None:
        self._finish("closed the connection without answering")


class _AskFactory(ClientFactory):
    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)
        self.done = defer.Deferred()

    def buildProtocol(self, addr) -> _Ask:
        return _Ask(self)


class MeshQuorum:
    """Asks the peers of ``[mesh] static`` (``peers``) about the primary's node id."""

    def __init__(self, reactor, peers: tuple[tuple[str, int], ...], password: str, user: str,
                 timeout_s: float = 1.0, tls: TlsMaterial | None = None) -> None:
        self.reactor = reactor
        # [mesh.tls]: the peers' mesh listeners speak only TLS; a vote is asked over it, as a link dials.
        self.tls = tls
        self._tls_log = PeerLog(log, reactor.seconds, per_minute=1) if tls is not None else None
        self.peers = tuple(peers)
        self.password = password
        self.user = user
        self.timeout_s = timeout_s

    @property
    def needed(self) -> int:
        """Yes votes that make a strict majority of the peers."""
        return len(self.peers) // 2 + 1

    @defer.inlineCallbacks
    def _ask_one(self, address: tuple[str, int], **fields):
        factory = _AskFactory(password=self.password, user=self.user, **fields)
        host, port = address
        dialled: Any = factory  # the factory, or TLS wrapping it (Twisted types factories by zope interface)
        if self.tls is not None and self._tls_log is not None:
            dialled = self.tls.client_factory(factory, host, port, self._tls_log, self.reactor)
        endpoint = endpoints.TCP4ClientEndpoint(self.reactor, host, port, timeout=max(1, int(self.timeout_s)))
        timer = self.reactor.callLater(self.timeout_s * 2, lambda: factory.done.called or factory.done.callback(
            {"granted": False, "reason": "gave no answer in time", "error": True}))
        protocol = None
        try:
            protocol = yield endpoint.connect(dialled)
            answer = yield factory.done
        except (error.ConnectError, error.TimeoutError, OSError) as problem:
            answer = {"granted": False, "reason": f"cannot be reached ({problem.__class__.__name__})",
                      "error": True}
        except Exception as problem:  # noqa: BLE001 -- whatever went wrong, this peer's answer is a no
            answer = {"granted": False, "reason": f"cannot be asked ({problem})", "error": True}
        finally:
            if timer.active():
                timer.cancel()
        if protocol is not None and protocol.transport is not None:
            protocol.transport.loseConnection()
        return {**answer, "address": f"{host}:{port}"}

    def _ask_all(self, **fields) -> defer.Deferred:
        asks = [self._ask_one(address, **fields) for address in self.peers]
        return defer.gatherResults(asks, consumeErrors=True)

    @defer.inlineCallbacks
    def vote(self, node_id: str, epoch: int, after_s: float):
        """``{"granted": bool, "reason": the peers' answers, one line, "yes": n, "needed": n}``."""
        answers = yield self._ask_all(op="vote", node_id=node_id, epoch=epoch, after_ms=int(after_s * 1000))
        yes_nodes = {a.get("node_id") or a["address"] for a in answers if a.get("granted") is True}
        parts = []
        for answer in answers:
            who = f"{answer.get('name') or '?'} ({answer['address']})"
            verdict = "yes" if answer.get("granted") is True else "no"
            parts.append(f"{who}: {verdict}, {answer.get('reason', '')}")
        granted = len(yes_nodes) >= self.needed
        reason = (f"{len(yes_nodes)} of the {len(self.peers)} other node(s) of [mesh] static agree, a majority "
                  f"needs {self.needed}: " + "; ".join(parts))
        # What the backup logs once per distinct verdict (the seconds in the reasons change every time).
        key = tuple((a["address"], a.get("granted") is True, bool(a.get("error"))) for a in answers)
        return {"granted": granted, "reason": reason, "yes": len(yes_nodes), "needed": self.needed, "key": key}

    @defer.inlineCallbacks
    def highest_epoch(self, node_id: str):
        """The highest epoch of ``node_id`` any reachable peer has seen (0: none known)."""
        answers = yield self._ask_all(op="epoch", node_id=node_id, epoch=0, after_ms=0)
        known = [a.get("known") for a in answers if not a.get("error")]
        return max([k for k in known if isinstance(k, int) and not isinstance(k, bool)], default=0)
