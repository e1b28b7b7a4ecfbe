"""Management over TLS: the ``meshgate`` commands against a node's [stomp.tls] port,
verified by a CA, with client certificates when the node requires them; and the clear
word (never a traceback) when the CA, the scheme or the certificate is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
from e2e_support import BrokerProcess, run_meshgate, unique
from tls_support import issue

from management.client import ManagementClient, TlsFiles
from model.requests import Queues, Send


class Pki(NamedTuple):
    ca: Path
    rogue_ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key, ca, _ = issue(directory, "ca", "management-ca", ca=True)
    _, _, rogue_ca, _ = issue(directory, "rogue-ca", "rogue-ca", ca=True)
    _, _, server_cert, server_key = issue(directory, "server", "localhost", issuer=(ca_cert, ca_key))
    _, _, client_cert, client_key = issue(directory, "client", "operator", issuer=(ca_cert, ca_key), server=False)
    _, _, rogue_cert, rogue_key = issue(directory, "rogue", "rogue", server=False)
    return Pki(ca, rogue_ca, server_cert, server_key, client_cert, client_key, rogue_cert, rogue_key)


def tls_node(tmp_path_factory, pki: Pki, name: str, require_client_certificates: bool = False,
             host: str = "127.0.0.1"):
    config = (f'[stomp.tls]\nbind = "{host}:0"\ncertificate = "{pki.server_cert}"\n'
              f'private_key = "{pki.server_key}"\n')
    if require_client_certificates:
        config += f'ca_certificate = "{pki.ca}"\n'
    broker = BrokerProcess(tmp_path_factory.mktemp(name), name=name, config=config, tls=True)
    broker.start()
    return broker


@pytest.fixture(scope="module")
def node(tmp_path_factory, pki):
    broker = tls_node(tmp_path_factory, pki, "tls-managed")
    yield broker
    broker.cleanup()


@pytest.fixture(scope="module")
def mutual_node(tmp_path_factory, pki):
    broker = tls_node(tmp_path_factory, pki, "mtls-managed", require_client_certificates=True)
    yield broker
    broker.cleanup()


def tls_address(broker) -> str:
    return f"stomp+ssl://127.0.0.1:{broker.tls_port}"


def assert_refused(result, words: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert words in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_nodes_over_tls(node, pki):
    result = run_meshgate(["nodes", "--stomp", tls_address(node), "--ca", str(pki.ca)])
    assert result.returncode == 0, result.stderr
    assert "tls-managed" in result.stdout


def test_an_admin_action_over_tls_with_the_tls_flag(node, pki):
    queue = unique("tls-purge")
    address = ["--stomp", f"127.0.0.1:{node.tls_port}", "--tls", "--ca", str(pki.ca)]
    sent = run_meshgate(["send", f"/queue/{queue}", "hello", *address])
    assert sent.returncode == 0, sent.stderr
    purged = run_meshgate(["purge", queue, *address])
    assert purged.returncode == 0, purged.stderr
    assert f"purged 1 message(s) of /queue/{queue}" in purged.stdout
    with ManagementClient("127.0.0.1", node.tls_port, tls=TlsFiles(str(pki.ca)).context()) as client:
        assert client.call(Queues(name=queue))[0].depth == 0


def test_ha_status_over_tls(node, pki):
    result = run_meshgate(["ha", "status", "--stomp", tls_address(node), "--ca", str(pki.ca), "--json"])
    assert result.returncode == 0, result.stderr
    assert '"name": "tls-managed"' in result.stdout


def test_a_node_signed_by_another_ca_is_not_trusted(node, pki):
    assert_refused(run_meshgate(["nodes", "--stomp", tls_address(node), "--ca", str(pki.rogue_ca)]),
                   "certificate verify failed")


def test_the_node_must_be_named_by_its_certificate(tmp_path_factory, pki):
    # The certificate names localhost and 127.0.0.1, not 127.0.0.2 (loopback too).
    elsewhere = tls_node(tmp_path_factory, pki, "tls-elsewhere", host="127.0.0.2")
    try:
        address = ["--stomp", f"stomp+ssl://127.0.0.2:{elsewhere.tls_port}", "--ca", str(pki.ca)]
        assert_refused(run_meshgate(["nodes", *address]), "certificate verify failed: IP address mismatch")
        assert run_meshgate(["nodes", *address, "--no-verify-hostname"]).returncode == 0
    finally:
        elsewhere.cleanup()


def test_plaintext_to_the_tls_port_says_use_tls(node):
    assert_refused(run_meshgate(["nodes", "--stomp", f"127.0.0.1:{node.tls_port}"]),
                   f"if it speaks TLS, use stomp+ssl://127.0.0.1:{node.tls_port}")


def test_tls_to_a_plaintext_port_says_it_does_not_speak_tls(node, pki):
    assert_refused(run_meshgate(["nodes", "--stomp", f"stomp+ssl://127.0.0.1:{node.port}", "--ca", str(pki.ca)]),
                   f"the node at 127.0.0.1:{node.port} does not speak TLS")


def test_a_node_requiring_client_certificates(mutual_node, pki):
    address = ["--stomp", tls_address(mutual_node), "--ca", str(pki.ca)]
    queue = unique("mtls-purge")
    granted = run_meshgate(["send", f"/queue/{queue}", "x", *address, "--cert", str(pki.client_cert),
                            "--key", str(pki.client_key)])
    assert granted.returncode == 0, granted.stderr
    purged = run_meshgate(["purge", queue, *address, "--cert", str(pki.client_cert), "--key", str(pki.client_key)])
    assert purged.returncode == 0 and f"purged 1 message(s) of /queue/{queue}" in purged.stdout, purged.stderr
    assert_refused(run_meshgate(["nodes", *address]), "requires a client certificate")
    rogue = run_meshgate(["nodes", *address, "--cert", str(pki.rogue_cert), "--key", str(pki.rogue_key)])
    assert_refused(rogue, "refused the TLS connection")


def test_the_client_alone_gets_the_same_words(mutual_node, pki):
    from management.client import ManagementClientError

    with pytest.raises(ManagementClientError, match="requires a client certificate"):
        with ManagementClient("127.0.0.1", mutual_node.tls_port, tls=TlsFiles(str(pki.ca)).context()) as client:
            client.ask(Send(destination="/queue/" + unique("never"), body="x"))


@pytest.mark.parametrize("extra, words", [
    (["--stomp", "stomp+ssl://127.0.0.1:1", "--ca", "/no/such/ca.crt"], "--ca: no such file: /no/such/ca.crt"),
    (["--stomp", "stomp+ssl://127.0.0.1:1", "--cert", "{cert}"], "--cert needs --key"),
    (["--stomp", "stomp+ssl://127.0.0.1:1", "--key", "{key}"], "--cert needs --key"),
    (["--stomp", "127.0.0.1:1", "--ca", "{ca}"], "for a node that speaks TLS"),
    (["--stomp", "stomp://127.0.0.1:1", "--tls"], "stomp:// is plaintext"),
    (["--stomp", "stomp+ssl://127.0.0.1", "--ca", "{ca}"], "expected HOST:PORT or stomp+ssl://HOST:PORT"),
    (["--stomp", "stomp+ssl://127.0.0.1:1", "--cert", "{ca}", "--key", "{key}"], "cannot use the client certificate"),
])
def test_bad_tls_options_exit_2(pki, extra, words):
    files = {"ca": pki.ca, "cert": pki.client_cert, "key": pki.client_key}
    result = run_meshgate(["nodes", *(arg.format(**files) for arg in extra)])
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert words in result.stderr and "Traceback" not in result.stderr, result.stderr
