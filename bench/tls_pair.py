"""Helpers of `bench/mesh_pair.sh --tls`: a throw-away CA and node certificates for
`[mesh.tls]`, and the summary of the interleaved plaintext / TLS rounds.

    tls_pair.py certs DIR NAME...   # DIR/ca.crt, DIR/NAME.crt, DIR/NAME.key (EC P-256, 1 day)
    tls_pair.py summary WORK        # reads WORK/round-*-LABEL.txt (stomp_bench.py output)

Each node's certificate names 127.0.0.1 (the address its peer dials) and may serve and
dial, as `[mesh.tls]` asks of both ends of a link. The summary pairs the rounds: the
TLS/plaintext ratio of each round (taken minutes apart on a machine that drifts 30 %
within a day, only side-by-side figures compare), then the median of those ratios.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import statistics
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# (plaintext label, TLS label) of each broker, as mesh_pair.sh --tls names its runs
PAIRS = (("meshgate-plain", "meshgate-tls"), ("activemq-tcp", "activemq-ssl"))
SCENARIOS = ("queue-256", "queue-256-persistent")
GOALS = {"queue-256": 0.75, "queue-256-persistent": 0.9}  # Meshgate's TLS / plaintext (issue 24)
_CPU_NOTE = re.compile(r"([\d.]+) µs broker CPU/msg")
_ROUND_FILE = re.compile(r"round-(\d+)-(.+)\.txt$")


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey],
                 leaf: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer[0])
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=not leaf, path_length=None), critical=True)
    )
    if leaf:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        ).add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
    return builder.sign(issuer[1], hashes.SHA256())


def _write(directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None) -> None:
    (directory / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        key_path = directory / f"{stem}.key"
        key_path.touch(mode=0o600)
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))


def make_certificates(directory: Path, names: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench mesh CA")])
    _write(directory, "ca", _certificate("bench mesh CA", ca_key, (ca_name, ca_key), leaf=False), None)
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        _write(directory, name, _certificate(name, key, (ca_name, ca_key), leaf=True), key)


def read_rounds(work: Path) -> dict[tuple[str, str], list[tuple[int, float, float | None, bool]]]:
    """(label, scenario) -> [(round, msgs/s, µs broker CPU per message, noisy)] from the tables."""
    runs: dict[tuple[str, str], list[tuple[int, float, float | None, bool]]] = {}
    for path in sorted(work.glob("round-*.txt")):
        match = _ROUND_FILE.search(path.name)
        if match is None:
            continue
        for line in path.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 11 or cells[3] in ("msgs/s", "---:", "-") or cells[-1].startswith("FAILED"):
                continue
            cpu = _CPU_NOTE.search(cells[-1])
            runs.setdefault((cells[0], cells[1]), []).append(
                (int(match[1]), float(cells[3]), float(cpu[1]) if cpu else None, "NOISY" in cells[-1]))
    return runs


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):,.2f}" if values else "-"


def summary(work: Path) -> None:
    runs = read_rounds(work)
    print("| broker | scenario | plaintext msgs/s (rounds) | TLS msgs/s (rounds) | TLS/plain per round | median ratio"
          " | µs CPU/msg plain | µs CPU/msg TLS | CPU plain/TLS | goal |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---|")
    for plain_label, tls_label in PAIRS:
        for scenario in SCENARIOS:
            plain = {r[0]: r for r in runs.get((plain_label, scenario), [])}
            tls = {r[0]: r for r in runs.get((tls_label, scenario), [])}
            if not plain and not tls:
                continue
            both = sorted(plain.keys() & tls.keys())
            ratios = [tls[n][1] / plain[n][1] for n in both]
            cpu_plain = [r[2] for r in plain.values() if r[2] is not None]
            cpu_tls = [r[2] for r in tls.values() if r[2] is not None]
            goal = GOALS[scenario] if plain_label.startswith("meshgate") else None
            verdict = "-" if goal is None or not ratios else (
                f"≥ {goal} {'met' if statistics.median(ratios) >= goal else 'MISSED'}")

            def rates(side: dict) -> str:
                return " · ".join(f"{side[n][1]:,.0f}{'*' if side[n][3] else ''}" for n in sorted(side))

            cpu_ratio = (f"{statistics.median(cpu_plain) / statistics.median(cpu_tls):.2f}"
                         if cpu_plain and cpu_tls else "-")
            print(f"| {plain_label.split('-')[0]} | {scenario} | {rates(plain)} | {rates(tls)} | "
                  f"{' · '.join(f'{r:.2f}' for r in ratios)} | {_median(ratios)} | {_median(cpu_plain)} | "
                  f"{_median(cpu_tls)} | {cpu_ratio} | {verdict} |")
    print("\n(* = a run flagged NOISY: other processes used > 30 % CPU; ratios pair the runs of one round."
          "\n CPU plain/TLS: the ratio of the medians of CPU per message, the throughput ratio when both pairs"
          " are CPU-bound; other processes hardly move it)")


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[1] == "certs":
        make_certificates(Path(argv[2]), argv[3:])
        return 0
    if len(argv) == 3 and argv[1] == "summary":
        summary(Path(argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
