"""Finding brokers for the client: the mesh's own multicast announcements (``udp://``) and
DNS (``dns://``), blocking and thread-based (no reactor of the application's is touched).

- ``udp://GROUP:PORT``: a :class:`MulticastListener` joins the group on ``interface`` and
  decodes the nodes' announcements with :func:`mesh.discovery.decode_announcement`
  (HMAC-signed with the mesh's cluster password, so the client needs that password); it
  keeps listening in a thread while the connection lives, in a
  :class:`mesh.discovery.DiscoveryTable`, so a node that stops announcing drops out and a
  new one is found for the next reconnect. The first lookup waits ``window`` ms.
- ``dns://NAME[:PORT]``: :func:`mesh.dns_discovery.resolve`, as the nodes resolve their
  peers (SRV records, and A records at PORT when a port is given), but for the SRV service
  ``_stomp._tcp`` (a Kubernetes headless service's port named ``stomp``) instead of the
  link port's ``_meshgate._tcp``. Run on a private Twisted reactor for each lookup. A
  lookup that fails keeps the addresses found last (as the nodes do).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterable

from mesh.discovery import MAX_DATAGRAM, DiscoveryError, DiscoveryTable, decode_announcement
from meshgate.client.url import Address, BrokerURI, DiscoveryURI, parse_url

log = logging.getLogger("meshgate.client")

REFRESH_TIMEOUT = 10.0  # a node silent this long is dropped (mesh.discovery.refresh_timeout_ms's default)
DNS_DEADLINE = 10.0  # a private reactor never runs longer than this for one lookup


class MulticastListener:
    """The STOMP addresses the nodes of a mesh announce on a multicast group."""

    def __init__(self, uri: DiscoveryURI, password: str | bytes, refresh_timeout: float = REFRESH_TIMEOUT) -> None:
        if uri.kind != "udp" or uri.port is None:
            raise ValueError(f"not a udp:// discovery URI: {uri}")
        self.uri = uri
        self.secret = password.encode() if isinstance(password, str) else password
        self.table = DiscoveryTable(str(uuid.uuid4()), refresh_timeout)  # an id no node has
        self.rejected = 0
        self._sources: dict[str, str] = {}  # node id -> the address its datagrams came from
        self._lock = threading.Lock()
        self._started_at: float | None = None
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def start(self) -> MulticastListener:
        """Join the group and listen in a daemon thread (idempotent)."""
        if self._sock is not None:
            return self
        group, port = self.uri.host, self.uri.port
        assert port is not None
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            # The nodes on this host listen on the same group and port (Twisted's listenMultiple).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((group, port))  # the group address keeps out other groups' datagrams on the port
            membership = socket.inet_aton(group) + socket.inet_aton(self.uri.interface)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
            sock.settimeout(0.2)
        except OSError as e:
            sock.close()
            raise OSError(f"cannot listen for announcements on {self.uri} (interface {self.uri.interface}): {e}") from e
        self._sock = sock
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"meshgate-discovery-{group}:{port}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        while not self._closed.is_set():
            try:
                data, (source, _) = sock.recvfrom(MAX_DATAGRAM + 1)
            except TimeoutError:
                continue
            except OSError:
                if self._closed.is_set():
                    return
                time.sleep(0.2)
                continue
            try:
                announcement = decode_announcement(data, self.secret)
            except DiscoveryError:
                with self._lock:
                    self.rejected += 1  # another cluster's, or a wrong password
                continue
            with self._lock:
                self._sources[announcement.node_id] = source
                self.table.seen(announcement, time.monotonic())

    def addresses(self, wait: bool = True) -> list[Address]:
        """The announced STOMP addresses (sorted); the first call waits out the window.

        A node listening on an unspecified address (``0.0.0.0``) is reached at the
        address its announcements came from."""
        self.start()
        if wait:
            assert self._started_at is not None
            remaining = self._started_at + self.uri.window_ms / 1000.0 - time.monotonic()
            if remaining > 0:
                self._closed.wait(remaining)
        with self._lock:
            self.table.expire(time.monotonic())
            found = set()
            for node_id, announcement in self.table.peers.items():
                host, port = announcement.stomp
                if _unspecified(host):
                    host = self._sources.get(node_id, host)
                found.add((host, port))
        return sorted(found)

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        if self._sock is not None:
            self._sock.close()


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return host == ""


def resolve_dns(uri: DiscoveryURI) -> set[Address]:
    """One DNS lookup as the nodes make it (``mesh.dns_discovery.resolve``), blocking.

    Raises the lookup's error (a timeout, a refused query); a name that does not exist
    is an empty set."""
    from twisted.internet.selectreactor import SelectReactor

    from mesh.dns_discovery import resolve, resolver_for

    if uri.kind != "dns":
        raise ValueError(f"not a dns:// discovery URI: {uri}")
    reactor = SelectReactor()  # private: never installed as the global reactor, never restarted
    outcome: list[object] = []

    def done(result: object) -> None:
        outcome.append(result)
        if reactor.running:
            reactor.stop()

    try:
        resolver = resolver_for(uri.servers, reactor)
        lookup = resolve(resolver, uri.host, uri.port, uri.service)
        lookup.addBoth(done)
        if not outcome:
            reactor.callLater(DNS_DEADLINE, lambda: done(TimeoutError(f"DNS lookup of {uri} took too long")))
            reactor.run(installSignalHandlers=False)
    finally:
        reactor.disconnectAll()
        waker = getattr(reactor, "waker", None)
        if waker is not None:
            waker.connectionLost(None)  # closes the waker's pipe: no descriptor left behind
    result = outcome[0] if outcome else TimeoutError(f"DNS lookup of {uri} did not finish")
    if isinstance(result, BaseException):
        raise result
    if hasattr(result, "raiseException"):  # a twisted Failure
        result.raiseException()  # type: ignore[union-attr]
    return set(result)  # type: ignore[call-overload]


class Discovery:
    """Turns a URL's entries into the brokers to try, for each connect pass.

    Fixed brokers come as given; each discovery entry adds what it finds now (a
    ``udp://`` listener keeps running until :meth:`close`)."""

    def __init__(self, entries: Iterable[BrokerURI | DiscoveryURI], cluster_password: str | None = None) -> None:
        self.entries = tuple(entries)
        self.cluster_password = cluster_password
        self._listeners: dict[DiscoveryURI, MulticastListener] = {}
        self._dns_last: dict[DiscoveryURI, set[Address]] = {}
        self.errors: list[str] = []  # what went wrong in the last call, for messages

    def candidates(self) -> list[BrokerURI]:
        """The brokers to try, in the URL's order, duplicates dropped."""
        self.errors = []
        found: list[BrokerURI] = []
        for entry in self.entries:
            if isinstance(entry, BrokerURI):
                found.append(entry)
            elif entry.kind == "udp":
                found += [BrokerURI(host, port) for host, port in self._listener(entry).addresses()]
            else:
                try:
                    self._dns_last[entry] = resolve_dns(entry)
                except Exception as e:  # keep what it listed last, as the nodes do
                    self.errors.append(f"{entry}: {e or type(e).__name__}")
                    log.warning("DNS lookup of %s failed (%s); using the %d addresses it listed last",
                                entry, e, len(self._dns_last.get(entry, ())))
                found += [BrokerURI(host, port, entry.tls) for host, port in sorted(self._dns_last.get(entry, ()))]
        return list(dict.fromkeys(found))

    def _listener(self, uri: DiscoveryURI) -> MulticastListener:
        listener = self._listeners.get(uri)
        if listener is None:
            password = uri.password if uri.password is not None else self.cluster_password
            if password is None:
                raise ValueError(f"{uri}: udp:// discovery needs the mesh's cluster password to check the "
                                 "announcements (cluster_password=..., or ?password= in the URI)")
            listener = self._listeners[uri] = MulticastListener(uri, password).start()
        return listener

    def close(self) -> None:
        for listener in self._listeners.values():
            listener.close()
        self._listeners.clear()


def discover(url: str, cluster_password: str | None = None) -> list[BrokerURI]:
    """The brokers a URL lists or finds now (every discovery entry run once), e.g.
    ``discover("udp://239.255.2.3:6155", cluster_password="…")``."""
    discovery = Discovery(parse_url(url).entries, cluster_password)
    try:
        return discovery.candidates()
    finally:
        discovery.close()
