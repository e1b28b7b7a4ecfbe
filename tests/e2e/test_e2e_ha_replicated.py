"""Replicated primary/backup pairs (docs/ha.md), with real ``meshgate broker`` and
``meshgate witness`` processes, each member with its own data dir:

1. the primary killed with ``kill -9`` mid-stream under persistent load with
   receipts: the backup takes over, nothing receipted is lost, the failover client
   reconnects by itself and its consumer continues on the backup, the epoch is one higher;
2. the replication link cut by a proxy the test controls: no takeover while the
   witness still hears the primary; once the witness loses it too, exactly one;
   the old primary, hearing from the witness again, stops (fenced);
3. the old primary restarted after a takeover rejoins as the backup;
4. with ``sync = true`` a RECEIPT waits for the backup (frozen with SIGSTOP).

Every wait is bounded; processes are stopped by pid and cleaned up at teardown."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from functools import partial
from pathlib import Path

import pytest
from e2e_support import HOST, manage_result, unique
from ha_support import HAProcesses, Member, Producing, Witness, ha_table, listening
from mesh_support import free_port, wait_until
from stomp_client import open_client

from meshgate.client import FailoverConnection
from meshgate.datadir import read_epoch
from model.requests import Summary

PASSWORD = "e2e-" + unique("repl")
TAKEOVER_DEADLINE = 8.0  # seconds from kill -9 to the backup listening
N = 300
member_config = partial(ha_table, password=PASSWORD)


# -- the processes a test starts ------------------------------------------------------------------


@pytest.fixture
def pair(tmp_path):
    made = HAProcesses(tmp_path, PASSWORD)
    yield made
    made.cleanup()


def start_pair(pair: HAProcesses, *, witness: Witness | None, backup_peer: int | None = None,
               primary_witness: int | None = None, extra: str = "") -> tuple[Member, Member, int, int]:
    """A primary and its backup, the backup caught up. Returns (primary, backup,
    the primary's replication port, the backup's)."""
    a_repl, b_repl = free_port(), free_port()
    w = witness.port if witness is not None else None
    primary = pair.member("primary", member_config("primary", a_repl, b_repl,
                                             primary_witness if primary_witness is not None else w, extra)).start()
    backup = pair.member("backup", member_config("backup", b_repl, backup_peer or a_repl, w, extra)).launch(free_port())
    backup.wait_log(r"replication: caught up with the primary")
    wait_until(lambda: manage_result(primary.port, Summary()).node.replication_state == "in-sync",
               "the primary to see its backup in sync")
    return primary, backup, a_repl, b_repl


# -- (1) kill -9 under load: nothing receipted is lost ---------------------------------------------


def test_the_backup_takes_over_a_killed_primary_with_every_receipted_message(pair):
    witness = pair.witness()
    primary, backup, _, _ = start_pair(pair, witness=witness)
    before = manage_result(primary.port, Summary()).node
    assert (before.ha_mode, before.ha_role, before.replication_state, before.replication_sync) == \
        ("replicated", "primary", "in-sync", True)
    assert not listening(backup.port), "the backup listens for clients"
    epoch = before.epoch

    url = (f"failover:(tcp://{HOST}:{primary.port},tcp://{HOST}:{backup.port})?randomize=false"
           "&initialReconnectDelay=50&maxReconnectDelay=200&connectionTimeout=2000")
    q = "/queue/" + unique("repl")
    got: list[str] = []
    got_lock = threading.Lock()
    consumer = FailoverConnection(url).connect()

    def handle(message) -> None:
        with got_lock:
            got.append(message.body)
        consumer.ack(message)

    consumer.subscribe(q, ack="client-individual", callback=handle)
    producer = FailoverConnection(url).connect()
    killed_at: list[float] = []
    sending = Producing(producer, q, [f"m{i:03d}" for i in range(N)])
    receipted, thread = sending.receipted, sending.thread
    wait_until(lambda: len(receipted) >= N // 3, "a third of the sends receipted", timeout=30)
    primary.kill9()
    killed_at.append(time.monotonic())
    backup.wait_listening(timeout=TAKEOVER_DEADLINE)
    took = time.monotonic() - killed_at[0]
    assert took <= TAKEOVER_DEADLINE
    backup.wait_log(r"backup: the primary at .* is gone .* and the witness agrees; taking over at epoch")
    thread.join(60)
    assert not thread.is_alive() and len(receipted) == N, f"only {len(receipted)} sends receipted"

    def all_consumed() -> bool:
        with got_lock:
            return set(receipted) <= set(got)

    wait_until(all_consumed, "every receipted message consumed", timeout=30,
               describe=lambda: f"missing {sorted(set(receipted) - set(got))[:10]}")
    assert producer.broker.port == backup.port and consumer.broker.port == backup.port
    after = manage_result(backup.port, Summary()).node
    assert (after.id, after.epoch, after.ha_role) == (before.id, epoch + 1, "primary")
    assert read_epoch(backup.data_dir) == epoch + 1
    producer.disconnect()
    consumer.disconnect()


# -- (2) a cut replication link: no takeover without the witness's agreement ------------------------


def test_a_cut_replication_link_makes_no_second_primary_and_exactly_one_with_quorum(pair):
    witness = pair.witness()
    a_repl = free_port()
    link_proxy = pair.proxy(a_repl)  # backup -> primary's replication listener
    witness_proxy = pair.proxy(witness.port)  # primary -> witness
    b_repl = free_port()
    primary = pair.member("primary", member_config("primary", a_repl, b_repl, witness_proxy.port)).start()
    backup = pair.member("backup", member_config("backup", b_repl, link_proxy.port, witness.port)).launch(free_port())
    backup.wait_log(r"replication: caught up with the primary")
    q = "/queue/" + unique("cut")
    client = open_client(primary)
    client.send(q, "before the cut", headers={"persistent": "true"}, receipt=True)

    link_proxy.stop()  # the replication link is cut; the witness still hears the primary
    backup.wait_log(r"replication: the link to the primary at .* is gone")
    backup.wait_log(r"the witness says: the witness heard the primary .* no takeover")
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        assert not listening(backup.port), "a second primary: the backup took over while the primary lives"
        time.sleep(0.2)
    assert primary.running and listening(primary.port)
    wait_until(lambda: manage_result(primary.port, Summary()).node.replication_state == "no-backup",
               "the primary to see its backup gone")
    # The primary goes on alone: receipts no longer wait for the backup.
    client.send(q, "alone", headers={"persistent": "true"}, receipt=True)

    witness_proxy.stop()  # now the witness loses the primary too: quorum for the backup
    backup.wait_listening(timeout=TAKEOVER_DEADLINE)
    assert len(re.findall(r"taking over at epoch", backup.stderr())) == 1
    # The old primary hears from the witness again and learns it was replaced: it stops.
    witness_proxy.start()
    assert primary.wait_exit(10) == 1
    assert re.search(r"meshgate: fenced: the witness has seen epoch \d+ of node id", primary.stderr()), \
        primary.stderr()
    assert backup.running and listening(backup.port)
    consumer = open_client(backup)
    consumer.subscribe(q)
    assert [m.body for m in consumer.listener.wait_for(1, timeout=10)] == ["before the cut"]
    client.drop()


# -- (3) the old primary, restarted, rejoins as the backup ------------------------------------------


def test_the_old_primary_restarted_after_a_takeover_rejoins_as_the_backup(pair):
    witness = pair.witness()
    primary, backup, _, _ = start_pair(pair, witness=witness)
    q = "/queue/" + unique("rejoin")
    client = open_client(primary)
    client.send(q, "one", headers={"persistent": "true"}, receipt=True)
    client.drop()
    primary.kill9()
    backup.wait_listening(timeout=TAKEOVER_DEADLINE)
    epoch = read_epoch(backup.data_dir)

    primary.launch(free_port())  # same config: role = "primary"
    primary.wait_log(r"ha: not starting as the primary: .*rejoins as the backup")
    primary.wait_log(r"replication: caught up with the primary")
    assert not listening(primary.port), "the old primary serves clients"
    wait_until(lambda: manage_result(backup.port, Summary()).node.replication_state == "in-sync",
               "the new primary to see the old one as its backup in sync")
    assert read_epoch(primary.data_dir) == epoch, "the rejoined backup has the new primary's epoch"
    # What the new primary receives now reaches the rejoined backup's copy.
    sender = open_client(backup)
    sender.send(q, "two", headers={"persistent": "true"}, receipt=True)
    consumer = open_client(backup)
    consumer.subscribe(q)
    assert sorted(m.body for m in consumer.listener.wait_for(2, timeout=10)) == ["one", "two"]
    sender.drop()


# -- (4) sync: the RECEIPT waits for the backup ----------------------------------------------------


def test_with_sync_a_receipt_waits_for_the_backup(pair):
    witness = pair.witness()
    primary, backup, _, _ = start_pair(pair, witness=witness, extra="")
    client = open_client(primary)
    q = "/queue/" + unique("sync")
    client.send(q, "warm", headers={"persistent": "true"}, receipt=True)
    os.kill(backup.pid, signal.SIGSTOP)
    try:
        rid = "r-" + unique("frozen")
        client.conn.send(q, "frozen", headers={"persistent": "true", "receipt": rid})
        time.sleep(1.0)  # the absence of a receipt over this window is the assertion
        assert rid not in client.listener.receipts, "a RECEIPT was sent while the backup could not have the message"
    finally:
        os.kill(backup.pid, signal.SIGCONT)
    wait_until(lambda: rid in client.listener.receipts, "the RECEIPT once the backup has the message", timeout=5)
    assert primary.running and not listening(backup.port)
    client.drop()


# -- (5) failback on request: the roles switch, nothing receipted is lost ----------------------------


def run_meshgate(*args: str, timeout: float = 90.0):
    """``meshgate ARGS…`` to its end: a CompletedProcess (text)."""
    import subprocess

    from e2e_support import MESHGATE

    return subprocess.run([MESHGATE, *args], capture_output=True, text=True, timeout=timeout)


def test_failback_on_request_switches_the_roles_under_load_without_losing_a_receipted_message(pair):
    witness = pair.witness()
    primary, backup, _, _ = start_pair(pair, witness=witness)
    before = manage_result(primary.port, Summary()).node
    epoch = before.epoch
    url = (f"failover:(tcp://{HOST}:{primary.port},tcp://{HOST}:{backup.port})?randomize=false"
           "&initialReconnectDelay=50&maxReconnectDelay=200&connectionTimeout=2000")
    q = "/queue/" + unique("failback")
    producer = FailoverConnection(url).connect()
    sending = Producing(producer, q, [f"f{i:03d}" for i in range(N)])
    receipted, errors, thread = sending.receipted, sending.errors, sending.thread
    wait_until(lambda: len(receipted) >= N // 3, "a third of the sends receipted", timeout=30)
    done = run_meshgate("ha", "failback", "--stomp", f"{HOST}:{primary.port}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"new epoch {epoch + 1}" in done.stdout, done.stdout
    backup.wait_listening(timeout=TAKEOVER_DEADLINE)
    backup.wait_log(r"backup: the primary at .* hands the node over \(failback\); taking over at epoch")
    primary.wait_log(r"ha: rejoining as the backup of the member that took over")
    thread.join(60)
    assert not errors and not thread.is_alive() and len(receipted) == N, \
        f"only {len(receipted)} sends receipted: {errors}"
    assert producer.wait_connected(TAKEOVER_DEADLINE).port == backup.port  # it may still be reconnecting

    # The other member serves with epoch + 1; the first one is its backup, in sync.
    after = manage_result(backup.port, Summary()).node
    assert (after.id, after.epoch, after.ha_role) == (before.id, epoch + 1, "primary")
    wait_until(lambda: manage_result(backup.port, Summary()).node.replication_state == "in-sync",
               "the old primary to be the new one's backup, in sync", timeout=20)
    status = run_meshgate("ha", "status", "--stomp", f"{HOST}:{backup.port}", timeout=30)
    assert status.returncode == 0, status.stderr
    assert re.search(r"replication\s+in-sync", status.stdout) and re.search(rf"epoch\s+{epoch + 1}\b",
                                                                             status.stdout), status.stdout
    assert primary.running and not listening(primary.port), "the old primary still serves clients"
    assert read_epoch(primary.data_dir) == epoch + 1, "the rejoined backup has the new primary's epoch"

    # Every receipted message is there exactly once, or again only marked as resent.
    consumer = open_client(backup)
    consumer.subscribe(q)
    messages = consumer.listener.wait_for(N, timeout=30)
    time.sleep(1.0)  # duplicates would come right behind
    messages = list(consumer.listener.messages)
    seen: dict[str, list] = {}
    for message in messages:
        seen.setdefault(message.body, []).append(message)
    assert set(receipted) <= set(seen), f"missing {sorted(set(receipted) - set(seen))[:10]}"
    for body, copies in seen.items():
        if len(copies) > 1:
            assert any(m.headers.get("meshgate-resent") == "true" for m in copies), \
                f"{body} delivered {len(copies)} times, none marked resent"
    producer.disconnect()
    consumer.drop()


def test_a_failback_without_a_backup_in_sync_is_refused(pair):
    witness = pair.witness()
    a_repl, b_repl = free_port(), free_port()
    primary = pair.member("primary", member_config("primary", a_repl, b_repl, witness.port)).start()
    refused = run_meshgate("ha", "failback", "--stomp", f"{HOST}:{primary.port}")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "no backup in sync: replication is no-backup, lag 0 bytes" in refused.stderr, refused.stderr
    node = manage_result(primary.port, Summary()).node
    assert (node.ha_role, node.replication_state) == ("primary", "no-backup") and primary.running
    client = open_client(primary)  # it serves on
    client.send("/queue/" + unique("still"), "x", headers={"persistent": "true"}, receipt=True)
    client.drop()


# -- (6) a large catch-up does not stall the primary ------------------------------------------------


def log_time(match: re.Match) -> float:
    """The wall clock of a log line (``%(asctime)s``: local time, milliseconds)."""
    from datetime import datetime

    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_a_large_catch_up_does_not_stall_the_primary(pair):
    witness = pair.witness()
    a_repl, b_repl = free_port(), free_port()
    primary = pair.member("primary", member_config("primary", a_repl, b_repl, witness.port)).start()
    q = "/queue/" + unique("big")
    loader = open_client(primary)
    body = "x" * (100 * 1024)
    count = 500  # ~50 MB of journal waiting, no consumer
    for i in range(count):
        loader.conn.send(q, f"{i:04d}{body}", headers={"persistent": "true"})
    loader.send(q, "last", headers={"persistent": "true"}, receipt=True)
    loader.drop()

    backup = pair.member("backup", member_config("backup", b_repl, a_repl, witness.port)).launch(free_port())
    probe = open_client(primary)
    pq = "/queue/" + unique("probe")
    times: list[float] = []
    answered: list[float] = []  # wall clock, to set beside the primary's log lines
    sent = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        started = time.monotonic()
        probe.send(pq, f"p{sent}", headers={"persistent": "true"}, receipt=True)
        times.append(time.monotonic() - started)
        answered.append(time.time())
        sent += 1
        if "replication: caught up with the primary" in backup.stderr():
            break
    else:
        raise AssertionError(f"the backup did not catch up in 60 s\n{backup.describe()}")
    assert sent >= 5, f"only {sent} round trips while the backup caught up: too fast to measure"
    assert max(times) < 1.0, f"the primary stalled: SEND+RECEIPT took up to {max(times):.2f} s ({sent} sends)"
    # Clients were served while the copy was being sent, not only before and after it (a copy
    # read in one reactor turn leaves no room for a round trip between these two lines).
    began = log_time(primary.wait_log(r"(\S+ \S+) INFO meshgate.replication: replication: backup \S+ connected; "
                                      r"copying"))
    ended = log_time(primary.wait_log(r"(\S+ \S+) INFO meshgate.replication: replication: sent the copy"))
    during = [t for t in answered if began < t < ended]
    print(f"catch-up of ~{count * 100 // 1024} MiB: {sent} SEND+RECEIPT round trips, the slowest "
          f"{max(times) * 1000:.0f} ms; {len(during)} answered while the copy was sent ({ended - began:.3f} s)")
    assert len(during) >= 3, f"{len(during)} round trips answered while the copy was sent " \
                             f"({ended - began:.3f} s)"
    wait_until(lambda: manage_result(primary.port, Summary()).node.replication_state == "in-sync",
               "the primary to see its backup in sync")
    probe.drop()

    primary.kill9()
    backup.wait_listening(timeout=30)
    consumer = open_client(backup)
    consumer.subscribe(q)
    got = consumer.listener.wait_for(count + 1, timeout=60)
    assert sorted(m.body[:4] for m in got) == sorted([f"{i:04d}" for i in range(count)] + ["last"])
    consumer.subscribe(pq, id="probe")
    probes = consumer.listener.wait_for(count + 1 + sent, timeout=30)
    assert sorted(m.body for m in probes if m.body.startswith("p")) == sorted(f"p{i}" for i in range(sent))
    consumer.drop()


# -- TLS on the replication link ([ha.tls]) ---------------------------------------------------------


def tls_table(tmp_path: Path, stem: str) -> str:
    """An [ha.tls] table (to follow ha_table's [ha]) with a certificate for 127.0.0.1 that
    the pair's test CA (made once per test directory) signed, usable as server and client."""
    from tls_support import issue

    ca_path = tmp_path / "ca.crt"
    if not ca_path.exists():
        issue(tmp_path, "ca", "replication-test-ca", ca=True)
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca_cert = x509.load_pem_x509_certificate(ca_path.read_bytes())
    ca_key = serialization.load_pem_private_key((tmp_path / "ca.key").read_bytes(), password=None)
    _, _, cert, key = issue(tmp_path, stem, "127.0.0.1", issuer=(ca_cert, ca_key), client=True)
    return f'\n[ha.tls]\ncertificate = "{cert}"\nprivate_key = "{key}"\nca_certificate = "{ca_path}"\n'


def witness_tls_options(tmp_path: Path) -> list[str]:
    """The witness's TLS files: a certificate for 127.0.0.1 the pair's test CA signed (a
    member with [ha.tls] refuses a witness without TLS)."""
    tls_table(tmp_path, "witness")  # makes the CA if needed, and witness.crt/.key
    return ["--certificate", str(tmp_path / "witness.crt"), "--private-key", str(tmp_path / "witness.key"),
            "--ca-certificate", str(tmp_path / "ca.crt")]


def test_a_tls_pair_replicates_and_the_backup_takes_over_a_killed_primary(pair, tmp_path):
    witness = pair.witness(witness_tls_options(tmp_path))
    primary, backup, _, _ = start_pair(pair, witness=witness, extra=tls_table(tmp_path, "member"))
    primary.wait_log(r"ha: replication listener on \S+ \(sync on, TLS\)")
    epoch = manage_result(primary.port, Summary()).node.epoch

    url = (f"failover:(tcp://{HOST}:{primary.port},tcp://{HOST}:{backup.port})?randomize=false"
           "&initialReconnectDelay=50&maxReconnectDelay=200&connectionTimeout=2000")
    q = "/queue/" + unique("repl-tls")
    producer = FailoverConnection(url).connect()
    count = 90
    sending = Producing(producer, q, [f"t{i:03d}" for i in range(count)])
    receipted, thread = sending.receipted, sending.thread
    wait_until(lambda: len(receipted) >= count // 3, "a third of the sends receipted", timeout=30)
    primary.kill9()
    backup.wait_listening(timeout=TAKEOVER_DEADLINE)
    backup.wait_log(r"backup: the primary at .* is gone .* and the witness agrees; taking over at epoch")
    thread.join(60)
    assert not thread.is_alive() and len(receipted) == count, f"only {len(receipted)} sends receipted"
    consumer = open_client(backup)
    consumer.subscribe(q)
    got = {m.body for m in consumer.listener.wait_for(count, timeout=30)}
    assert set(receipted) <= got, f"missing {sorted(set(receipted) - got)[:10]}"
    assert manage_result(backup.port, Summary()).node.epoch == epoch + 1
    assert "TLS handshake" not in backup.stderr()
    consumer.drop()
    producer.disconnect()


@pytest.mark.parametrize("plain", ["backup", "primary"])
def test_a_member_without_tls_cannot_follow_a_tls_member_and_both_say_why(pair, tmp_path, plain):
    witness = pair.witness()
    a_repl, b_repl = free_port(), free_port()
    tls = tls_table(tmp_path, "member")
    primary = pair.member("primary", member_config("primary", a_repl, b_repl, witness.port,
                                              "" if plain == "primary" else tls)).start()
    backup = pair.member("backup", member_config("backup", b_repl, a_repl, witness.port,
                                            "" if plain == "backup" else tls)).launch(free_port())
    if plain == "backup":
        backup.wait_log(r"accepted the connection but sent nothing \(no CHALLENGE\): it probably expects TLS "
                        r"\(\[ha\.tls\] is set there, not here\)")
        primary.wait_log(r"replication: the TLS handshake with backup \S+ failed \(.*\): the replication link "
                         r"needs \[ha\.tls\] on both members or on neither")
    else:
        backup.wait_log(r"backup: the TLS handshake with the primary's replication listener at \S+ failed \(.*\): "
                        r"the replication link needs \[ha\.tls\] on both members or on neither")
        primary.wait_log(r"replication: backup \S+ speaks TLS \(\[ha\.tls\] is set there\) but this member has no "
                         r"\[ha\.tls\]; dropping it")
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        assert not listening(backup.port), "the backup took over while the primary lives"
        time.sleep(0.2)
    assert backup.running and primary.running and listening(primary.port)
    assert "caught up with the primary" not in backup.stderr()
    assert manage_result(primary.port, Summary()).node.replication_state == "no-backup"
