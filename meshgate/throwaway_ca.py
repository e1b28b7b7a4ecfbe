"""A throw-away certificate authority for ``meshgate local-mesh --tls``: one CA and a
certificate per node, all naming this machine (127.0.0.1 and localhost), kept in one
directory and reused while they stay valid. For trying TLS on one machine only; a real
mesh across hosts takes certificates naming each host's address (deploy/README.md)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=30)
# Files that end sooner than this are made anew, so a mesh started today runs through tomorrow.
RENEW_WITHIN = datetime.timedelta(days=1)
NAMES = ("127.0.0.1", "localhost")
CA_NAME = "meshgate local-mesh throw-away CA"


@dataclass(frozen=True)
class KeyPair:
    certificate: Path
    private_key: Path


@dataclass(frozen=True)
class ThrowawayPki:
    ca_certificate: Path
    nodes: dict[str, KeyPair]
    not_after: datetime.datetime  # the earliest end among the files
    made: bool  # some file was (re)made now, rather than all reused


def ensure(directory: Path, node_names: Sequence[str]) -> ThrowawayPki:
    """The CA and one certificate+key per node under ``directory``: those already there
    if they parse, chain to the CA and stay valid for more than RENEW_WITHIN, else new
    ones (a new CA makes every node's anew). OSError if the directory is not writable."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)  # the keys' directory: its owner's alone
    now = datetime.datetime.now(datetime.UTC)
    ca_files = KeyPair(directory / "ca.crt", directory / "ca.key")
    ca = _usable(ca_files, now)
    made = ca is None
    if ca is None:
        ca = _issue(ca_files, CA_NAME, issuer=None, now=now)
    nodes = {}
    ends = [ca[0].not_valid_after_utc]
    for name in node_names:
        files = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
        leaf = None if made else _usable(files, now, ca[0])
        if leaf is None:
            leaf = _issue(files, name, issuer=ca, now=now)
            made = True
        nodes[name] = files
        ends.append(leaf[0].not_valid_after_utc)
    return ThrowawayPki(ca_files.certificate, nodes, min(ends), made)


_Pair = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def _usable(files: KeyPair, now: datetime.datetime, issuer: x509.Certificate | None = None) -> _Pair | None:
    """The certificate and key in ``files`` if they can serve past tomorrow: readable,
    matching, issued by ``issuer`` (when given) and valid for more than RENEW_WITHIN."""
    try:
        certificate = x509.load_pem_x509_certificate(files.certificate.read_bytes())
        key = serialization.load_pem_private_key(files.private_key.read_bytes(), password=None)
        if issuer is not None:
            certificate.verify_directly_issued_by(issuer)
    except (OSError, ValueError, TypeError, InvalidSignature):
        return None  # missing, damaged or from another CA: throw-away files are simply made anew
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != certificate.public_key():
        return None
    if certificate.not_valid_after_utc - now <= RENEW_WITHIN or certificate.not_valid_before_utc > now:
        return None
    return certificate, key


def _issue(files: KeyPair, common_name: str, issuer: _Pair | None, now: datetime.datetime) -> _Pair:
    """Write a new certificate and key (the key readable by its owner only); ``issuer``
    None makes the self-signed CA, else a node certificate for both ends of a TLS link
    (server and client) naming NAMES."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    signer_certificate, signer_key = issuer if issuer is not None else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer_certificate.subject if signer_certificate is not None else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate a clock a little behind
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer is None:
        builder = (builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                                key_encipherment=False, data_encipherment=False,
                                                key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                encipher_only=False, decipher_only=False), critical=True))
    else:
        builder = (
            builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()),
                           critical=False)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         key_cert_sign=False, crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName([_general_name(name) for name in NAMES]), critical=False)
        )
    certificate = builder.sign(signer_key, hashes.SHA256())
    _write(files.private_key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()), mode=0o600)
    _write(files.certificate, certificate.public_bytes(serialization.Encoding.PEM), mode=0o644)
    return certificate, key


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _write(path: Path, content: bytes, mode: int) -> None:
    """Replace ``path`` by a file created with ``mode``, so a key is never readable by others, not even briefly."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "wb") as output:
        output.write(content)
