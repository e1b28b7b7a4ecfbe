"""UDP multicast discovery of the brokers of a mesh (like Artemis broadcast/discovery groups).

Every node multicasts a signed `Announcement` every `broadcast_period`; every node keeps the
announcements it heard and forgets a node silent for `refresh_timeout`. An announcement says
whether the node requires TLS on its links (`[mesh.tls]`), so that a node never dials a peer
that could not link with it and says why instead (`mesh.node.MeshNode.announced`). The wire
format and the peer table are sans-I/O so they can be tested without sockets;
`DiscoveryService` glues them to Twisted's multicast UDP.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer, task
from twisted.internet.protocol import DatagramProtocol
from twisted.logger import Logger

MAGIC = b"MGD"
VERSION = 1
MAX_DATAGRAM = 4096
_MAC_SIZE = hashlib.sha256().digest_size
_HEADER = len(MAGIC) + 1

log = Logger()


class DiscoveryError(ValueError):
    """A datagram that is not a valid announcement of this cluster."""


@dataclass(frozen=True)
class Announcement:
    node_id: str  # uuid string
    name: str
    link: tuple[str, int]  # inter-broker link address
    stomp: tuple[str, int]  # client address
    group_name: str = ""
    requires_tls: bool = False  # its link listener speaks only TLS ([mesh.tls])


def encode_announcement(a: Announcement, secret: bytes) -> bytes:
    """MAGIC | version | HMAC-SHA256(secret, MAGIC | version | json) | json.

    ``"t": 1`` says the node requires TLS; it is left out otherwise, so a plaintext
    node's announcement is what it was before the field existed (older nodes ignore
    fields they do not know, and read a TLS node's announcement as before)."""
    fields: dict[str, Any] = {"id": a.node_id, "n": a.name, "l": list(a.link), "s": list(a.stomp), "g": a.group_name}
    if a.requires_tls:
        fields["t"] = 1
    body = json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()
    header = MAGIC + bytes([VERSION])
    data = header + hmac.new(secret, header + body, hashlib.sha256).digest() + body
    if len(data) > MAX_DATAGRAM:
        # Peers would reject it, so fail loudly here instead of vanishing silently.
        raise DiscoveryError(f"announcement too large ({len(data)} > {MAX_DATAGRAM} bytes)")
    return data


def _address(value: object) -> tuple[str, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or type(value[1]) is not int  # bool is an int subclass
        or not 0 <= value[1] <= 65535
    ):
        raise DiscoveryError(f"bad address {value!r}")
    return value[0], value[1]


def decode_announcement(data: bytes, secret: bytes) -> Announcement:
    if len(data) > MAX_DATAGRAM:
        raise DiscoveryError("datagram too large")
    if len(data) < _HEADER + _MAC_SIZE or not data.startswith(MAGIC):
        raise DiscoveryError("not a discovery datagram")
    if data[len(MAGIC)] != VERSION:
        raise DiscoveryError(f"unsupported version {data[len(MAGIC)]}")
    mac, body = data[_HEADER : _HEADER + _MAC_SIZE], data[_HEADER + _MAC_SIZE :]
    # Check the MAC before parsing, so strangers never reach the JSON parser; constant-time compare.
    if not hmac.compare_digest(mac, hmac.new(secret, data[:_HEADER] + body, hashlib.sha256).digest()):
        raise DiscoveryError("bad MAC")
    try:
        fields = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise DiscoveryError(f"bad payload: {e}") from None
    if not isinstance(fields, dict):
        raise DiscoveryError("payload is not an object")
    node_id, name, group, tls = fields.get("id"), fields.get("n"), fields.get("g", ""), fields.get("t", 0)
    if not (isinstance(node_id, str) and isinstance(name, str) and isinstance(group, str)):
        raise DiscoveryError("bad field types")
    if type(tls) is not int or tls not in (0, 1):  # bool is an int subclass
        raise DiscoveryError(f"bad TLS flag {tls!r}")
    try:
        uuid.UUID(node_id)
    except ValueError:
        raise DiscoveryError(f"bad node id {node_id!r}") from None
    return Announcement(node_id, name, _address(fields.get("l")), _address(fields.get("s")), group, tls == 1)


class DiscoveryTable:
    """The peers heard recently; time is passed in so tests need no clock at all."""

    def __init__(self, own_id: str, refresh_timeout: float) -> None:
        self.own_id = own_id
        self.refresh_timeout = refresh_timeout
        self.peers: dict[str, Announcement] = {}
        self._last_seen: dict[str, float] = {}

    def seen(self, a: Announcement, now: float) -> list[Announcement]:
        """Record a heard announcement; return it if it is new or changed (to report as found)."""
        if a.node_id == self.own_id:  # loopback mode echoes our own broadcasts
            return []
        self._last_seen[a.node_id] = now
        if self.peers.get(a.node_id) == a:
            return []
        self.peers[a.node_id] = a
        return [a]

    def clear(self) -> None:
        self.peers.clear()
        self._last_seen.clear()

    def expire(self, now: float) -> list[Announcement]:
        """Forget and return the peers silent for at least refresh_timeout."""
        lost = [nid for nid, t in self._last_seen.items() if now - t >= self.refresh_timeout]
        for nid in lost:
            del self._last_seen[nid]
        return [self.peers.pop(nid) for nid in lost]


class DiscoveryService(DatagramProtocol):
    def __init__(
        self,
        reactor: Any,  # IReactorMulticast and IReactorTime (MemoryReactorClock in tests)
        group: tuple[str, int],
        interface: str,
        announcement: Announcement,
        secret: bytes,
        broadcast_period: float,
        refresh_timeout: float,
        on_found: Callable[[Announcement], None],
        on_lost: Callable[[Announcement], None],
    ) -> None:
        self.reactor = reactor
        self.group = group
        self.interface = interface
        self.announcement = announcement
        self.secret = secret
        self.broadcast_period = broadcast_period
        self.on_found = on_found
        self.on_lost = on_lost
        self.table = DiscoveryTable(announcement.node_id, refresh_timeout)
        self.rejected = 0
        self._datagram = encode_announcement(announcement, secret)
        self._port: Any = None  # the multicast port, while listening
        self._loops: list[task.LoopingCall] = []
        self._running = False

    @property
    def peers(self) -> dict[str, Announcement]:
        return self.table.peers

    def start(self) -> defer.Deferred:
        """Listen, join and set up sending; fires once the first announcement went out."""
        self._running = True
        # Bind to the group address (not 0.0.0.0): on Linux this keeps out datagrams of other
        # groups that share the port, which other clusters on the host may use.
        self._port = port = self.reactor.listenMulticast(
            self.group[1], self, interface=self.group[0], listenMultiple=True
        )
        port.setTTL(1)  # never routed beyond the local link
        port.setLoopbackMode(True)  # nodes on the same host must hear each other
        # Sending before the outgoing interface is set would leave by the default route: wait for both.
        ready = defer.gatherResults(
            [port.joinGroup(self.group[0], self.interface), port.setOutgoingInterface(self.interface)],
            consumeErrors=True,
        )

        def failed(f):
            if self._port is port:
                self.stop()
            return f.value.subFailure if f.check(defer.FirstError) else f

        return ready.addCallbacks(lambda _: self._begin(), failed)

    def _begin(self) -> None:
        if not self._running:  # stopped while joining
            return
        # Check expiry several times per timeout so a loss is reported at most 25% late.
        for call, period in ((self._broadcast, self.broadcast_period), (self._expire, self.table.refresh_timeout / 4)):
            loop = task.LoopingCall(call)
            loop.clock = self.reactor  # a fake clock drives both loops in tests
            loop.start(period, now=True).addErrback(lambda f: log.failure("discovery loop died", f))
            self._loops.append(loop)

    def stop(self) -> defer.Deferred:
        self._running = False
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops.clear()
        # Peers are forgotten without on_lost: the owner is shutting discovery down, not losing them.
        self.table.clear()
        port, self._port = self._port, None
        return defer.maybeDeferred(port.stopListening) if port is not None else defer.succeed(None)

    def _broadcast(self) -> None:
        try:
            self._port.write(self._datagram, self.group)
        except OSError as e:  # e.g. interface gone; keep listening and retry next period
            log.warn("discovery broadcast failed: {error}", error=e)

    def _expire(self) -> None:
        for a in self.table.expire(self.reactor.seconds()):
            self._notify(self.on_lost, a)

    def _notify(self, callback: Callable[[Announcement], None], a: Announcement) -> None:
        try:
            callback(a)
        except Exception:  # a faulty callback must not stop discovery of the other peers
            log.failure("discovery callback {callback} failed", callback=callback)

    def datagramReceived(self, data: bytes, addr) -> None:
        try:
            a = decode_announcement(data, self.secret)
        except DiscoveryError:
            self.rejected += 1
            return
        for found in self.table.seen(a, self.reactor.seconds()):
            self._notify(self.on_found, found)
