"""The witness over mutual TLS (``meshgate witness --certificate … --private-key …
--ca-certificate …``, docs/ha.md#the-witness-over-tls), with real ``meshgate``
processes and certificates made here:

1. a replicated pair and its witness, all over TLS: ``kill -9`` of the primary, the
   backup takes over with the witness's grant and nothing receipted is lost;
2. a member with TLS and a witness without: the member refuses it, says why (once a
   minute), and a backup is never granted a takeover (no quorum: the safe side);
3. the witness's TLS options, bad: exit status 2 naming the file."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
from e2e_support import HOST, MESHGATE, manage_result, unique
from ha_support import HAProcesses, Member, Producing, ha_table, listening, mesh_table
from mesh_support import free_port, wait_until
from tls_support import issue

from meshgate.client import FailoverConnection
from model.requests import Summary

PASSWORD = "e2e-" + unique("witness-tls")
TAKEOVER_DEADLINE = 8.0  # seconds from kill -9 to the backup listening
pytestmark = pytest.mark.timeout(180)


class PairCertificates:
    """One CA for the pair and its witness; each leaf names 127.0.0.1 and may serve and dial."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.ca = issue(directory, "ca", "pair CA", ca=True)

    def leaf(self, stem: str, **options) -> tuple[Path, Path]:
        _, _, cert, key = issue(self.directory, stem, stem, issuer=self.ca[:2], client=True, **options)
        return cert, key

    def table(self, name: str, stem: str) -> str:
        """A ``[ha.tls]`` or ``[mesh.tls]`` table (``name``) with a new leaf."""
        cert, key = self.leaf(stem)
        return f'\n[{name}]\ncertificate = "{cert}"\nprivate_key = "{key}"\nca_certificate = "{self.ca[2]}"\n'

    def ha_tls(self, stem: str) -> str:
        return self.table("ha.tls", stem)

    def mesh_tls(self, stem: str) -> str:
        """A [mesh] of this member alone (its links are not the point), over TLS."""
        return "\n" + mesh_table(PASSWORD, free_port(), []) + self.table("mesh.tls", stem)

    def witness_options(self, stem: str = "witness") -> list[str]:
        cert, key = self.leaf(stem)
        return ["--certificate", str(cert), "--private-key", str(key), "--ca-certificate", str(self.ca[2])]


@pytest.fixture
def pair(tmp_path):
    made = HAProcesses(tmp_path, PASSWORD)
    yield made
    made.cleanup()


@pytest.fixture
def certificates(tmp_path) -> PairCertificates:
    return PairCertificates(tmp_path / "certificates")


def start_pair(pair: HAProcesses, witness_port: int, extra: str, primary_extra: str = "",
               backup_extra: str = "") -> tuple[Member, Member]:
    """A primary and its backup (each with ``extra`` and its own), the backup caught up."""
    a_repl, b_repl = free_port(), free_port()
    primary = pair.member("primary", ha_table("primary", a_repl, b_repl, witness_port, extra + primary_extra,
                                              password=PASSWORD)).start()
    backup = pair.member("backup", ha_table("backup", b_repl, a_repl, witness_port, extra + backup_extra,
                                            password=PASSWORD)).launch(free_port())
    backup.wait_log(r"replication: caught up with the primary")
    wait_until(lambda: manage_result(primary.port, Summary()).node.replication_state == "in-sync",
               "the primary to see its backup in sync")
    return primary, backup


@pytest.mark.parametrize("member_tls", ["ha.tls", "mesh.tls"])
def test_a_pair_and_its_witness_all_over_tls_take_over_a_killed_primary(pair, certificates, member_tls):
    """Members dial the witness with [ha.tls]'s files, or without it with [mesh.tls]'s."""
    tls_witness = pair.witness(certificates.witness_options())
    assert "(mutual TLS)" in tls_witness.output.text("stdout")
    if member_tls == "ha.tls":
        primary, backup = start_pair(pair, tls_witness.port, certificates.ha_tls("member"))
    else:
        primary, backup = start_pair(pair, tls_witness.port, "", certificates.mesh_tls("primary"),
                                     certificates.mesh_tls("backup"))
    epoch = manage_result(primary.port, Summary()).node.epoch
    wait_until(lambda: f"node {manage_result(primary.port, Summary()).node.id} serves at epoch {epoch}"
               in tls_witness.stderr(), "the witness to hear the primary's heartbeats over TLS")

    url = (f"failover:(tcp://{HOST}:{primary.port},tcp://{HOST}:{backup.port})?randomize=false"
           "&initialReconnectDelay=50&maxReconnectDelay=200&connectionTimeout=2000")
    queue = "/queue/" + unique("witness-tls")
    producer = FailoverConnection(url).connect()
    count = 90
    sending = Producing(producer, queue, [f"w{i:03d}" for i in range(count)])
    wait_until(lambda: len(sending.receipted) >= count // 3, "a third of the sends receipted", timeout=30)
    primary.kill9()
    backup.wait_listening(timeout=TAKEOVER_DEADLINE)
    backup.wait_log(r"backup: the primary at .* is gone .* and the witness agrees; taking over at epoch")
    sending.thread.join(60)
    assert not sending.thread.is_alive() and len(sending.receipted) == count, sending.errors
    got: list[str] = []
    lock = threading.Lock()
    consumer = FailoverConnection(url).connect()

    def handle(message) -> None:
        with lock:
            got.append(message.body)

    consumer.subscribe(queue, callback=handle)
    wait_until(lambda: set(sending.receipted) <= set(got), "every receipted message consumed", timeout=30)
    assert manage_result(backup.port, Summary()).node.epoch == epoch + 1
    assert "taken over at epoch" in tls_witness.stderr()
    for text in (backup.stderr(), tls_witness.stderr()):
        assert "tls: " not in text and "speaks plaintext" not in text, text[-3000:]
    consumer.disconnect()
    producer.disconnect()


def test_a_tls_member_refuses_a_plaintext_witness_and_no_takeover_is_granted(pair, certificates):
    plain_witness = pair.witness([])
    primary, backup = start_pair(pair, plain_witness.port, certificates.ha_tls("member"))
    refused = rf"ha: witness {HOST}:{plain_witness.port} speaks plaintext; this node requires TLS"
    primary.wait_log(refused)
    plain_witness.output.wait_for(r"witness: member 127\.0\.0\.1 speaks TLS; this witness has no TLS",
                                  stream="stderr", timeout=10)
    time.sleep(2.0)  # ten more heartbeats (every 200 ms), each refused: still one line this minute
    assert len(re.findall(refused, primary.stderr())) == 1, primary.stderr()[-3000:]
    assert "serves at epoch" not in plain_witness.stderr()  # it never heard the primary

    primary.kill9()
    backup.wait_log(rf"backup: the primary at .* is unreachable from here, but the witness says: the witness at "
                    rf"{HOST}:{plain_witness.port} cannot be reached .*no quorum; no takeover")
    backup.wait_log(refused)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        assert not listening(backup.port), "the backup took over with a witness it must refuse"
        time.sleep(0.2)
    assert "taken over" not in plain_witness.stderr()


def test_a_plaintext_member_gets_no_answer_from_a_tls_witness(pair, certificates):
    tls_witness = pair.witness(certificates.witness_options())
    primary = pair.member("primary", ha_table("primary", free_port(), free_port(), tls_witness.port,
                                              password=PASSWORD)).start()
    primary.wait_log(r"ha: the witness at \S+ cannot be reached \(it closed the connection without answering "
                     r"\(if it requires TLS, this member needs \[ha\.tls\] or \[mesh\.tls\]\)\)")
    assert tls_witness.output.wait_for(r"tls: peer 127\.0\.0\.1 speaks plaintext; this node requires TLS",
                                       stream="stderr", timeout=10), tls_witness.stderr()
    assert "serves at epoch" not in tls_witness.stderr()


def _witness_exit(tmp_path: Path, options: list[str]) -> tuple[int, str]:
    env = {**os.environ, "MESHGATE_HA_PASSWORD": PASSWORD}
    done = subprocess.run([MESHGATE, "witness", "--bind", f"{HOST}:{free_port()}", *options], env=env,
                          capture_output=True, text=True, timeout=30, cwd=tmp_path, stdin=subprocess.DEVNULL)
    return done.returncode, done.stderr


def test_bad_witness_tls_files_exit_2_naming_the_file(tmp_path, certificates):
    good = certificates.witness_options()
    cert, key, ca = good[1], good[3], good[5]
    _, other_key = certificates.leaf("other")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    missing = str(tmp_path / "missing.key")
    cases = [
        (["--certificate", cert], "--certificate, --private-key and --ca-certificate together"),
        (["--certificate", cert, "--private-key", missing, "--ca-certificate", ca], missing),
        (["--certificate", str(garbage), "--private-key", key, "--ca-certificate", ca], str(garbage)),
        (["--certificate", cert, "--private-key", key, "--ca-certificate", str(garbage)], str(garbage)),
        (["--certificate", cert, "--private-key", str(other_key), "--ca-certificate", ca],
         f"the private key '{other_key}' does not match the certificate '{cert}'"),
    ]
    for options, named in cases:
        status, stderr = _witness_exit(tmp_path, options)
        assert status == 2 and named in stderr and "Traceback" not in stderr, (options, status, stderr)
