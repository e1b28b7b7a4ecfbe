"""The backup's side: following the primary's stream into its own data dir,
acknowledging what it made durable, and deciding when to take over: with the
witness, or without one with the mesh's other nodes (``quorum``)."""

from __future__ import annotations

import hmac
import logging
import os
import re
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

from twisted.internet import defer, task
from twisted.internet.interfaces import IHandshakeListener
from twisted.internet.protocol import ClientFactory, Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.store.files import fsync_dir
from meshgate.config.ha import ReplicationTlsConfig
from meshgate.datadir import read_epoch
from meshgate.replication.codec import (
    _U32,
    ACK,
    AUTH,
    BEGIN,
    CATALOG,
    CHALLENGE,
    DELETE,
    END,
    FILE,
    INCOMPLETE,
    KIND_NAMES,
    PING,
    PONG,
    REFUSE,
    SEGMENT,
    SNAPSHOT_FILES,
    TAKEN,
    TAKEOVER,
    WELCOME,
    WRITE,
    Parser,
    ReplicationError,
    _check_name,
    _json,
    decode_file,
    decode_write,
    encode,
    encode_json,
    encode_position,
    proof,
)
from meshgate.replication.quorum import MeshQuorum
from meshgate.replication.tls import COMPLAIN_EVERY_S, MISMATCH_HINT, LinkTransport, client_endpoint
from meshgate.witness import WitnessClient

log = logging.getLogger("meshgate.replication")  # one logger for the whole link, both sides


class ReplicaFiles:
    """The backup's copy in its own data dir: files written as the primary wrote them."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.dir = self.root / "journal"
        self._fds: dict[str, int] = {}
        self._dirty: set[str] = set()

    @property
    def complete(self) -> bool:
        return not (self.root / INCOMPLETE).exists()

    def begin(self) -> None:
        """A fresh copy: what this data dir held is set aside (``journal.old``)."""
        self.close()
        marker = self.root / INCOMPLETE
        marker.write_text("a copy from the primary is under way: this data dir must not serve\n")
        fsync_dir(self.root)
        old = self.root / "journal.old"
        if old.exists():
            shutil.rmtree(old)
        if self.dir.exists():
            os.replace(self.dir, old)
        self.dir.mkdir()
        for name in SNAPSHOT_FILES:  # the copy brings them whole; no stale tail may stay
            (self.root / name).unlink(missing_ok=True)
        fsync_dir(self.root)

    def write(self, name: str, offset: int, data: bytes | memoryview) -> None:
        fd = self._fds.get(name)
        if fd is None:
            fd = self._fds[name] = os.open(self.root / name, os.O_WRONLY | os.O_CREAT, 0o644)
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            offset += written
            view = view[written:]
        self._dirty.add(name)

    def create(self, name: str) -> None:
        self.write(name, 0, b"")

    def delete(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
        self._dirty.discard(name)
        (self.root / name).unlink(missing_ok=True)

    def replace(self, name: str, data: bytes) -> None:
        """A small whole file (the catalog), replaced atomically."""
        tmp = self.root / (name + ".tmp")
        with open(tmp, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, self.root / name)
        fsync_dir(self.root)

    def sync(self) -> None:
        for name in self._dirty:
            fd = self._fds.get(name)
            if fd is not None:
                os.fdatasync(fd)
        if self._dirty:
            fsync_dir(self.dir)
        self._dirty.clear()
        for name in [n for n in self._fds if n in SNAPSHOT_FILES]:  # small files: not kept open
            os.close(self._fds.pop(name))

    def finish(self) -> None:
        self.sync()
        fsync_dir(self.root)
        (self.root / INCOMPLETE).unlink(missing_ok=True)
        fsync_dir(self.root)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._dirty.clear()


@implementer(IHandshakeListener)
class _FollowerProtocol(Protocol):
    transport: LinkTransport  # type: ignore[assignment]  # Twisted's is ITransport | None: see gateway.transport

    def __init__(self, follower: ReplicaFollower) -> None:
        self.follower = follower
        self.parser = Parser()
        self.nonce = os.urandom(16).hex()
        self.welcomed = False
        self.copying = False
        self.last_received = 0.0
        self.held: list[tuple[int, bytes]] | None = None  # frames after a TAKEOVER, until it is decided
        self.handshake_done = False  # TLS: the handshake finished (unused on a plain link)
        self.received_any = False

    def handshakeCompleted(self) -> None:
        self.handshake_done = True

    def connectionMade(self) -> None:
        self.last_received = self.follower.reactor.seconds()
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)

    def dataReceived(self, data: bytes) -> None:
        self.last_received = self.follower.reactor.seconds()
        self.received_any = True
        try:
            frames = self.parser.feed(data)
        except (ReplicationError, struct.error) as problem:
            log.warning("replication: following %s failed: %s; reconnecting", self.follower.peer_text, problem)
            self.transport.abortConnection()
            return
        self._apply(frames)

    def _apply(self, frames: list[tuple[int, bytes]]) -> None:
        follower = self.follower
        if self.held is not None:  # a TAKEOVER is being decided: what follows waits
            self.held.extend(frames)
            return
        try:
            ack = None
            for index, (kind, payload) in enumerate(frames):
                if kind == TAKEOVER:
                    self.held = list(frames[index + 1:])
                    follower.files.sync()
                    follower.handover(self, _json(payload))
                    break
                position = self._frame(kind, payload)
                if position is not None:
                    ack = position
            if ack is not None:
                # One sync and one ack for everything this read brought: the group commit.
                follower.files.sync()
                follower.acked = max(follower.acked, ack)
                self.transport.write(encode_position(ACK, ack))
        except (ReplicationError, struct.error, OSError) as problem:
            log.warning("replication: following %s failed: %s; reconnecting", follower.peer_text, problem)
            self.transport.abortConnection()

    def _frame(self, kind: int, payload: bytes) -> int | None:
        follower = self.follower
        files = follower.files
        if kind == WRITE:
            segment, offset, end, data = decode_write(payload)
            files.write(f"journal/{segment:08d}.log", offset, data)
            follower.received = max(follower.received, end)
            return None if self.copying else end
        if kind == PING:
            body = _json(payload)
            written = body.get("written", 0)
            follower.primary_written = written if isinstance(written, int) else 0
            self.transport.write(encode(PONG))
            return None
        if kind == SEGMENT:
            files.create(f"journal/{_U32.unpack_from(payload)[0]:08d}.log")
            return None
        if kind == DELETE:
            name = payload.decode()
            _check_name(name)
            files.delete(name)
            return None
        if kind == CATALOG:
            files.replace("catalog.json", payload)
            return None
        if kind == FILE:
            if not self.copying:
                raise ReplicationError("FILE outside a copy")
            name, offset, data = decode_file(payload)
            files.write(name, offset, data)
            return None
        if kind == BEGIN:
            body = _json(payload)
            self.copying = True
            follower.caught_up = False
            files.begin()
            log.info("replication: copying the primary's journal (%d segment files, position %s)",
                     len(body.get("files", [])), body.get("position"))
            return None
        if kind == END:
            body = _json(payload)
            position = int(body.get("position", 0))
            files.finish()
            self.copying = False
            follower.caught_up = True
            follower.received = max(follower.received, position)
            follower.epoch = read_epoch(follower.files.root)
            log.info("replication: caught up with the primary (epoch %d); following its journal", follower.epoch)
            return position
        if kind == CHALLENGE:
            body = _json(payload)
            self.transport.write(encode_json(AUTH, {
                "proof": proof(follower.password, str(body.get("nonce", "")), "backup"),
                "nonce": self.nonce, "epoch": read_epoch(follower.files.root)}))
            return None
        if kind == WELCOME:
            body = _json(payload)
            if not hmac.compare_digest(str(body.get("proof", "")), proof(follower.password, self.nonce, "primary")):
                raise ReplicationError("the primary did not prove the password")
            own = read_epoch(follower.files.root)
            epoch = body.get("epoch", 0)
            if isinstance(epoch, int) and epoch < own:
                raise ReplicationError(f"the primary serves epoch {epoch}, older than this data dir's {own}")
            self.welcomed = True
            follower.welcomed(self, body)
            return None
        if kind == REFUSE:
            raise ReplicationError(f"refused by the primary: {_json(payload).get('reason')}")
        raise ReplicationError(f"unexpected {KIND_NAMES[kind]} from the primary")

    def release_held(self) -> None:
        """The TAKEOVER was refused: go on following with what arrived meanwhile."""
        held, self.held = self.held or [], None
        if held and self.transport is not None:
            self._apply(held)

    def connectionLost(self, reason: Failure | None = None) -> None:
        if self.follower.tls is not None and not self.handshake_done and not self.follower._stopped:
            why = reason.getErrorMessage() if reason is not None else "closed"
            self.follower.complain("backup: the TLS handshake with the primary's replication listener at %s failed "
                                   "(%s): %s", self.follower.peer_text, why, MISMATCH_HINT)
        self.follower.lost(self)


class _FollowerFactory(ClientFactory):
    def __init__(self, follower: ReplicaFollower) -> None:
        self.follower = follower

    def buildProtocol(self, addr) -> _FollowerProtocol:
        return _FollowerProtocol(self.follower)


class ReplicaFollower:
    """The backup: follows the primary; ``wait()`` fires once it must take over.

    ``state``: ``connecting``, ``catching-up``, ``in-sync``, ``primary-lost``."""

    def __init__(self, root: Path, reactor, *, peer: tuple[str, int], password: str, witness: WitnessClient | None,
                 heartbeat_s: float, takeover_after_s: float, force: bool,
                 node_id: Callable[[], str], tls: ReplicationTlsConfig | None = None,
                 quorum: MeshQuorum | None = None) -> None:
        self.files = ReplicaFiles(root)
        self.tls = tls  # None: a plain TCP link
        self.reactor = reactor
        self.peer = peer
        self.peer_text = f"{peer[0]}:{peer[1]}"
        self.password = password
        self.witness = witness
        self.quorum = None if witness is not None else quorum  # a witness, when there is one, decides alone
        self._next_vote = 0.0  # the mesh's nodes are asked at most once per takeover_after (min 0.5 s)
        self._verdict: tuple[object, float] = (None, 0.0)  # the mesh's last refusal logged, and when
        self.heartbeat_s = heartbeat_s
        self.takeover_after_s = takeover_after_s
        self.force = force
        self.node_id = node_id
        self.state = "connecting"
        self.caught_up = False
        self.received = 0  # the primary's position this copy reaches
        self.acked = 0
        self.primary_written = 0  # the primary's position at its last heartbeat
        self.epoch = read_epoch(root)
        self.link: _FollowerProtocol | None = None
        self._done: defer.Deferred | None = None
        self._check: task.LoopingCall | None = None
        self._check_s = min(heartbeat_s, takeover_after_s / 3)
        self._last_check = 0.0
        self._lost_at: float | None = None
        self._dialling = False
        self._deciding = False
        self._said = ""
        self._complained: dict[str, float] = {}  # TLS mismatch messages -> when last logged
        self._stopped = False

    def wait(self) -> defer.Deferred:
        self._done = defer.Deferred()
        log.info("backup (ha.mode = replicated): following the primary at %s, with no client listeners and no mesh "
                 "links until a takeover", self.peer_text)
        self._dial()
        self._check = task.LoopingCall(self._tick)
        self._check.clock = self.reactor
        self._last_check = self.reactor.seconds()
        self._check.start(self._check_s, now=False)
        return self._done

    def stop(self, graceful: bool = False) -> None:
        self._stopped = True
        if self._check is not None and self._check.running:
            self._check.stop()
        if self.link is not None:
            if graceful:  # what was written (TAKEN) still goes out
                self.link.transport.loseConnection()
            else:
                self.link.transport.abortConnection()
        self.files.close()

    @defer.inlineCallbacks
    def handover(self, link: _FollowerProtocol, body: dict):
        """The serving member asks this backup to take over (``meshgate ha failback``):
        it has stopped taking client work and everything it wrote up to ``position`` was
        acknowledged here. This backup obtains the next epoch from the witness (so that
        fencing stays one mechanism) and starts serving as a takeover does."""
        position = body.get("position", 0)
        position = position if isinstance(position, int) else 0

        def refuse(reason: str) -> None:
            log.warning("replication: refused to take over from %s on request: %s", self.peer_text, reason)
            if link.transport is not None:
                link.transport.write(encode_json(TAKEN, {"granted": False, "reason": reason}))
            link.release_held()

        if self._stopped or self._done is None or self._done.called or self._deciding:
            refuse("this backup is stopping or already taking over")
            return
        if not self.caught_up or not self.files.complete or link.copying or self.received < position:
            refuse(f"this backup is behind: it has position {self.received}, the serving member wrote {position}")
            return
        epoch = read_epoch(self.files.root) + 1
        if self.witness is not None:
            self._deciding = True
            try:
                verdict = yield self.witness.claim(self.node_id(), epoch, self.takeover_after_s)
            finally:
                self._deciding = False
            if link is not self.link or self._stopped or self._done.called:
                return
            if not verdict.get("granted"):
                refuse(f"the witness did not grant epoch {epoch}: {verdict.get('reason', 'no')}")
                return
        link.transport.write(encode_json(TAKEN, {"granted": True, "epoch": epoch}))
        log.warning("backup: the primary at %s hands the node over (failback); taking over at epoch %d",
                    self.peer_text, epoch)
        self.stop(graceful=True)
        self._done.callback(epoch)

    @property
    def behind(self) -> bool:
        """Whether this copy may miss what the primary wrote: not caught up, or the
        primary's last heartbeat named a position beyond what arrived here."""
        return not self.caught_up or not self.files.complete or self.primary_written > self.received

    def complain(self, text: str, *args: object) -> None:
        """Log a TLS mismatch at most every 30 s (``_say`` only drops immediate repeats,
        and the redials interleave other lines)."""
        now = self.reactor.seconds()
        if now - self._complained.get(text, -COMPLAIN_EVERY_S) >= COMPLAIN_EVERY_S:
            self._complained[text] = now
            log.warning(text, *args)

    def _say(self, text: str, *args) -> None:
        line = text % args
        if line != self._said:
            self._said = line
            log.warning("%s", line)

    def _dial(self) -> None:
        if self._dialling or self._stopped or self.link is not None:
            return
        self._dialling = True
        endpoint = client_endpoint(self.reactor, self.peer, self.tls, self.takeover_after_s)
        d = endpoint.connect(_FollowerFactory(self))

        def connected(protocol: _FollowerProtocol) -> None:
            self._dialling = False
            self.link = protocol

        def failed(failure: Failure) -> None:
            self._dialling = False
            if self._lost_at is None:
                self._lost_at = self.reactor.seconds()
            self._say("backup: cannot reach the primary's replication listener at %s (%s)", self.peer_text,
                      failure.getErrorMessage())
        d.addCallbacks(connected, failed)

    def welcomed(self, link: _FollowerProtocol, body: dict) -> None:
        self._lost_at = None
        self._said = ""
        self._verdict = (None, 0.0)
        self.state = "catching-up"
        log.info("replication: linked with the primary at %s (epoch %s)", self.peer_text, body.get("epoch"))

    def lost(self, link: _FollowerProtocol) -> None:
        if link is not self.link:
            return
        self.link = None
        if self._lost_at is None:
            self._lost_at = self.reactor.seconds()
        if not self._stopped:
            log.warning("replication: the link to the primary at %s is gone", self.peer_text)

    def _tick(self) -> None:
        now = self.reactor.seconds()
        paused = now - self._last_check > 3 * self._check_s  # this process was stopped (SIGSTOP) or starved
        self._last_check = now
        link = self.link
        if link is not None:
            if paused:
                link.last_received = now
            elif now - link.last_received > self.takeover_after_s:
                log.warning("replication: nothing from the primary for %.1f s; dropping the link",
                            now - link.last_received)
                if not link.received_any and self.tls is None:
                    self.complain("backup: the replication listener at %s accepted the connection but sent nothing "
                                  "(no CHALLENGE): it probably expects TLS ([ha.tls] is set there, not here): %s",
                                  self.peer_text, MISMATCH_HINT)
                link.transport.abortConnection()
            self.state = "in-sync" if self.caught_up and link.welcomed and not link.copying else "catching-up"
            return
        self.state = "primary-lost"
        if self._lost_at is not None and now - self._lost_at >= min(self.takeover_after_s, 0.5) \
                and not self._deciding:
            self._decide()
        self._dial()

    @defer.inlineCallbacks
    def _decide(self):
        """The primary is unreachable: take over if this copy is whole and the witness agrees."""
        if not self.files.complete or read_epoch(self.files.root) == 0:
            self._say("backup: the primary at %s is unreachable, but this backup never had a whole copy of its "
                      "journal: it cannot take over (docs/ha.md)", self.peer_text)
            return
        if self.behind and not self.force:
            self._say("backup: the primary at %s is unreachable, but this backup is behind (it has position %d, the "
                      "primary said %d): a takeover now would lose messages the primary acknowledged; refused. Set "
                      "ha.force_takeover = true to take over anyway, accepting that loss", self.peer_text,
                      self.received, self.primary_written)
            return
        if self.witness is None and self.quorum is None:
            self._say("backup: the primary at %s is unreachable; no ha.witness is configured and no [mesh] static "
                      "peers to ask, so there is no quorum and no automatic takeover (docs/ha.md)", self.peer_text)
            return
        now = self.reactor.seconds()
        if self.witness is None and now < self._next_vote:
            return
        self._deciding = True
        try:
            epoch = read_epoch(self.files.root) + 1
            if self.witness is not None:
                verdict = yield self.witness.claim(self.node_id(), epoch, self.takeover_after_s)
            else:
                assert self.quorum is not None  # one of the two, checked above
                self._next_vote = now + max(0.5, self.takeover_after_s)
                verdict = yield self.quorum.vote(self.node_id(), epoch, self.takeover_after_s)
        finally:
            self._deciding = False
        if self._stopped or self.link is not None or self._done is None or self._done.called:
            return
        if not verdict.get("granted"):
            reason = str(verdict.get("reason", "no"))
            # Once per distinct verdict, else every COMPLAIN_EVERY_S: a claim is retried every few hundred ms,
            # and the reasons carry seconds (the quorum's verdict names its own key).
            key = verdict.get("key") if self.witness is None else re.sub(r"[\d.]+", "#", reason)
            if key != self._verdict[0] or now - self._verdict[1] >= COMPLAIN_EVERY_S:
                self._verdict = (key, now)
                judge = "the witness says" if self.witness is not None else "the mesh's other nodes say"
                log.warning("backup: the primary at %s is unreachable from here, but %s: %s; no takeover",
                            self.peer_text, judge, reason[:300])
            return
        if self.behind:
            log.critical("backup: taking over while behind (ha.force_takeover): up to %d bytes of journal the "
                         "primary wrote are not in this copy; messages acknowledged there may be lost",
                         self.primary_written - self.received)
        waited = self.reactor.seconds() - (self._lost_at or self.reactor.seconds())
        if self.witness is not None:
            log.warning("backup: the primary at %s is gone (for %.1f s) and the witness agrees; taking over at "
                        "epoch %d", self.peer_text, waited, epoch)
        else:
            log.warning("backup: the primary at %s is gone (for %.1f s) and the mesh's other nodes agree (%s); "
                        "taking over at epoch %d", self.peer_text, waited, verdict.get("reason"), epoch)
        self.stop()
        self._done.callback(epoch)
