"""Replicated primary/backup pairs (``[ha] mode = "replicated"``, docs/ha.md).

The primary streams its journal's own bytes to the backup over an authenticated
TCP link: each flushed write (segment, offset, bytes), new and deleted segments,
catalog saves. The backup writes the same files into its own data dir,
``fdatasync``s them and acknowledges the highest position it made durable; with
``ha.sync`` the primary's receipts wait for that acknowledgement
(:class:`gateway.store.replicated.ReplicatedJournalStore`).

A backup that connects first copies the primary's current files (segments,
catalog, node.json, epoch), then follows the stream; until it has acknowledged the
copy it is *catching up* and receipts do not wait for it.

The backup takes over when the primary is gone (the link lost, or silent for
``ha.takeover_after_ms``) and the witness agrees (it has not heard the primary for
that long either); the witness records the new epoch, so the old primary, should
it still run, learns it was replaced.

Wire format: frames of ``<u32 payload length><u8 kind>payload``; control payloads
are JSON, data payloads are packed binary (below). No Twisted in the codec.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

from twisted.internet import defer, endpoints, error, task
from twisted.internet.protocol import ClientFactory, Protocol, ServerFactory
from twisted.python.failure import Failure

from gateway.store.files import fsync_dir
from gateway.store.replicated import ReplicatedJournalStore
from meshgate.datadir import read_epoch
from meshgate.witness import WitnessClient

log = logging.getLogger("meshgate.replication")

# -- the codec -----------------------------------------------------------------------------------

CHALLENGE, AUTH, WELCOME, REFUSE = 1, 2, 3, 4  # handshake (JSON)
BEGIN, FILE, END = 5, 6, 7  # the catch-up copy
WRITE, SEGMENT, DELETE, CATALOG = 8, 9, 10, 11  # the stream
PING, ACK, PONG = 12, 13, 14  # heartbeats and durability
KIND_NAMES = {CHALLENGE: "CHALLENGE", AUTH: "AUTH", WELCOME: "WELCOME", REFUSE: "REFUSE", BEGIN: "BEGIN",
              FILE: "FILE", END: "END", WRITE: "WRITE", SEGMENT: "SEGMENT", DELETE: "DELETE", CATALOG: "CATALOG",
              PING: "PING", ACK: "ACK", PONG: "PONG"}
_HEAD = struct.Struct("<IB")
_WRITE = struct.Struct("<IQQ")  # segment, offset, logical end position
_FILE = struct.Struct("<HQ")  # name length, offset
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
MAX_FRAME = 512 * 1024 * 1024  # one journal write (a 100 MiB message fits; a turn's buffer rarely exceeds it)
COPY_CHUNK = 1024 * 1024
INCOMPLETE = "replica-incomplete"  # in a backup's data dir while its copy is not whole: it must not take over
SNAPSHOT_FILES = ("node.json", "catalog.json", "epoch")


class ReplicationError(Exception):
    """The peer broke the replication protocol."""


def encode(kind: int, payload: bytes = b"") -> bytes:
    return _HEAD.pack(len(payload), kind) + payload


def encode_json(kind: int, body: dict) -> bytes:
    return encode(kind, json.dumps(body, separators=(",", ":")).encode())


def encode_write(segment: int, offset: int, end: int, data: bytes) -> bytes:
    return _HEAD.pack(_WRITE.size + len(data), WRITE) + _WRITE.pack(segment, offset, end) + data


def decode_write(payload: bytes | memoryview) -> tuple[int, int, int, memoryview]:
    segment, offset, end = _WRITE.unpack_from(payload)
    return segment, offset, end, memoryview(payload)[_WRITE.size:]


def encode_file(name: str, offset: int, data: bytes) -> bytes:
    raw = name.encode()
    return encode(FILE, _FILE.pack(len(raw), offset) + raw + data)


def decode_file(payload: bytes | memoryview) -> tuple[str, int, memoryview]:
    length, offset = _FILE.unpack_from(payload)
    view = memoryview(payload)
    name = bytes(view[_FILE.size:_FILE.size + length]).decode()
    _check_name(name)
    return name, offset, view[_FILE.size + length:]


def encode_position(kind: int, position: int) -> bytes:
    return encode(kind, _U64.pack(position))


def decode_position(payload: bytes | memoryview) -> int:
    return _U64.unpack_from(payload)[0]


def _check_name(name: str) -> None:
    """Only the data dir's own files: never a path outside it."""
    if name in SNAPSHOT_FILES:
        return
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != "journal" or not parts[1].endswith(".log") or not parts[1][:-4].isdigit():
        raise ReplicationError(f"not a replicated file name: {name!r}")


class Parser:
    """Bytes in, ``(kind, payload)`` frames out; frames may be split anywhere."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.buffer = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self.buffer += data
        frames = []
        buffer = self.buffer
        pos = 0
        while len(buffer) - pos >= _HEAD.size:
            length, kind = _HEAD.unpack_from(buffer, pos)
            if length > self.max_frame:
                raise ReplicationError(f"a frame of {length} bytes (at most {self.max_frame})")
            if kind not in KIND_NAMES:
                raise ReplicationError(f"unknown frame kind {kind}")
            end = pos + _HEAD.size + length
            if end > len(buffer):
                break
            frames.append((kind, bytes(buffer[pos + _HEAD.size:end])))
            pos = end
        if pos:
            del buffer[:pos]
        return frames


def proof(password: str, nonce: str, who: str) -> str:
    """HMAC of the other side's nonce: the cluster password, proven without sending it."""
    return hmac.new(password.encode(), f"replication:{who}:{nonce}".encode(), hashlib.sha256).hexdigest()


def _json(payload: bytes) -> dict:
    try:
        body = json.loads(payload)
    except ValueError:
        raise ReplicationError("a control frame that is not JSON") from None
    if not isinstance(body, dict):
        raise ReplicationError("a control frame that is not a JSON object")
    return body


# -- the primary's side --------------------------------------------------------------------------


class _SourceProtocol(Protocol):
    """The primary's end of one backup's link."""

    def __init__(self, source: ReplicationSource) -> None:
        self.source = source
        self.parser = Parser(max_frame=1024 * 1024)
        self.nonce = os.urandom(16).hex()
        self.authenticated = False
        self.snapshot_position = -1
        self.last_received = 0.0
        self.peer = ""

    def connectionMade(self) -> None:
        address = self.transport.getPeer()
        self.peer = f"{getattr(address, 'host', '?')}:{getattr(address, 'port', '?')}"
        self.last_received = self.source.reactor.seconds()
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)
        self.transport.write(encode_json(CHALLENGE, {"nonce": self.nonce, "node_id": self.source.node_id}))

    def dataReceived(self, data: bytes) -> None:
        self.last_received = self.source.reactor.seconds()
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
        else:
            raise ReplicationError(f"unexpected {KIND_NAMES[kind]} from a backup")

    def refuse(self, reason: str) -> None:
        log.warning("replication: refused backup %s: %s", self.peer, reason)
        self.transport.write(encode_json(REFUSE, {"reason": reason}))
        self.transport.loseConnection()

    def connectionLost(self, reason: Failure = None) -> None:
        self.source.detach(self)


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
                 on_replaced: Callable[[str], None]) -> None:
        self.store = store
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

    @defer.inlineCallbacks
    def listen(self, bind: tuple[str, int]):
        host, port = bind
        self.port = yield endpoints.TCP4ServerEndpoint(self.reactor, port, interface=host).listen(
            _SourceFactory(self))
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
        position = self._send_snapshot(backup)
        backup.snapshot_position = position
        log.info("replication: backup %s connected; copying the journal to it (%d files, position %d); receipts "
                 "do not wait for it until it has the copy", backup.peer, len(self._files()), position)

    def detach(self, backup: _SourceProtocol) -> None:
        if backup is not self.backup:
            return
        self.backup = None
        self.store.sink = None
        was, self.state = self.state, "no-backup"
        self.store.set_replica_waits(False)
        log.warning("replication: backup %s is gone (it was %s); receipts no longer wait for a backup",
                    backup.peer, was)

    def acked(self, backup: _SourceProtocol, position: int) -> None:
        if backup is not self.backup:
            return
        self.store.acked(position)
        if self.state == "catching-up" and position >= backup.snapshot_position:
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

    # -- what is streamed ------------------------------------------------------------------------

    def _files(self) -> list[str]:
        return [f"journal/{path.name}" for path in sorted(self.store.dir.glob("*.log"))]

    def _send_snapshot(self, backup: _SourceProtocol) -> int:
        """Everything written so far, as files; what is buffered follows as WRITEs.
        Read on the reactor thread, in one turn, so nothing interleaves with it."""
        store = self.store
        position = store.written
        write = backup.transport.write
        names = self._files()
        write(encode_json(BEGIN, {"position": position, "epoch": self.epoch, "files": names}))
        for name in (*SNAPSHOT_FILES, *names):
            path = store.root / name
            try:
                with open(path, "rb") as file:
                    offset = 0
                    while True:
                        chunk = file.read(COPY_CHUNK)
                        if not chunk and offset:
                            break
                        write(encode_file(name, offset, chunk))
                        offset += len(chunk)
                        if not chunk:
                            break
            except FileNotFoundError:
                continue
        write(encode_json(END, {"position": position}))
        return position

    def wrote(self, segment: int, offset: int, data: bytes, end: int) -> None:
        if self.backup is not None:
            self.backup.transport.write(encode_write(segment, offset, end, data))

    def segment_opened(self, segment: int) -> None:
        if self.backup is not None:
            self.backup.transport.write(encode(SEGMENT, _U32.pack(segment)))

    def file_deleted(self, name: str) -> None:
        if self.backup is not None:
            self.backup.transport.write(encode(DELETE, f"journal/{name}".encode()))

    def catalog_saved(self, data: bytes) -> None:
        if self.backup is not None:
            self.backup.transport.write(encode(CATALOG, data))


# -- the backup's side ---------------------------------------------------------------------------


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


class _FollowerProtocol(Protocol):
    def __init__(self, follower: ReplicaFollower) -> None:
        self.follower = follower
        self.parser = Parser()
        self.nonce = os.urandom(16).hex()
        self.welcomed = False
        self.copying = False
        self.last_received = 0.0

    def connectionMade(self) -> None:
        self.last_received = self.follower.reactor.seconds()
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)

    def dataReceived(self, data: bytes) -> None:
        follower = self.follower
        self.last_received = follower.reactor.seconds()
        try:
            ack = None
            for kind, payload in self.parser.feed(data):
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

    def connectionLost(self, reason: Failure = None) -> None:
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
                 node_id: Callable[[], str]) -> None:
        self.files = ReplicaFiles(root)
        self.reactor = reactor
        self.peer = peer
        self.peer_text = f"{peer[0]}:{peer[1]}"
        self.password = password
        self.witness = witness
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
        self._last_check = 0.0
        self._lost_at: float | None = None
        self._dialling = False
        self._deciding = False
        self._said = ""
        self._stopped = False

    def wait(self) -> defer.Deferred:
        self._done = defer.Deferred()
        log.info("backup (ha.mode = replicated): following the primary at %s, with no client listeners and no mesh "
                 "links until a takeover", self.peer_text)
        self._dial()
        self._check = task.LoopingCall(self._tick)
        self._check.clock = self.reactor
        self._last_check = self.reactor.seconds()
        self._check.start(min(self.heartbeat_s, self.takeover_after_s / 3), now=False)
        return self._done

    def stop(self) -> None:
        self._stopped = True
        if self._check is not None and self._check.running:
            self._check.stop()
        if self.link is not None:
            self.link.transport.abortConnection()
        self.files.close()

    @property
    def behind(self) -> bool:
        """Whether this copy may miss what the primary wrote: not caught up, or the
        primary's last heartbeat named a position beyond what arrived here."""
        return not self.caught_up or not self.files.complete or self.primary_written > self.received

    def _say(self, text: str, *args) -> None:
        line = text % args
        if line != self._said:
            self._said = line
            log.warning("%s", line)

    def _dial(self) -> None:
        if self._dialling or self._stopped or self.link is not None:
            return
        self._dialling = True
        host, port = self.peer
        endpoint = endpoints.TCP4ClientEndpoint(self.reactor, host, port, timeout=max(1, int(self.takeover_after_s)))
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
        paused = now - self._last_check > 3 * self._check.interval  # this process was stopped (SIGSTOP) or starved
        self._last_check = now
        link = self.link
        if link is not None:
            if paused:
                link.last_received = now
            elif now - link.last_received > self.takeover_after_s:
                log.warning("replication: nothing from the primary for %.1f s; dropping the link",
                            now - link.last_received)
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
        if self.witness is None:
            self._say("backup: the primary at %s is unreachable; no ha.witness is configured, so there is no quorum "
                      "and no automatic takeover (docs/ha.md)", self.peer_text)
            return
        self._deciding = True
        try:
            epoch = read_epoch(self.files.root) + 1
            verdict = yield self.witness.claim(self.node_id(), epoch, self.takeover_after_s)
        finally:
            self._deciding = False
        if self._stopped or self.link is not None or self._done is None or self._done.called:
            return
        if not verdict.get("granted"):
            self._say("backup: the primary at %s is unreachable from here, but the witness says: %s; no takeover",
                      self.peer_text, verdict.get("reason", "no"))
            return
        if self.behind:
            log.critical("backup: taking over while behind (ha.force_takeover): up to %d bytes of journal the "
                         "primary wrote are not in this copy; messages acknowledged there may be lost",
                         self.primary_written - self.received)
        waited = self.reactor.seconds() - (self._lost_at or self.reactor.seconds())
        log.warning("backup: the primary at %s is gone (for %.1f s) and the witness agrees; taking over at epoch %d",
                    self.peer_text, waited, epoch)
        self.stop()
        self._done.callback(epoch)


@defer.inlineCallbacks
def primary_active_at(reactor, peer: tuple[str, int], timeout: float = 1.0):
    """Whether a process serves at the other member's replication listener (it only
    listens while it serves): then this one must not."""
    endpoint = endpoints.TCP4ClientEndpoint(reactor, peer[0], peer[1], timeout=max(1, int(timeout)))
    try:
        protocol = yield endpoint.connect(_ProbeFactory())
    except (error.ConnectError, error.TimeoutError, OSError):
        return False
    protocol.transport.loseConnection()
    return True


class _ProbeFactory(ClientFactory):
    protocol = Protocol
