"""A node's TLS materials, one per listener or dialler ("stomp+ssl", "wss", "amqps",
"mesh", "replication"): reloaded together (SIGHUP, ``meshgate reload-tls``), summarised
for the model (``Node.certificates``) and watched for expiry (``certificate_expiring``
events, ``EXPIRY_WARNING_DAYS`` ahead: at start, after each reload, then daily).

Each material is the one object its listener or diallers ask for a context at every
new handshake, so a reload reaches new handshakes while established connections and
links keep the certificate they were made with."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from twisted.internet import task

from gateway.tls import TlsError, TlsMaterial
from management.events import EventLog
from meshgate.config import NodeConfig
from model.events import CertificateExpiring
from model.mesh import ListenerCertificate
from model.results import ListenerReload

log = logging.getLogger(__name__)

EXPIRY_WARNING_DAYS = 14  # a certificate_expiring event this long before a certificate ends
DAY_S = 86_400.0
_SUBJECT_SHOWN = 200  # characters of a subject in a log line


def node_materials(config: NodeConfig) -> dict[str, TlsMaterial]:
    """Every TLS material the configuration gives the node, by listener name."""
    stomp, amqp, mesh, ha = config.stomp, config.amqp, config.mesh, config.ha
    found = {
        "stomp+ssl": stomp.tls,
        "wss": stomp.websocket.tls if stomp.websocket is not None else None,
        "amqps": amqp.tls if amqp is not None else None,
        "mesh": mesh.tls if mesh is not None else None,
        "replication": ha.tls,
    }
    return {listener: tls.material for listener, tls in found.items() if tls is not None}


def utc_date(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when))


class NodeCertificates:
    def __init__(self, materials: Mapping[str, TlsMaterial], clock) -> None:
        self.materials = dict(materials)
        self.clock = clock
        self.events: EventLog | None = None  # the node's, once it serves: expiry events go there
        self._daily: task.LoopingCall | None = None

    def summaries(self) -> list[ListenerCertificate]:
        """What ``Node.certificates`` shows: each certificate in use, as last (re)loaded."""
        return [ListenerCertificate(listener=listener, subject=material.certificate.subject,
                                    not_after=material.certificate.not_after)
                for listener, material in self.materials.items()]

    def watch(self, events: EventLog) -> None:
        """Report expiring certificates to ``events`` now and once a day from now on."""
        self.stop()
        self.events = events
        if self.materials:
            self._daily = task.LoopingCall(self.check_expiry)
            self._daily.clock = self.clock
            self._daily.start(DAY_S, now=True)

    def stop(self) -> None:
        if self._daily is not None and self._daily.running:
            self._daily.stop()
        self._daily = None

    def reload(self) -> list[ListenerReload]:
        """Read every material's files again. A listener whose files cannot be used keeps
        its old certificate (and says why); the others take the new files."""
        outcomes = []
        for listener, material in self.materials.items():
            try:
                material.reload()
            except TlsError as problem:
                log.warning("tls: %s kept its old certificate: %s", listener, problem)
                outcomes.append(self._outcome(listener, material, str(problem)))
                continue
            log.info("tls: reloaded %s: %s, expires %s", listener, material.certificate.subject[:_SUBJECT_SHOWN],
                     utc_date(material.certificate.not_after))
            outcomes.append(self._outcome(listener, material))
        if not outcomes:
            log.info("tls: nothing to reload: this node has no TLS listener or dialler")
        self.check_expiry()
        return outcomes

    @staticmethod
    def _outcome(listener: str, material: TlsMaterial, refused: str = "") -> ListenerReload:
        certificate = material.certificate
        return ListenerReload(listener=listener, reloaded=not refused, subject=certificate.subject,
                              not_after=certificate.not_after, reason=refused)

    def check_expiry(self) -> None:
        """A certificate_expiring event (and a warning) for each certificate in use
        that ends within EXPIRY_WARNING_DAYS."""
        if self.events is None:
            return
        soon = self.clock.seconds() + EXPIRY_WARNING_DAYS * DAY_S
        for certificate in self.summaries():
            if certificate.not_after <= soon:
                log.warning("the certificate of %s (%s) expires %s: renew it, then send the node SIGHUP or run "
                            "meshgate reload-tls", certificate.listener, certificate.subject[:_SUBJECT_SHOWN],
                            utc_date(certificate.not_after))
                self.events.emit(CertificateExpiring(listener=certificate.listener, subject=certificate.subject,
                                                     not_after=certificate.not_after))
