"""Mutual TLS material for a listener and its diallers: one certificate, its key and
the CA whose certificates a peer must present (``[mesh.tls]``, docs/mesh.md).

``TlsMaterial`` holds the files' current OpenSSL context; each new handshake takes the
context current at that moment, so ``reload()`` swaps the files for new handshakes while
the connections made before stay up. ``server_factory``/``client_factory`` wrap a
protocol factory in TLS that drops a handshake not done within ``handshake_timeout``
and logs, once a minute per peer, why a handshake failed, as precisely as OpenSSL's
verification says (plaintext peer, unknown CA, expired, name mismatch)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import msgspec
from OpenSSL import SSL, crypto
from service_identity import VerificationError
from service_identity.cryptography import verify_certificate_hostname, verify_certificate_ip_address
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.interfaces import (
    IOpenSSLClientConnectionCreator,
    IOpenSSLContextFactory,
    IOpenSSLServerConnectionCreator,
)
from twisted.internet.protocol import Factory, connectionDone
from twisted.internet.ssl import CertificateOptions
from twisted.protocols.tls import BufferingTLSTransport, TLSMemoryBIOFactory
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.hostile_log import PeerLog

HANDSHAKE_TIMEOUT_S = 5.0
_VERIFY = SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT
_NOT_OURS = {2, 18, 19, 20, 21, 24}  # X509_V_ERR_*: unknown issuer, self-signed, not a CA
_EXPIRED, _NOT_YET_VALID = 10, 9
_PLAINTEXT = ("wrong version number", "packet length too long", "http request", "record layer failure",
              "unknown protocol", "record_layer_failure")


class TlsError(Exception):
    """A file of the material cannot be used; the message names it."""


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as problem:
        raise TlsError(f"cannot read the {what} {path!r}: {problem.strerror or problem}") from None


class CertificateSummary(msgspec.Struct, frozen=True):
    """What an operator needs of a certificate in use: who it names and when it ends."""

    subject: str
    not_after: float  # Unix time


def _summary(cert: crypto.X509) -> CertificateSummary:
    leaf = cert.to_cryptography()
    return CertificateSummary(subject=leaf.subject.rfc4514_string(),
                              not_after=leaf.not_valid_after_utc.timestamp())


def _context(certificate: str, private_key: str,
             ca_certificate: str | None) -> tuple[SSL.Context, CertificateSummary]:
    try:
        cert = crypto.load_certificate(crypto.FILETYPE_PEM, _read(certificate, "certificate"))
    except crypto.Error:
        raise TlsError(f"the certificate {certificate!r} holds no PEM certificate") from None
    try:
        key = crypto.load_privatekey(crypto.FILETYPE_PEM, _read(private_key, "private key"))
    except crypto.Error:
        raise TlsError(f"the private key {private_key!r} holds no PEM private key (or it is encrypted)") from None
    authorities = []
    if ca_certificate is not None:
        try:
            authorities.append(crypto.load_certificate(crypto.FILETYPE_PEM, _read(ca_certificate, "CA certificate")))
        except crypto.Error:
            raise TlsError(f"the CA certificate {ca_certificate!r} holds no PEM certificate") from None
    try:
        options = CertificateOptions(privateKey=key, certificate=cert, caCerts=authorities or None,
                                     verify=bool(authorities), requireCertificate=bool(authorities))
        return options.getContext(), _summary(cert)
    except SSL.Error:
        raise TlsError(f"the private key {private_key!r} does not match the certificate {certificate!r}") from None


@implementer(IOpenSSLContextFactory)
class TlsMaterial:
    """The current context made from PEM files; ``ca_name`` names the CA in logs
    ("the mesh CA"), ``verify_hostname``: a dialler checks the peer's certificate names
    the host it dialled (subjectAltName DNS or IP). Without ``ca_certificate`` (a
    client-facing listener) no peer certificate is asked for; with it, one the CA
    signed is required. ``certificate`` summarises the certificate in use."""

    def __init__(self, certificate: str, private_key: str, ca_certificate: str | None, *,
                 verify_hostname: bool = True, ca_name: str = "the CA") -> None:
        self.files = (certificate, private_key, ca_certificate)
        self.verify_hostname = verify_hostname
        self.ca_name = ca_name
        self.context, self.certificate = _context(*self.files)

    def reload(self) -> None:
        """Read the files again; new handshakes use them. On a TlsError the old stay."""
        self.context, self.certificate = _context(*self.files)

    def getContext(self) -> SSL.Context:
        """Twisted's ``IOpenSSLContextFactory``: a listener endpoint given this material
        asks it for every new connection, so it gets the files of the last reload."""
        return self.context

    def server_factory(self, wrapped: Factory, log: PeerLog, clock: Any,
                       timeout: float = HANDSHAKE_TIMEOUT_S) -> TLSMemoryBIOFactory:
        return _Factory(_ServerCreator(self), False, wrapped, clock, log, "", timeout)

    def client_factory(self, wrapped: Factory, host: str, port: int, log: PeerLog, clock: Any,
                       timeout: float = HANDSHAKE_TIMEOUT_S) -> TLSMemoryBIOFactory:
        return _Factory(_ClientCreator(self, host), True, wrapped, clock, log, f"{host}:{port}", timeout)


class _Tls(BufferingTLSTransport):
    """A TLS connection that remembers why verification failed, has a handshake
    deadline and says why a handshake failed."""

    factory: _Factory
    verify_problem = ""
    _deadline: Any = None

    def connectionMade(self) -> None:
        super().connectionMade()
        if self._deadline is None:  # Twisted calls it twice: as the TLS layer, then as the wrapper
            factory = self.factory
            self._deadline = factory.clock.callLater(factory.timeout, self._handshake_late)

    def _handshake_late(self) -> None:
        if not self._handshakeDone and self._tlsConnection is not None:
            self.verify_problem = f"no TLS handshake within {self.factory.timeout:g} s; dropped"
            self.abortConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        failure = self._reason or reason  # why TLS failed, when it did (Twisted's own field)
        # TLS 1.3: a dialler's handshake is done before the listener has judged its certificate.
        if not self._handshakeDone or (failure is not None and failure.check(SSL.Error)):
            self._tell(failure)
        super().connectionLost(reason)

    def _tell(self, reason: Failure | None) -> None:
        factory = self.factory
        peer = factory.peer or _peer_host(self)
        ca = factory.ca_name
        text = self.verify_problem
        failed = str(reason.value) if reason is not None and reason.check(SSL.Error) else ""
        if not text and failed:
            lowered = failed.lower()
            if any(marker in lowered for marker in _PLAINTEXT):
                text = f"peer {peer} speaks plaintext; this node requires TLS"
            elif "unknown ca" in lowered:
                text = f"{peer} refused this node's certificate: not signed by {ca} it trusts"
            elif "certificate expired" in lowered:
                text = f"{peer} refused this node's certificate: certificate expired"
            elif "certificate required" in lowered:
                text = f"{peer} requires a certificate signed by {ca}"
            else:
                text = f"TLS handshake with {peer} failed: {failed[:200]}"
        if not text:
            text = f"{peer} closed the connection during the TLS handshake (does it speak TLS?)"
        factory.log.warning(peer.rsplit(":", 1)[0] if factory.peer else peer, "tls: %s", text)


class _Factory(TLSMemoryBIOFactory):
    protocol = _Tls

    def __init__(self, creator: _ServerCreator | _ClientCreator, is_client: bool, wrapped: Factory, clock: Any,
                 log: PeerLog, peer: str, timeout: float) -> None:
        super().__init__(cast(Any, creator), is_client, cast(Any, wrapped), clock)
        self.clock = clock
        self.log = log
        self.peer = peer  # the dialled "host:port"; "" for a listener (then the connection's address)
        self.timeout = timeout
        self.ca_name = creator.material.ca_name


def _peer_host(tls: _Tls) -> str:
    return str(getattr(cast(Any, tls.transport).getPeer(), "host", "?"))


def _verify(tls: _Tls, material: TlsMaterial, host: str | None) -> Callable[..., bool]:
    def verify(connection: SSL.Connection, cert: crypto.X509, error: int, depth: int, ok: int) -> bool:
        peer = tls.factory.peer or _peer_host(tls)
        if not ok:
            if error in _NOT_OURS:
                tls.verify_problem = f"certificate of {peer} not signed by {material.ca_name}"
            elif error == _EXPIRED:
                tls.verify_problem = f"certificate of {peer} expired"
            elif error == _NOT_YET_VALID:
                tls.verify_problem = f"certificate of {peer} not valid yet"
            else:
                tls.verify_problem = f"certificate of {peer} refused (X509 error {error})"
            return False
        if depth == 0 and host is not None:
            try:
                leaf = cert.to_cryptography()
                if isIPAddress(host) or isIPv6Address(host):
                    verify_certificate_ip_address(leaf, host)
                else:
                    verify_certificate_hostname(leaf, host)
            except VerificationError:
                tls.verify_problem = f"name mismatch: the certificate of {peer} does not name {host}"
                return False
        return True

    return verify


@implementer(IOpenSSLServerConnectionCreator)
class _ServerCreator:
    def __init__(self, material: TlsMaterial) -> None:
        self.material = material

    def serverConnectionForTLS(self, tls: _Tls) -> SSL.Connection:
        connection = SSL.Connection(self.material.context, None)
        connection.set_app_data(tls)
        connection.set_accept_state()
        connection.set_verify(_VERIFY, _verify(tls, self.material, None))
        return connection


@implementer(IOpenSSLClientConnectionCreator)
class _ClientCreator:
    def __init__(self, material: TlsMaterial, host: str) -> None:
        self.material = material
        self.host = host

    def clientConnectionForTLS(self, tls: _Tls) -> SSL.Connection:
        material = self.material
        connection = SSL.Connection(material.context, None)
        connection.set_app_data(tls)
        connection.set_connect_state()
        if not (isIPAddress(self.host) or isIPv6Address(self.host)):
            connection.set_tlsext_host_name(self.host.encode("idna"))
        connection.set_verify(_VERIFY, _verify(tls, material, self.host if material.verify_hostname else None))
        return connection


__all__ = ["HANDSHAKE_TIMEOUT_S", "CertificateSummary", "TlsError", "TlsMaterial"]
