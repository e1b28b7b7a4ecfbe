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
from cryptography import x509
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
from twisted.protocols.tls import BufferingTLSTransport, TLSMemoryBIOFactory, TLSMemoryBIOProtocol
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
    """A file of the material cannot be used; the message names it, ``key`` says which
    one is at fault ("certificate", "private_key" or "ca_certificate", as in a config table)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


_KEYS = {"certificate": "certificate", "private key": "private_key", "CA certificate": "ca_certificate"}


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as problem:
        raise TlsError(f"cannot read the {what} {path!r}: {problem.strerror or problem}", _KEYS[what]) from None


class CertificateSummary(msgspec.Struct, frozen=True):
    """What an operator needs of a certificate in use: who it names and when it ends."""

    subject: str
    not_after: float  # Unix time


def _summary(cert: crypto.X509) -> CertificateSummary:
    leaf = cert.to_cryptography()
    return CertificateSummary(subject=leaf.subject.rfc4514_string(),
                              not_after=leaf.not_valid_after_utc.timestamp())


def _certificates(path: str, what: str, key: str) -> list[crypto.X509]:
    """Every PEM certificate in the file, in order (a chain, or a bundle of CAs)."""
    try:
        found = x509.load_pem_x509_certificates(_read(path, what))
    except ValueError:
        raise TlsError(f"the {what} {path!r} holds no PEM certificate", key) from None
    return [crypto.X509.from_cryptography(certificate) for certificate in found]


def _context(certificate: str, private_key: str,
             ca_certificate: str | None) -> tuple[SSL.Context, CertificateSummary]:
    """The context of the files: the certificate file's first certificate is this side's,
    any after it the chain sent with it; every certificate of the CA file is trusted
    (several while a CA is being replaced)."""
    leaf, *chain = _certificates(certificate, "certificate", "certificate")
    try:
        key = crypto.load_privatekey(crypto.FILETYPE_PEM, _read(private_key, "private key"))
    except crypto.Error:
        raise TlsError(f"the private key {private_key!r} holds no PEM private key (or it is encrypted)",
                       "private_key") from None
    authorities = _certificates(ca_certificate, "CA certificate", "ca_certificate") if ca_certificate else []
    try:
        options = CertificateOptions(privateKey=key, certificate=leaf, extraCertChain=chain or None,
                                     caCerts=authorities or None, verify=bool(authorities),
                                     requireCertificate=bool(authorities))
        return options.getContext(), _summary(leaf)
    except SSL.Error:
        raise TlsError(f"the private key {private_key!r} does not match the certificate {certificate!r}",
                       "private_key") from None


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

    def client_creator(self, host: str) -> IOpenSSLClientConnectionCreator:
        """For ``endpoints.wrapClientTLS``: each dial takes the context of the last
        reload, verifies the peer against the CA and (``verify_hostname``) ``host``."""
        return cast(IOpenSSLClientConnectionCreator, _EndpointCreator(self, host))


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
        if depth == 0 and host is not None and not _names(cert, host):
            tls.verify_problem = f"name mismatch: the certificate of {peer} does not name {host}"
            return False
        return True

    return verify


def _names(cert: crypto.X509, host: str) -> bool:
    """Whether the certificate names ``host`` (subjectAltName DNS name or IP address)."""
    leaf = cert.to_cryptography()
    try:
        if isIPAddress(host) or isIPv6Address(host):
            verify_certificate_ip_address(leaf, host)
        else:
            verify_certificate_hostname(leaf, host)
    except VerificationError:
        return False
    return True


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


@implementer(IOpenSSLClientConnectionCreator)
class _EndpointCreator:
    """A dial through a Twisted client endpoint (``endpoints.wrapClientTLS``): the
    material's context current at that moment (its CA's verification) and, with
    ``verify_hostname``, the check that the peer's certificate names ``host``."""

    def __init__(self, material: TlsMaterial, host: str) -> None:
        self.material = material
        self.host = host

    def clientConnectionForTLS(self, tls: TLSMemoryBIOProtocol) -> SSL.Connection:
        connection = SSL.Connection(self.material.context, None)
        connection.set_app_data(tls)
        connection.set_connect_state()
        if not (isIPAddress(self.host) or isIPv6Address(self.host)):
            connection.set_tlsext_host_name(self.host.encode("idna"))
        if self.material.verify_hostname:
            connection.set_verify(_VERIFY, self._verify)
        return connection

    def _verify(self, connection: SSL.Connection, cert: crypto.X509, error: int, depth: int, ok: int) -> bool:
        return bool(ok) and (depth > 0 or _names(cert, self.host))


__all__ = ["HANDSHAKE_TIMEOUT_S", "CertificateSummary", "TlsError", "TlsMaterial"]
