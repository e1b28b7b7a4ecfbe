"""Certificates made on the fly for the TLS tests (cryptography package): a test CA
and leaves it signs. Used by the TLS, rotation and HA tests and the console's certificate tests."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str, organization: str | None = None):
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def issue(directory: Path, stem: str, common_name: str, issuer=None, ca: bool = False, server: bool = True,
          client: bool = False, names: tuple[str, ...] = ("localhost", "127.0.0.1"), expired: bool = False,
          days: float = 1, organization: str | None = None):
    """Write stem.crt/stem.key; issuer is (cert, key) or None for self-signed. A leaf is
    for a server (with ``names``, DNS names or IP addresses) unless ``server`` is false; with
    ``client`` it may also authenticate as a client (both ends of a link). Valid ``days``
    from now; ``expired``: until yesterday. Returns (cert, key, cert path, key path)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=days + 1 if expired else 0)
    issuer_cert, issuer_key = issuer if issuer is not None else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(issuer_cert.subject if issuer_cert is not None else _name(common_name, organization))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        if client or not server:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_san(name) for name in names]),
                critical=False,
            )
    cert = builder.sign(issuer_key, hashes.SHA256())
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert, key, cert_path, key_path


class Certificates:
    """A mesh CA and a certificate per node, all in one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = issue(directory, "mesh-ca", "mesh CA", ca=True)

    def table(self, stem: str, ca=None, **leaf) -> str:
        """The [mesh.tls] table of a node whose certificate ``ca`` (default: the mesh CA) signed."""
        signer = ca or self.ca
        _, _, cert, key = issue(self.directory, stem, stem, issuer=signer[:2], client=True, **leaf)
        return (f'\n[mesh.tls]\ncertificate = "{cert}"\nprivate_key = "{key}"\n'
                f'ca_certificate = "{self.ca[2]}"\n')


def plaintext_answer(port: int, first_bytes: bytes, timeout: float = 10.0) -> bytes:
    """Dial ``port`` on loopback without TLS, send ``first_bytes`` and return everything the
    listener sent before it closed (a mesh listener in plaintext answers with its HELLO at
    once; one that requires TLS with at most a TLS alert record)."""
    answer = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(first_bytes)
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                raise AssertionError(f"port {port} still open {timeout} s after a plaintext dial; "
                                     f"it answered {bytes(answer)!r}") from None
            if not data:
                break
            answer += data
    return bytes(answer)


def tls_answer(port: int, certificates: Certificates, stem: str, expected: bytes, timeout: float = 10.0) -> bytes:
    """Dial ``port`` over mutual TLS with a client certificate the mesh CA signs (``stem``),
    checking the listener's certificate against the mesh CA and 127.0.0.1, and read the
    decrypted bytes until ``expected`` is among them; returns them."""
    _, _, cert, key = issue(certificates.directory, stem, stem, issuer=certificates.ca[:2], server=False)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(certificates.ca[2])
    context.load_cert_chain(cert, key)
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        while expected not in answer:
            data = sock.recv(65536)
            if not data:
                raise AssertionError(f"port {port} closed the TLS connection; it sent {answer!r}")
            answer += data
    return answer
