"""The witness of replicated pairs (``meshgate witness``, docs/ha.md).

A tiny process that a primary/backup pair can both reach. The serving process
says it is alive every ``ha.heartbeat_ms`` (``alive``: node id, epoch); a backup
that lost its primary asks to take over (``claim``: node id, the next epoch, how
long the primary must have been silent). The witness grants a claim only if it
has not heard the node's current epoch for that long, and records the new epoch:
from then on it answers the old epoch's ``alive`` with ``fenced`` (that process
was replaced and stops), and a process starting as primary asks it (``status``)
whether it was replaced while away. So a cut replication link alone never makes
two primaries: the witness still hears the primary and refuses the claim. A
serving process that hands the node over on request (``meshgate ha failback``)
first says ``release`` (node id, its epoch): the witness forgets having heard it,
so the backup's claim of the next epoch is granted at once, by the same rule.

One JSON object per line each way over TCP, one request per connection; both
carry an HMAC of the pair's password (``ha.password``) so that neither side
can be fooled by a stranger. The witness keeps its table in memory (and in
``--state FILE`` if given).

With ``--certificate``/``--private-key``/``--ca-certificate`` the witness speaks
only TLS and requires a client certificate its CA signed (it cannot check a
member's host name: it never dials, and members come from anywhere); a member
with TLS (``[ha.tls]``, else ``[mesh.tls]``) dials it over TLS, checks its
certificate against the same CA and, with ``verify_hostname``, that it names the
witness's address, and refuses a witness that speaks plaintext: no answer counts
as none, so no takeover is granted. The HMAC proof still runs inside TLS."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, cast

from twisted.internet import defer, endpoints, error, task
from twisted.internet.protocol import ClientFactory, Factory
from twisted.protocols.basic import LineOnlyReceiver

from gateway.hostile_log import PeerLog
from gateway.tls import TlsMaterial

log = logging.getLogger("meshgate.witness")
_TLS_RECORD = b"\x16\x03"  # how a TLS ClientHello starts: a handshake record, version 3.x
TLS_OPTIONS = "--certificate, --private-key and --ca-certificate"


def _sign(password: str, body: dict) -> str:
    text = json.dumps({k: v for k, v in body.items() if k != "proof"}, sort_keys=True, separators=(",", ":"))
    return hmac.new(password.encode(), f"witness:{text}".encode(), hashlib.sha256).hexdigest()


def signed(password: str, body: dict) -> bytes:
    return json.dumps({**body, "proof": _sign(password, body)}, separators=(",", ":")).encode()


def verify(password: str, body: dict) -> bool:
    return hmac.compare_digest(str(body.get("proof", "")), _sign(password, body))


class Witness:
    """What the witness knows: per node id, the highest epoch and when it last heard it."""

    def __init__(self, password: str, clock=time.monotonic, state: Path | None = None) -> None:
        self.password = password
        self.clock = clock
        self.state = state
        self.epochs: dict[str, int] = {}
        self.heard: dict[str, float] = {}  # node id -> when its current epoch last said it is alive
        if state is not None and state.exists():
            self.epochs = {str(k): int(v) for k, v in json.loads(state.read_text()).items()}

    def _save(self) -> None:
        if self.state is not None:
            tmp = self.state.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.epochs))
            os.replace(tmp, self.state)

    def answer(self, request: dict) -> dict:
        if not verify(self.password, request):
            return {"error": "bad proof (the pair's ha.password differs from the witness's)"}
        op, node_id, epoch = request.get("op"), str(request.get("node_id", "")), request.get("epoch", 0)
        if not isinstance(epoch, int):
            return {"error": "epoch must be an integer"}
        known = self.epochs.get(node_id, 0)
        now = self.clock()
        if op == "alive":
            if epoch < known:
                return {"fenced": known}
            if epoch > known:
                self.epochs[node_id] = epoch
                self._save()
                log.info("witness: node %s serves at epoch %d", node_id, epoch)
            self.heard[node_id] = now
            return {"ok": True}
        if op == "release":
            if epoch != known:
                return {"released": False, "epoch": known}
            self.heard.pop(node_id, None)
            log.info("witness: node %s at epoch %d hands over (failback): the next claim need not wait", node_id,
                     epoch)
            return {"released": True}
        if op == "status":
            heard = self.heard.get(node_id)
            return {"epoch": known, "silent_s": None if heard is None else round(now - heard, 3)}
        if op == "claim":
            after = float(request.get("after_s", 0))
            heard = self.heard.get(node_id)
            if epoch <= known:
                return {"granted": False, "reason": f"epoch {epoch} is not above the known epoch {known}"}
            if heard is not None and now - heard < after:
                return {"granted": False, "reason": f"the witness heard the primary {now - heard:.1f} s ago: it "
                                                    "lives, only the replication link is cut"}
            self.epochs[node_id] = epoch
            self.heard[node_id] = now  # the new primary's own heartbeats follow
            self._save()
            log.warning("witness: node %s taken over at epoch %d (the old epoch %d was silent)", node_id, epoch,
                        known)
            return {"granted": True}
        return {"error": f"unknown op {op!r}"}


class _WitnessProtocol(LineOnlyReceiver):
    delimiter = b"\n"
    MAX_LENGTH = 4096
    factory: _WitnessFactory
    transport: Any  # TCP, or TLS over it
    _first = True

    def dataReceived(self, data: bytes) -> None:
        first, self._first = self._first, False
        if first and self.factory.plaintext and data.startswith(_TLS_RECORD):
            # A member that requires TLS: answer in plaintext, so its TLS layer says at once
            # that this witness speaks plaintext, instead of waiting out its handshake.
            host = getattr(self.transport.getPeer(), "host", "?")
            self.factory.mismatch_log.warning(host, "witness: member %s speaks TLS; this witness has no TLS (%s)",
                                              host, TLS_OPTIONS)
            self.sendLine(b'{"error":"this witness speaks plaintext"}')
            self.transport.loseConnection()
            return
        super().dataReceived(data)

    def lineReceived(self, line: bytes) -> None:
        witness: Witness = self.factory.witness
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError
        except ValueError:
            self.transport.loseConnection()
            return
        reply = witness.answer(request)
        reply["nonce"] = request.get("nonce", "")
        self.sendLine(signed(witness.password, reply))
        self.transport.loseConnection()


class _WitnessFactory(Factory):
    protocol = _WitnessProtocol

    def __init__(self, witness: Witness, plaintext: bool, mismatch_log: PeerLog) -> None:
        self.witness = witness
        self.plaintext = plaintext  # no TLS: a member's ClientHello is answered in plaintext
        self.mismatch_log = mismatch_log  # members speaking the other way, once a minute per address


def serve(reactor, bind: tuple[str, int], witness: Witness, tls: TlsMaterial | None = None) -> defer.Deferred:
    """Listen on ``bind``: plain TCP, or with ``tls`` only TLS with a client certificate
    its CA signed (a refused handshake is logged once a minute per member address)."""
    factory = _WitnessFactory(witness, tls is None, PeerLog(log, reactor.seconds, per_minute=1))
    listened: Any = factory  # the factory, or TLS wrapping it (Twisted types factories by zope interface)
    if tls is not None:
        listened = tls.server_factory(cast(Any, factory), factory.mismatch_log, reactor)
    return endpoints.TCP4ServerEndpoint(reactor, bind[1], interface=bind[0]).listen(listened)


class WitnessUnreachable(Exception):
    pass


class _Ask(LineOnlyReceiver):
    delimiter = b"\n"
    factory: _AskFactory
    transport: Any  # TCP, or TLS over it

    def connectionMade(self) -> None:
        self.sendLine(self.factory.request)

    def lineReceived(self, line: bytes) -> None:
        if not self.factory.done.called:
            self.factory.done.callback(line)
        self.transport.loseConnection()

    def connectionLost(self, reason=None) -> None:
        factory = self.factory
        if not factory.done.called:
            why = ("the TLS handshake failed or it closed the connection" if factory.tls else
                   "it closed the connection without answering (if it requires TLS, this member needs [ha.tls] or "
                   "[mesh.tls])")
            factory.done.errback(WitnessUnreachable(why))


class _AskFactory(ClientFactory):
    protocol = _Ask

    def __init__(self, request: bytes, tls: bool) -> None:
        self.request = request  # the signed line to send
        self.tls = tls
        self.done: defer.Deferred = defer.Deferred()  # fires with the answer's line


class _WitnessTlsLog(PeerLog):
    """The reasons TlsMaterial gives for a failed handshake (once a minute), told as
    being about the witness: "witness HOST:PORT speaks plaintext; this node requires TLS"."""

    def __init__(self, reactor, address: tuple[str, int]) -> None:
        super().__init__(log, reactor.seconds, per_minute=1)
        self.address = f"{address[0]}:{address[1]}"

    def log(self, level: int, peer: str, message: str, *args: object) -> None:
        text = (message % args if args else message).removeprefix("tls: ")
        if text.startswith(f"peer {self.address} "):
            text = "witness" + text.removeprefix("peer")
        else:
            text = f"witness {self.address}: {text}"
        super().log(level, peer, "ha: %s", text)


class WitnessClient:
    """Asks the witness; every answer is checked against the password. With ``tls``
    every request goes over mutual TLS (a witness speaking plaintext is unreachable)."""

    def __init__(self, reactor, address: tuple[str, int], password: str, timeout_s: float = 1.0,
                 tls: TlsMaterial | None = None) -> None:
        self.reactor = reactor
        self.address = address
        self.password = password
        self.timeout_s = timeout_s
        self.tls = tls
        self._tls_log = _WitnessTlsLog(reactor, address) if tls is not None else None

    @defer.inlineCallbacks
    def ask(self, op: str, **fields):
        nonce = os.urandom(8).hex()
        request = {"op": op, "nonce": nonce, **fields}
        factory = _AskFactory(signed(self.password, request), self.tls is not None)
        host, port = self.address
        dialled: Any = factory  # the factory, or TLS wrapping it (Twisted types factories by zope interface)
        if self.tls is not None and self._tls_log is not None:
            # The handshake must be done within the first half of the time an answer may take.
            dialled = self.tls.client_factory(cast(Any, factory), host, port, self._tls_log, self.reactor,
                                              timeout=self.timeout_s)
        endpoint = endpoints.TCP4ClientEndpoint(self.reactor, host, port, timeout=max(1, int(self.timeout_s)))
        timer = self.reactor.callLater(self.timeout_s * 2, lambda: factory.done.called or factory.done.errback(
            WitnessUnreachable("no answer in time")))
        protocol = None
        try:
            protocol = yield endpoint.connect(dialled)
            line = yield factory.done
        except (error.ConnectError, error.TimeoutError, OSError) as problem:
            raise WitnessUnreachable(str(problem)) from None
        except WitnessUnreachable:
            if protocol is not None and protocol.transport is not None:
                protocol.transport.loseConnection()  # given up on (a stalled handshake, no answer in time)
            raise
        finally:
            if timer.active():
                timer.cancel()
        try:
            reply = json.loads(line)
        except ValueError:
            raise WitnessUnreachable("an answer that is not JSON") from None
        if not isinstance(reply, dict) or not verify(self.password, reply) or reply.get("nonce") != nonce:
            raise WitnessUnreachable("an answer without a valid proof")
        if "error" in reply:
            raise WitnessUnreachable(str(reply["error"]))
        return reply

    @defer.inlineCallbacks
    def claim(self, node_id: str, epoch: int, after_s: float):
        """``{"granted": bool, "reason": …}``; unreachable is a refusal (no quorum)."""
        try:
            reply = yield self.ask("claim", node_id=node_id, epoch=epoch, after_s=after_s)
        except WitnessUnreachable as problem:
            return {"granted": False, "reason": f"the witness at {self.address[0]}:{self.address[1]} cannot be "
                                                f"reached ({problem}): no quorum"}
        return reply


def run(bind: tuple[str, int], password: str, state: Path | None, tls: TlsMaterial | None = None) -> int:
    """``meshgate witness``: serve until stopped (with ``tls``: only over mutual TLS)."""
    from twisted.internet import reactor

    witness = Witness(password, state=state)

    def listening(port) -> None:
        address = port.getHost()
        print(f"meshgate witness listening on {address.host}:{address.port} "
              f"({'mutual TLS' if tls is not None else 'plain TCP'})", flush=True)

    def failed(failure) -> None:
        print(f"meshgate witness: cannot listen: {failure.getErrorMessage()}", flush=True)
        reactor.stop()

    reactor.callWhenRunning(lambda: serve(reactor, bind, witness, tls).addCallbacks(listening, failed))
    reactor.run()
    return 0


class WitnessReporter:
    """The serving process tells the witness it is alive; a ``fenced`` answer means
    another process took the node over (``on_replaced``)."""

    def __init__(self, client: WitnessClient, node_id: str, epoch: int, interval_s: float, on_replaced) -> None:
        self.client = client
        self.node_id = node_id
        self.epoch = epoch
        self.interval_s = interval_s
        self.on_replaced = on_replaced
        self.reachable: bool | None = None
        self._loop: task.LoopingCall | None = None
        self._busy = False

    def start(self) -> None:
        if self._loop is not None and self._loop.running:
            return
        self._loop = task.LoopingCall(self._beat)
        self._loop.clock = self.client.reactor
        self._loop.start(self.interval_s, now=True)

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    @property
    def busy(self) -> bool:
        """A heartbeat is on its way (it may still reach the witness after ``stop``)."""
        return self._busy

    @defer.inlineCallbacks
    def _beat(self):
        if self._busy:
            return
        self._busy = True
        try:
            reply = yield self.client.ask("alive", node_id=self.node_id, epoch=self.epoch)
        except WitnessUnreachable as problem:
            if self.reachable is not False:
                log.warning("ha: the witness at %s:%d cannot be reached (%s)", *self.client.address, problem)
            self.reachable = False
            return
        finally:
            self._busy = False
        if self.reachable is False:
            log.info("ha: the witness answers again")
        self.reachable = True
        fenced = reply.get("fenced")
        if isinstance(fenced, int) and fenced > self.epoch:
            self.stop()
            self.on_replaced(f"the witness has seen epoch {fenced} of node id {self.node_id}, above this process's "
                             f"epoch {self.epoch}: the backup took over, so this process was replaced")
