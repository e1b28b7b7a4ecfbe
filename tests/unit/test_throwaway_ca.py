"""meshgate.throwaway_ca: the local mesh's CA and node certificates are made once,
reused while valid for more than a day, and made anew when they are not (or do not
belong together); what they hold is what TLS on 127.0.0.1 needs."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from gateway.tls import TlsMaterial
from meshgate import throwaway_ca


def _contents(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_the_files_are_made_once_and_reused_while_valid(tmp_path: Path) -> None:
    made = throwaway_ca.ensure(tmp_path / "tls", ["node1", "node2"])
    assert made.made and sorted(made.nodes) == ["node1", "node2"]
    before = _contents(tmp_path / "tls")
    again = throwaway_ca.ensure(tmp_path / "tls", ["node1", "node2"])
    assert not again.made and _contents(tmp_path / "tls") == before
    assert again.not_after - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=29)


def test_a_node_certificate_names_this_machine_and_serves_both_ends_of_a_link(tmp_path: Path) -> None:
    pki = throwaway_ca.ensure(tmp_path / "tls", ["node1"])
    files = pki.nodes["node1"]
    leaf = x509.load_pem_x509_certificate(files.certificate.read_bytes())
    ca = x509.load_pem_x509_certificate(pki.ca_certificate.read_bytes())
    leaf.verify_directly_issued_by(ca)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert files.private_key.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "tls" / "ca.key").stat().st_mode & 0o777 == 0o600
    TlsMaterial(str(files.certificate), str(files.private_key), str(pki.ca_certificate))  # what a node loads


def test_files_ending_within_a_day_are_made_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(throwaway_ca, "VALID_FOR", datetime.timedelta(hours=12))
    throwaway_ca.ensure(tmp_path / "tls", ["node1"])
    monkeypatch.undo()
    before = _contents(tmp_path / "tls")
    renewed = throwaway_ca.ensure(tmp_path / "tls", ["node1"])
    assert renewed.made and renewed.not_after - datetime.datetime.now(datetime.UTC) > datetime.timedelta(days=29)
    after = _contents(tmp_path / "tls")
    assert all(after[name] != before[name] for name in ("ca.crt", "ca.key", "node1.crt", "node1.key"))


def test_a_damaged_or_foreign_node_certificate_is_made_anew_and_the_rest_kept(tmp_path: Path) -> None:
    throwaway_ca.ensure(tmp_path / "tls", ["node1", "node2"])
    throwaway_ca.ensure(tmp_path / "other", ["node1"])
    shutil.copy(tmp_path / "other" / "node1.crt", tmp_path / "tls" / "node1.crt")  # signed by another CA
    shutil.copy(tmp_path / "other" / "node1.key", tmp_path / "tls" / "node1.key")
    (tmp_path / "tls" / "node2.key").write_text("not a key")
    before = _contents(tmp_path / "tls")
    pki = throwaway_ca.ensure(tmp_path / "tls", ["node1", "node2", "node3"])
    after = _contents(tmp_path / "tls")
    assert pki.made and after["ca.crt"] == before["ca.crt"]
    assert after["node1.crt"] != before["node1.crt"] and after["node2.key"] != before["node2.key"]
    ca = x509.load_pem_x509_certificate(after["ca.crt"])
    for name in ("node1", "node2", "node3"):
        x509.load_pem_x509_certificate(after[f"{name}.crt"]).verify_directly_issued_by(ca)
