"""Certificate rotation without a restart, on real ``meshgate broker`` processes with
certificates made here: SIGHUP (and ``meshgate reload-tls``) re-reads every TLS file;
new handshakes get the new certificate while established client connections and mesh
links stay up and lose nothing; a file that cannot be used is refused and the old
certificate stays; the model shows each certificate's subject and expiry; and a
certificate that ends within 14 days fires a certificate_expiring event."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from e2e_support import HOST, BrokerProcess, manage, manage_result, run_meshgate, security_config, unique
from ha_support import HAProcesses, ha_table
from mesh_support import free_port, mesh_fixture  # noqa: F401 (mesh_fixture is the mesh fixture)
from stomp_client import open_client
from tls_support import Certificates, issue

from model.requests import Events, Summary

pytestmark = pytest.mark.timeout(120)

ADMIN = ("alice", "alice-secret")
OPERATOR = ("dave", "dave-secret")
RULES = [
    {"destination": ">", "read": ["admins"], "write": ["admins"], "admin": ["admins"]},
    {"destination": "/queue/meshgate.management", "write": ["operators"]},
    {"destination": "/temp-queue/>", "read": ["operators"], "write": ["operators"]},
]


def leaf(directory: Path, stem: str, common_name: str, issuer: tuple, days: float) -> x509.Certificate:
    """stem.crt/stem.key: a server certificate for 127.0.0.1 and localhost, valid ``days``."""
    return issue(directory, stem, common_name, issuer, days=days)[0]


def served_certificate(port: int, ca: Path, client: tuple[Path, Path] | None = None) -> x509.Certificate:
    """The certificate a NEW TLS connection to ``port`` is shown (verified against ``ca``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(ca)
    if client is not None:
        context.load_cert_chain(*client)
    with socket.create_connection((HOST, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=HOST) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def stomp_tls(directory: Path, stem: str, table: str = "stomp.tls") -> str:
    """A client-facing TLS table (``[stomp.tls]`` unless ``table`` says) with stem.crt/stem.key."""
    return (f'\n[{table}]\nbind = "{HOST}:0"\ncertificate = "{directory / (stem + ".crt")}"\n'
            f'private_key = "{directory / (stem + ".key")}"\n')


def mesh_tls(directory: Path, stem: str, ca: tuple) -> str:
    """A [mesh.tls] table with a certificate ``ca`` signed, trusting ``ca`` only."""
    _, _, cert, key = issue(directory, stem, stem, issuer=ca[:2], client=True)
    return f'\n[mesh.tls]\ncertificate = "{cert}"\nprivate_key = "{key}"\nca_certificate = "{ca[2]}"\n'


def hup(node) -> None:
    """SIGHUP to the node's process (a MeshMember's BrokerProcess, or a BrokerProcess's Popen)."""
    os.kill(node.proc.pid, signal.SIGHUP)


# -- rotation under load ------------------------------------------------------------------


class Producer(threading.Thread):
    """Sends to ``queue`` (each with a receipt) until stopped; ``sent`` is what the broker took."""

    def __init__(self, client, queue: str) -> None:
        super().__init__(daemon=True)
        self.client, self.queue = client, queue
        self.sent: list[str] = []
        self.failure: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                body = unique("m")
                self.client.send(self.queue, body, receipt=True)
                self.sent.append(body)
        except BaseException as failure:  # handed to the test, which fails with it
            self.failure = failure

    def stop(self) -> list[str]:
        self.halt.set()
        self.join(30)
        assert self.failure is None, self.failure
        return self.sent


def test_a_sighup_rotates_every_certificate_while_clients_and_links_keep_going(mesh, tmp_path) -> None:
    pki = Certificates(tmp_path / "pki")
    directory, old_ca = pki.directory, pki.ca
    for stem in ("a-clients", "b-clients"):
        issue(directory, stem, f"{stem}-old", issuer=old_ca[:2])
    a, b = mesh(2, extra={0: pki.table("a") + stomp_tls(directory, "a-clients"),
                          1: pki.table("b") + stomp_tls(directory, "b-clients")}, start=False)
    for node in (a, b):
        node.proc.tls = True  # wait for its stomp+ssl port too
        node.start()
    mesh.wait_links([(a, b)])
    trust_old = {"ca_certs": str(old_ca[2])}
    queue = f"/queue/{unique('rotation')}"
    consumer = b.client(tls=trust_old)
    consumer.subscribe(queue)
    producer = Producer(a.client(tls=trust_old), queue)  # A's clients' messages cross the link to B
    producer.start()
    consumer.listener.wait_for(20)

    # New certificates from a new CA, in the same files; the CA files now hold only the new CA.
    new_ca = issue(directory, "new-ca", "mesh CA 2", ca=True)
    rotated = {stem: issue(directory, stem, f"{stem}-new", issuer=new_ca[:2], client=True)[0]
               for stem in ("a", "b", "a-clients", "b-clients")}
    Path(old_ca[2]).write_bytes(Path(new_ca[2]).read_bytes())
    for node in (a, b):
        hup(node)
    for node, stem in ((a, "a"), (b, "b")):
        node.wait_log(rf"tls: reloaded mesh: CN={stem}-new, expires \d{{4}}-\d\d-\d\d \d\d:\d\d UTC")
        node.wait_log(rf"tls: reloaded stomp\+ssl: CN={stem}-clients-new, expires ")
    delivered = len(consumer.listener.bodies())
    consumer.listener.wait_for(delivered + 200)  # still flowing after the reload
    sent = producer.stop()
    a.fence(queue, consumer)
    assert sorted(body for body in consumer.listener.bodies() if body in set(sent)) == sorted(sent)
    for node, other in ((a, b), (b, a)):
        assert node.linked_count(other) == 1 and node.count(r"mesh: link with .* lost") == 0, node.stderr()[-3000:]
        assert node.count("kept its old certificate") == 0
    assert not consumer.listener.disconnected

    # A new client handshake, on each node's client port and mesh listener, shows the new certificate.
    new_ca_path = Path(new_ca[2])
    for node, stem in ((a, "a-clients"), (b, "b-clients")):
        assert served_certificate(node.proc.tls_port, new_ca_path).serial_number == rotated[stem].serial_number
    _, _, probe_cert, probe_key = issue(directory, "probe", "probe", issuer=new_ca[:2], server=False)
    shown = served_certificate(a.link, new_ca_path, (probe_cert, probe_key))
    assert (shown.serial_number, shown.subject.rfc4514_string()) == (rotated["a"].serial_number, "CN=a-new")

    # Through management, for every node at once: each listener of each node says what it did.
    everywhere = run_meshgate(["reload-tls", "--all", "--stomp", f"{HOST}:{a.stomp}"])
    assert everywhere.returncode == 0, everywhere
    assert sorted(line.split(": reloaded: ")[0] for line in everywhere.stdout.splitlines()) == \
        ["A mesh", "A stomp+ssl", "B mesh", "B stomp+ssl"], everywhere.stdout

    # A node that trusts only the new CA links with A: A presents (and accepts) the new files on a new link.
    (c,) = mesh(1, extra=mesh_tls(directory, "c", new_ca), start=False)
    c.write_config(c.config.replace("static = []", f'static = ["{a.link_address}"]'))
    c.start()
    mesh.wait_links([(a, c)])
    elsewhere = f"/queue/{unique('new-link')}"
    a.fence(elsewhere, c.subscriber(elsewhere))


def test_a_sighup_reaches_the_replication_listener_and_the_link_up_stays(tmp_path) -> None:
    password = "e2e-" + unique("repl")
    pair = HAProcesses(tmp_path, password)
    directory = tmp_path / "pki"
    directory.mkdir()
    ca = issue(directory, "ca", "replication CA", ca=True)
    tables = {}
    for label in ("primary", "backup"):
        _, _, cert, key = issue(directory, label, f"{label}-old", issuer=ca[:2], client=True)
        tables[label] = f'\n[ha.tls]\ncertificate = "{cert}"\nprivate_key = "{key}"\nca_certificate = "{ca[2]}"\n'
    primary_port, backup_port = free_port(), free_port()
    try:
        primary = pair.member("primary", ha_table("primary", primary_port, backup_port, password=password,
                                                  extra=tables["primary"])).start()
        backup = pair.member("backup", ha_table("backup", backup_port, primary_port, password=password,
                                                extra=tables["backup"])).launch(free_port())
        backup.wait_log(r"replication: caught up with the primary")
        rotated = issue(directory, "primary", "primary-new", issuer=ca[:2], client=True)[0]
        hup(primary)
        primary.wait_log(r"tls: reloaded replication: CN=primary-new, expires ")
        # The link up stays: with ha.sync a receipt waits for the backup's copy.
        client = open_client(primary)
        client.send(f"/queue/{unique('replicated')}", "after the reload", receipt=True, persistent="true")
        client.drop()
        assert manage_result(primary.port, Summary()).node.replication_state == "in-sync"
        assert "is gone" not in backup.stderr() and "TLS handshake" not in backup.stderr(), backup.stderr()
        _, _, probe_cert, probe_key = issue(directory, "probe", "probe", issuer=ca[:2], server=False)
        shown = served_certificate(primary_port, Path(ca[2]), (probe_cert, probe_key))
        assert (shown.serial_number, shown.subject.rfc4514_string()) == (rotated.serial_number, "CN=primary-new")
    finally:
        pair.cleanup()


# -- one node: refusal, the command, the model, the expiry event ----------------------------


@pytest.fixture
def pki(tmp_path: Path) -> tuple[Path, tuple]:
    directory = tmp_path / "pki"
    directory.mkdir()
    return directory, issue(directory, "ca", "client CA", ca=True)


def tls_node(tmp_path: Path, hashes, pki, days: float = 60, more: str = "") -> tuple[BrokerProcess, x509.Certificate]:
    """A node with users, a [stomp.tls] port with a certificate valid ``days`` (and ``more`` config)."""
    directory, ca = pki
    cert = leaf(directory, "server", "server-1", ca[:2], days)
    config = security_config(hashes, {"alice": ["admins"], "dave": ["operators"]}, RULES) + \
        stomp_tls(directory, "server") + more
    node = BrokerProcess(tmp_path, name="rotating", config=config, tls=True)
    node.start()
    return node, cert


def reload_tls(node: BrokerProcess, user: tuple[str, str], *extra: str):
    return run_meshgate(["reload-tls", "--stomp", f"{HOST}:{node.port}", "--login", user[0], "--passcode", user[1],
                         *extra])


def expiring(node: BrokerProcess) -> list:
    return manage(node.port, Events(kinds=["certificate_expiring"]), *ADMIN).result


def test_reload_tls_reports_per_listener_and_needs_admin(tmp_path, hashes, pki) -> None:
    directory, ca = pki
    for listener in ("wss", "amqps"):
        leaf(directory, listener, f"{listener}-1", ca[:2], 60)
    more = (f'\n[stomp.websocket]\nbind = "{HOST}:0"\n' + stomp_tls(directory, "wss", "stomp.websocket.tls")
            + f'\n[amqp]\nbind = "{HOST}:0"\n' + stomp_tls(directory, "amqps", "amqp.tls"))
    node, _ = tls_node(tmp_path, hashes, pki, more=more)
    try:
        ports = {scheme: int(node.output.wait_for(rf"listening on {scheme}://\S+:(\d+)").group(1))
                 for scheme in ("wss", "amqps")} | {"stomp+ssl": node.tls_port}
        refused = reload_tls(node, OPERATOR)
        assert refused.returncode == 1 and "reload_tls needs the admin permission" in refused.stderr, refused
        renewed = {listener: leaf(directory, stem, f"{stem}-2", ca[:2], 90)
                   for listener, stem in (("stomp+ssl", "server"), ("wss", "wss"), ("amqps", "amqps"))}
        done = reload_tls(node, ADMIN)
        assert done.returncode == 0, done
        assert done.stdout.splitlines() == [
            f"rotating {listener}: reloaded: {cert.subject.rfc4514_string()}, expires "
            f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC" for listener, cert in renewed.items()], done.stdout
        for listener, cert in renewed.items():
            assert served_certificate(ports[listener], ca[2]).serial_number == cert.serial_number, listener
        audit = [(e.user, e.ok) for e in manage(node.port, Events(kinds=["admin_action"]), *ADMIN).result
                 if e.action == "reload_tls"]
        assert audit == [("dave", False), ("alice", True)]
    finally:
        node.cleanup()


def test_a_broken_file_is_refused_and_the_old_certificate_stays(tmp_path, hashes, pki) -> None:
    node, served = tls_node(tmp_path, hashes, pki)
    try:
        key = pki[0] / "server.key"
        leaf(pki[0], "other", "other", pki[1][:2], 90)
        key.write_bytes((pki[0] / "other.key").read_bytes())  # a key that is not the certificate's
        hup(node)
        line = (f"tls: stomp+ssl kept its old certificate: the private key '{key}' does not match the "
                f"certificate '{pki[0] / 'server.crt'}'")
        assert node.output.wait_for(re.escape(line), "stderr", timeout=10) is not None, node.describe()
        assert served_certificate(node.tls_port, pki[1][2]).serial_number == served.serial_number
        key.write_text("-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n")
        kept = reload_tls(node, ADMIN)
        assert kept.returncode == 1, kept
        assert kept.stdout.strip() == (f"rotating stomp+ssl: kept its old certificate: the private key '{key}' "
                                       "holds no PEM private key (or it is encrypted)"), kept.stdout
        assert served_certificate(node.tls_port, pki[1][2]).serial_number == served.serial_number
        assert "Traceback" not in node.stderr()
    finally:
        node.cleanup()


def test_the_model_shows_each_certificate_and_an_expiring_one_fires_an_event(tmp_path, hashes, pki) -> None:
    node, served = tls_node(tmp_path, hashes, pki, days=60)
    try:
        listed = run_meshgate(["nodes", "--json", "--stomp", f"{HOST}:{node.port}", "--login", ADMIN[0],
                               "--passcode", ADMIN[1]])
        assert listed.returncode == 0, listed
        (summary,) = json.loads(listed.stdout)["result"]["nodes"]
        assert summary["node"]["certificates"] == [{"listener": "stomp+ssl", "subject": "CN=server-1",
                                                    "not_after": served.not_valid_after_utc.timestamp()}]
        assert expiring(node) == []  # 60 days ahead: nothing to say
        short = leaf(pki[0], "server", "server-short", pki[1][:2], 3)
        assert reload_tls(node, ADMIN).returncode == 0
        (event,) = expiring(node)
        assert (event.listener, event.subject, event.not_after) == \
            ("stomp+ssl", "CN=server-short", short.not_valid_after_utc.timestamp())
        node.stop()
        node.start()  # at start too
        (event,) = expiring(node)
        assert event.subject == "CN=server-short"
    finally:
        node.cleanup()


def test_a_key_that_does_not_match_stops_the_start_naming_the_key_and_the_file(tmp_path, pki) -> None:
    directory, ca = pki
    leaf(directory, "server", "server", ca[:2], 60)
    leaf(directory, "other", "other", ca[:2], 60)
    config = stomp_tls(directory, "server").replace("server.key", "other.key")
    (tmp_path / "bad.toml").write_text(config)
    result = run_meshgate(["broker", "--config", str(tmp_path / "bad.toml"), "--data", str(tmp_path / "data")])
    assert result.returncode == 2, result
    assert (f"meshgate: configuration error: stomp.tls.private_key: the private key '{directory / 'other.key'}' "
            f"does not match the certificate '{directory / 'server.crt'}'") in result.stderr
    assert "Traceback" not in result.stderr
