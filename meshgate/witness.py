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
``--state FILE`` if given)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
from pathlib import Path

from twisted.internet import defer, endpoints, error
from twisted.internet.protocol import ClientFactory, Factory
from twisted.protocols.basic import LineOnlyReceiver

log = logging.getLogger("meshgate.witness")


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


def serve(reactor, bind: tuple[str, int], witness: Witness) -> defer.Deferred:
    factory = Factory.forProtocol(_WitnessProtocol)
    factory.witness = witness
    return endpoints.TCP4ServerEndpoint(reactor, bind[1], interface=bind[0]).listen(factory)


class WitnessUnreachable(Exception):
    pass


class _Ask(LineOnlyReceiver):
    delimiter = b"\n"

    def connectionMade(self) -> None:
        self.sendLine(self.factory.request)

    def lineReceived(self, line: bytes) -> None:
        if not self.factory.done.called:
            self.factory.done.callback(line)
        self.transport.loseConnection()

    def connectionLost(self, reason=None) -> None:
        if not self.factory.done.called:
            self.factory.done.errback(WitnessUnreachable("the witness closed the connection"))


class WitnessClient:
    """Asks the witness; every answer is checked against the password."""

    def __init__(self, reactor, address: tuple[str, int], password: str, timeout_s: float = 1.0) -> None:
        self.reactor = reactor
        self.address = address
        self.password = password
        self.timeout_s = timeout_s

    @defer.inlineCallbacks
    def ask(self, op: str, **fields):
        nonce = os.urandom(8).hex()
        request = {"op": op, "nonce": nonce, **fields}
        factory = ClientFactory.forProtocol(_Ask)
        factory.request = signed(self.password, request)
        factory.done = defer.Deferred()
        host, port = self.address
        endpoint = endpoints.TCP4ClientEndpoint(self.reactor, host, port, timeout=max(1, int(self.timeout_s)))
        timer = self.reactor.callLater(self.timeout_s * 2, lambda: factory.done.called or factory.done.errback(
            WitnessUnreachable("no answer in time")))
        try:
            yield endpoint.connect(factory)
            line = yield factory.done
        except (error.ConnectError, error.TimeoutError, OSError) as problem:
            raise WitnessUnreachable(str(problem)) from None
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


def run(bind: tuple[str, int], password: str, state: Path | None) -> int:
    """``meshgate witness``: serve until stopped."""
    from twisted.internet import reactor

    witness = Witness(password, state=state)

    def listening(port) -> None:
        address = port.getHost()
        print(f"meshgate witness listening on {address.host}:{address.port}", flush=True)

    def failed(failure) -> None:
        print(f"meshgate witness: cannot listen: {failure.getErrorMessage()}", flush=True)
        reactor.stop()

    reactor.callWhenRunning(lambda: serve(reactor, bind, witness).addCallbacks(listening, failed))
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
        self._loop = None
        self._busy = False

    def start(self) -> None:
        from twisted.internet import task

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
