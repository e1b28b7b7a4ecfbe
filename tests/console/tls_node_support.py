"""Nodes with TLS listeners beside the console tests' real mesh, writing to its Redis.

``tls_broker``: a real broker "T" whose STOMP TLS certificate (made here) ends in a
given number of days; it reports the certificate and fires certificate_expiring itself.
``TlsNode``: node "D", written with the node's own metrics code (metrics.reporter,
metrics.publisher) with certificates no running broker would hold at once (an expired
one among them): its snapshot every interval and, when asked, its certificate_expiring
events. Neither has links."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from cryptography import x509
from e2e_support import BrokerProcess
from tls_support import issue

from metrics.publisher import StreamPublisher
from metrics.reporter import MetricsReporter
from model.events import CertificateExpiring
from model.mesh import Addresses, ListenerCertificate, Node, Snapshot

DAY = 86400.0
SUBJECT = "CN=d.mesh.example,O=Example Ltd,C=GB"
T_SUBJECT = "CN=t.mesh.example,O=Example Ltd"  # broker T's, as RFC 4514 writes it


def certificates_from(now: float) -> list[ListenerCertificate]:
    """One certificate per kind of expiry: fine (90 and 300 days), within the 14-day
    warning (5 days) and expired (2 days ago)."""
    return [
        ListenerCertificate(listener="mesh", subject=SUBJECT, not_after=now + 300 * DAY),
        ListenerCertificate(listener="stomp+ssl", subject=SUBJECT, not_after=now + 5 * DAY),
        ListenerCertificate(listener="wss", subject="CN=console.example,O=Example Ltd,C=GB", not_after=now + 90 * DAY),
        ListenerCertificate(listener="replication", subject="CN=d-backup.mesh.example,O=Example Ltd,C=GB",
                            not_after=now - 2 * DAY),
    ]


class TlsNode:
    """Node "D" writing a snapshot every ``interval`` seconds until stopped (so the console
    keeps it up), like a broker with ``metrics.redis_url`` set."""

    def __init__(self, redis_url: str, interval: float = 0.2, prefix: str = "meshgate") -> None:
        now = time.time()
        self.certificates = certificates_from(now)
        self.node = Node(id=uuid.uuid4().hex, name="D", version="test", started_at=now, last_seen=now,
                         addresses=Addresses(stomp_tls="127.0.0.1:61614", link="127.0.0.1:61700"),
                         certificates=self.certificates)
        self.interval = interval
        self.publisher = StreamPublisher(redis_url, prefix)
        self.reporter = MetricsReporter(self.publisher, self._snapshot, interval, reactor=None)
        self._seq = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tls-node-d", daemon=True)

    def start(self) -> TlsNode:
        self.publisher.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        self.publisher.stop()

    def expiring(self, certificate: ListenerCertificate) -> CertificateExpiring:
        """The node's certificate_expiring event for ``certificate``, written to the events stream."""
        event = CertificateExpiring(time=time.time(), node=self.node.id, listener=certificate.listener,
                                    subject=certificate.subject, not_after=certificate.not_after)
        self.reporter.publish_event(event)
        return event

    def _snapshot(self) -> Snapshot:
        self._seq += 1
        now = time.time()
        self.node.last_seen = now
        return Snapshot(seq=self._seq, taken_at=now, node=self.node)

    def _run(self) -> None:
        while not self._stopped.is_set():
            self.reporter.publish_snapshot()
            self._stopped.wait(self.interval)


def issue_certificate(directory: Path, days: float) -> tuple[x509.Certificate, Path, Path]:
    """A self-signed certificate ("CN=t.mesh.example,O=Example Ltd") ending
    ``days`` from now, and its key: (certificate, certificate file, key file)."""
    certificate, _, cert_path, key_path = issue(directory, "t", "t.mesh.example", days=days,
                                                organization="Example Ltd")
    return certificate, cert_path, key_path


def tls_broker(directory: Path, redis_url: str, days: float) -> tuple[BrokerProcess, x509.Certificate]:
    """Broker "T", started, with a STOMP TLS listener whose certificate ends in ``days``
    days, writing its snapshots and events to ``redis_url``; ``cleanup()`` it after."""
    certificate, cert_path, key_path = issue_certificate(directory, days)
    config = f'[stomp.tls]\nbind = "127.0.0.1:0"\ncertificate = "{cert_path}"\nprivate_key = "{key_path}"\n'
    broker = BrokerProcess(directory, name="T", config=config, tls=True,
                           sets=[f"metrics.redis_url={redis_url}", "metrics.interval_ms=200"])
    broker.start()
    return broker, certificate
