"""The serving member's side: the replication listener, the catch-up copy sent
in chunks, the stream of journal writes and the failback handover."""

from __future__ import annotations

import hmac
import io
import logging
import os
import struct
from collections.abc import Callable

from twisted.internet import defer, task
from twisted.internet.interfaces import IHandshakeListener, IPushProducer
from twisted.internet.protocol import Protocol, ServerFactory
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.store.replicated import ReplicatedJournalStore
from meshgate.config.ha import ReplicationTlsConfig
from meshgate.replication.codec import (
    _U32,
    ACK,
    AUTH,
    BEGIN,
    CATALOG,
    CHALLENGE,
    COPY_CHUNK,
    DELETE,
    END,
    KIND_NAMES,
    PING,
    PONG,
    REFUSE,
    SEGMENT,
    SNAPSHOT_FILES,
    TAKEN,
    TAKEOVER,
    WELCOME,
    HandoverRefused,
    Parser,
    ReplicationError,
    _json,
    decode_position,
    encode,
    encode_file,
    encode_json,
    encode_write,
    proof,
)
from meshgate.replication.tls import COMPLAIN_EVERY_S, MISMATCH_HINT, LinkTransport, server_endpoint

log = logging.getLogger("meshgate.replication")  # one logger for the whole link, both sides


@implementer(IHandshakeListener)
class _SourceProtocol(Protocol):
    """The primary's end of one backup's link."""

    transport: LinkTransport  # type: ignore[assignment]  # Twisted's is ITransport | None: see gateway.transport

    def __init__(self, source: ReplicationSource) -> None:
        self.source = source
        self.parser = Parser(max_frame=1024 * 1024)
        self.nonce = os.urandom(16).hex()
        self.authenticated = False
        self.snapshot_position: int | None = None  # set once the copy is sent (END): the ack that makes it in-sync
        self.copy: _Copy | None = None
        self.last_received = 0.0
        self.peer = ""
        self.handshake_done = False  # TLS: the handshake finished (unused on a plain link)
        self.received_any = False

    def handshakeCompleted(self) -> None:
        self.handshake_done = True

    def connectionMade(self) -> None:
        address = self.transport.getPeer()
        self.peer = f"{getattr(address, 'host', '?')}:{getattr(address, 'port', '?')}"
        self.last_received = self.source.reactor.seconds()
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)
        self.transport.write(encode_json(CHALLENGE, {"nonce": self.nonce, "node_id": self.source.node_id}))

    def dataReceived(self, data: bytes) -> None:
        self.last_received = self.source.reactor.seconds()
        if not self.received_any:
            self.received_any = True
            if self.source.tls is None and data[:2] == b"\x16\x03":  # a TLS ClientHello on the plain listener
                self.source.complain("replication: backup %s speaks TLS ([ha.tls] is set there) but this member "
                                     "has no [ha.tls]; dropping it: %s", self.peer, MISMATCH_HINT)
                self.transport.abortConnection()
                return
        try:
            for kind, payload in self.parser.feed(data):
                self._frame(kind, payload)
        except (ReplicationError, struct.error) as problem:
            log.warning("replication: backup %s: %s; dropping it", self.peer, problem)
            self.transport.abortConnection()

    def _frame(self, kind: int, payload: bytes) -> None:
        source = self.source
        if not self.authenticated:
            if kind != AUTH:
                raise ReplicationError(f"{KIND_NAMES[kind]} before AUTH")
            body = _json(payload)
            if not hmac.compare_digest(str(body.get("proof", "")), proof(source.password, self.nonce, "backup")):
                self.refuse("wrong password (ha.password / mesh.cluster_password)")
                return
            epoch = body.get("epoch", 0)
            if isinstance(epoch, int) and epoch > source.epoch:
                self.refuse(f"this node's epoch {source.epoch} is older than the backup's {epoch}")
                source.on_replaced(f"the backup at {self.peer} holds epoch {epoch} of this node, above this "
                                   f"process's epoch {source.epoch}: another process took over, so this one was "
                                   "replaced")
                return
            self.authenticated = True
            self.transport.write(encode_json(WELCOME, {
                "proof": proof(source.password, str(body.get("nonce", "")), "primary"),
                "epoch": source.epoch, "node_id": source.node_id, "sync": source.sync,
                "heartbeat_ms": int(source.heartbeat_s * 1000)}))
            source.attach(self)
            return
        if kind == ACK:
            source.acked(self, decode_position(payload))
        elif kind == PONG:
            pass
        elif kind == TAKEN:
            source.taken(self, _json(payload))
        else:
            raise ReplicationError(f"unexpected {KIND_NAMES[kind]} from a backup")

    def refuse(self, reason: str) -> None:
        log.warning("replication: refused backup %s: %s", self.peer, reason)
        self.transport.write(encode_json(REFUSE, {"reason": reason}))
        self.transport.loseConnection()

    def connectionLost(self, reason: Failure | None = None) -> None:
        if self.source.tls is not None and not self.handshake_done:
            why = reason.getErrorMessage() if reason is not None else "closed"
            self.source.complain("replication: the TLS handshake with backup %s failed (%s): %s", self.peer, why,
                                 MISMATCH_HINT)
        if self.copy is not None:
            self.copy.stopProducing()
        self.source.detach(self)


@implementer(IPushProducer)
class _Copy:
    """The catch-up copy, sent in chunks: one ``COPY_CHUNK`` read and sent per reactor
    turn, so that clients keep being served while a backup catches up; paused while
    the link's send buffer is full (a push producer on the transport).

    Consistency with writes made meanwhile: the journal is append-only (bytes at a
    segment offset never change; compaction writes new segments), and the stream
    (WRITE, SEGMENT, DELETE, CATALOG) flows from the moment the backup attached,
    interleaved with the copy's FILE frames on the same ordered link. A FILE chunk and
    a WRITE that cover the same bytes carry the same bytes (the backup ``pwrite``s
    both at their offsets), so nothing is applied twice in effect and nothing written
    meanwhile is lost. Each segment is copied up to its size when the copy began (what
    came later arrives as WRITEs); a segment deleted meanwhile is dropped from the copy
    before its DELETE is sent, so no later chunk recreates it. END carries the
    position written when the copy finished: every WRITE up to it was sent before END."""

    def __init__(self, source: ReplicationSource, backup: _SourceProtocol) -> None:
        self.source = source
        self.backup = backup
        self.todo: list[tuple[str, int]] = []  # (name, bytes to copy), in order
        self.file: io.BufferedReader | None = None
        self.name = ""
        self.offset = 0
        self.size = 0
        self.paused = False
        self.stopped = False
        self.scheduled = False
        self.sent = 0
        self.registered = False

    def start(self) -> int:
        """BEGIN and the small files now (in this turn); the segments follow, a chunk a turn."""
        store = self.source.store
        position = store.written
        names = self.source._files()
        write = self.backup.transport.write
        write(encode_json(BEGIN, {"position": position, "epoch": self.source.epoch, "files": names}))
        for name in SNAPSHOT_FILES:
            try:
                data = (store.root / name).read_bytes()
            except FileNotFoundError:
                continue
            write(encode_file(name, 0, data))
        for name in names:
            try:
                self.todo.append((name, os.stat(store.root / name).st_size))
            except FileNotFoundError:
                continue
        register = getattr(self.backup.transport, "registerProducer", None)
        if register is not None:
            register(self, True)
            self.registered = True
        self._schedule()
        return position

    def forget(self, name: str) -> None:
        """``name`` was deleted on the primary: copy no more of it."""
        if self.name == name and self.file is not None:
            self.file.close()
            self.file = None
        self.todo = [(n, size) for n, size in self.todo if n != name]

    def _schedule(self) -> None:
        if not self.scheduled and not self.paused and not self.stopped:
            self.scheduled = True
            self.source.reactor.callLater(0, self._step)

    def _step(self) -> None:
        self.scheduled = False
        if self.stopped or self.paused:
            return
        try:
            done = self._send_chunk()
        except OSError as problem:
            log.warning("replication: cannot read the journal for backup %s: %s; dropping it", self.backup.peer,
                        problem)
            self.stopProducing()
            self.backup.transport.abortConnection()
            return
        if done:
            self._finish()
        else:
            self._schedule()

    def _send_chunk(self) -> bool:
        """Send at most one chunk; True once every file is sent."""
        write = self.backup.transport.write
        while self.file is None:
            if not self.todo:
                return True
            self.name, self.size = self.todo.pop(0)
            try:
                self.file = open(self.source.store.root / self.name, "rb")  # noqa: SIM115 (kept across turns)
            except FileNotFoundError:
                continue  # deleted before its turn came (its DELETE went out already)
            self.offset = 0
            if self.size == 0:
                write(encode_file(self.name, 0, b""))
                self.file.close()
                self.file = None
        chunk = os.pread(self.file.fileno(), min(COPY_CHUNK, self.size - self.offset), self.offset)
        if chunk:
            write(encode_file(self.name, self.offset, chunk))
            self.offset += len(chunk)
            self.sent += len(chunk)
        if not chunk or self.offset >= self.size:
            self.file.close()
            self.file = None
        return not self.todo and self.file is None

    def _finish(self) -> None:
        self.stopped = True
        self._unregister()
        position = self.source.store.written
        self.backup.transport.write(encode_json(END, {"position": position}))
        self.backup.snapshot_position = position
        self.backup.copy = None
        log.info("replication: sent the copy to backup %s (%d bytes of segments); the stream follows from "
                 "position %d", self.backup.peer, self.sent, position)

    def _unregister(self) -> None:
        # Our own flag, not ``transport.producer``: a TLS transport keeps its producer elsewhere.
        unregister = getattr(self.backup.transport, "unregisterProducer", None)
        if unregister is not None and self.registered:
            self.registered = False
            unregister()

    # IPushProducer: the link's send buffer is full / drained / the link is gone
    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self._schedule()

    def stopProducing(self) -> None:
        self.stopped = True
        if self.file is not None:
            self.file.close()
            self.file = None


class _SourceFactory(ServerFactory):
    def __init__(self, source: ReplicationSource) -> None:
        self.source = source

    def buildProtocol(self, addr) -> _SourceProtocol:
        return _SourceProtocol(self.source)


class ReplicationSource:
    """The serving process's replication listener and its one backup.

    ``state``: ``no-backup`` (none connected), ``catching-up`` (copying; receipts do
    not wait for it), ``in-sync`` (following the stream; with ``sync`` receipts wait
    for its acknowledgement)."""

    def __init__(self, store: ReplicatedJournalStore, reactor, *, node_id: str, epoch: int, password: str,
                 sync: bool, heartbeat_s: float, backup_timeout_s: float,
                 on_replaced: Callable[[str], None], tls: ReplicationTlsConfig | None = None) -> None:
        self.store = store
        self.tls = tls  # None: a plain TCP listener
        self.reactor = reactor
        self.node_id = node_id
        self.epoch = epoch
        self.password = password
        self.sync = sync
        self.heartbeat_s = heartbeat_s
        self.backup_timeout_s = backup_timeout_s
        self.on_replaced = on_replaced
        self.backup: _SourceProtocol | None = None
        self.state = "no-backup"
        self.port = None
        self._heartbeat: task.LoopingCall | None = None
        self._handover: defer.Deferred | None = None  # a failback waiting for the backup's TAKEN
        self.handed_over = False  # the backup took over (failback): this process serves no more
        self._complained: dict[tuple[str, str], float] = {}  # (message, peer host) -> when last logged

    def complain(self, text: str, peer: str, *args: object) -> None:
        """Log a link problem with ``peer`` (HOST:PORT) at most every 30 s per host: a
        misconfigured backup redials every few hundred milliseconds."""
        key, now = (text, peer.rsplit(":", 1)[0]), self.reactor.seconds()
        if now - self._complained.get(key, -COMPLAIN_EVERY_S) >= COMPLAIN_EVERY_S:
            self._complained[key] = now
            log.warning(text, peer, *args)

    @defer.inlineCallbacks
    def listen(self, bind: tuple[str, int]):
        self.port = yield server_endpoint(self.reactor, bind, self.tls).listen(_SourceFactory(self))
        self._heartbeat = task.LoopingCall(self._beat)
        self._heartbeat.clock = self.reactor
        self._heartbeat.start(self.heartbeat_s, now=False)
        return self.port

    def address(self) -> tuple[str, int] | None:
        if self.port is None:
            return None
        return self.port.getHost().host, self.port.getHost().port

    @defer.inlineCallbacks
    def stop(self):
        if self._heartbeat is not None and self._heartbeat.running:
            self._heartbeat.stop()
        if self.port is not None:
            yield self.port.stopListening()
        if self.backup is not None:
            self.backup.transport.loseConnection()

    # -- the backup comes and goes ---------------------------------------------------------------

    def attach(self, backup: _SourceProtocol) -> None:
        if self.backup is not None and self.backup is not backup:
            log.warning("replication: a new backup (%s) replaces %s", backup.peer, self.backup.peer)
            old, self.backup = self.backup, None
            old.transport.abortConnection()
        self.backup = backup
        self.state = "catching-up"
        self.store.set_replica_waits(False)
        self.store.sink = self
        backup.copy = _Copy(self, backup)
        position = backup.copy.start()
        log.info("replication: backup %s connected; copying the journal to it (%d files, position %d, in chunks "
                 "of %d KiB a turn); receipts do not wait for it until it has the copy", backup.peer,
                 len(backup.copy.todo), position, COPY_CHUNK // 1024)

    def detach(self, backup: _SourceProtocol) -> None:
        if backup is not self.backup:
            return
        self.backup = None
        handover, self._handover = self._handover, None
        if handover is not None and not handover.called:
            handover.errback(HandoverRefused(f"the link to the backup {backup.peer} was lost during the handover"))
        if self.handed_over:
            return  # the backup took over: nothing written here from now on may count as durable
        self.store.sink = None
        was, self.state = self.state, "no-backup"
        self.store.set_replica_waits(False)
        log.warning("replication: backup %s is gone (it was %s); receipts no longer wait for a backup",
                    backup.peer, was)

    def acked(self, backup: _SourceProtocol, position: int) -> None:
        if backup is not self.backup:
            return
        self.store.acked(position)
        if self.state == "catching-up" and backup.snapshot_position is not None \
                and position >= backup.snapshot_position:
            self.state = "in-sync"
            log.info("replication: backup %s has the copy and follows the journal (%s)", backup.peer,
                     "receipts wait for it" if self.sync else "asynchronous: receipts do not wait for it")
            if self.sync:
                self.store.set_replica_waits(True)

    def lag(self) -> int:
        """Journal bytes written here and not yet acknowledged by the backup."""
        if self.backup is None:
            return 0
        return max(0, self.store.written - self.store.replica_acked)

    def _beat(self) -> None:
        backup = self.backup
        if backup is None:
            return
        silent = self.reactor.seconds() - backup.last_received
        if silent > self.backup_timeout_s:
            log.warning("replication: backup %s silent for %.1f s; dropping it", backup.peer, silent)
            backup.transport.abortConnection()
            return
        backup.transport.write(encode_json(PING, {"written": self.store.written, "epoch": self.epoch}))

    # -- failback: the backup takes over on request ------------------------------------------------

    def hand_over(self, timeout_s: float) -> defer.Deferred:
        """Ask the in-sync backup to take over (``TAKEOVER`` with the position written
        here); fires with the epoch it obtained, or fails with HandoverRefused. The
        caller has stopped taking client work and waited for lag 0."""
        backup = self.backup
        if backup is None or self.state != "in-sync":
            return defer.fail(HandoverRefused(f"no backup in sync (replication is {self.state})"))
        d: defer.Deferred[int] = defer.Deferred()
        self._handover = d
        backup.transport.write(encode_json(TAKEOVER, {"position": self.store.written, "epoch": self.epoch}))

        def unanswered() -> None:
            if not d.called:
                self._handover = None
                d.errback(HandoverRefused(f"the backup {backup.peer} did not answer the handover within "
                                          f"{timeout_s:g} s"))
        timer = self.reactor.callLater(timeout_s, unanswered)

        def done(result):
            if timer.active():
                timer.cancel()
            return result
        return d.addBoth(done)

    def taken(self, backup: _SourceProtocol, body: dict) -> None:
        d, self._handover = self._handover, None
        if backup is not self.backup or d is None or d.called:
            return
        if body.get("granted"):
            self.handed_over = True
            self.store.hand_over()
            d.callback(int(body.get("epoch", 0)))
        else:
            d.errback(HandoverRefused(f"the backup {backup.peer} refused: {body.get('reason', 'no reason given')}"))

    # -- what is streamed ------------------------------------------------------------------------

    def _files(self) -> list[str]:
        return [f"journal/{path.name}" for path in sorted(self.store.dir.glob("*.log"))]

    def wrote(self, segment: int, offset: int, data: bytes, end: int) -> None:
        if self.backup is not None:
            self.backup.transport.write(encode_write(segment, offset, end, data))

    def segment_opened(self, segment: int) -> None:
        if self.backup is not None:
            self.backup.transport.write(encode(SEGMENT, _U32.pack(segment)))

    def file_deleted(self, name: str) -> None:
        if self.backup is not None:
            if self.backup.copy is not None:
                self.backup.copy.forget(f"journal/{name}")
            self.backup.transport.write(encode(DELETE, f"journal/{name}".encode()))

    def catalog_saved(self, data: bytes) -> None:
        if self.backup is not None:
            self.backup.transport.write(encode(CATALOG, data))


# -- the backup's side ---------------------------------------------------------------------------
