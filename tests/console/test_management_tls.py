"""The console's management client built from its environment variables
(MESHGATE_CONSOLE_STOMP with stomp+ssl:// entries, _CA, _CERT, _KEY) reaching a node
whose STOMP port speaks TLS and requires client certificates."""

from __future__ import annotations

import pytest
from e2e_support import BrokerProcess
from tls_support import issue

from console.mesh.actions import Unavailable
from console.settings import management_settings
from model.requests import Nodes


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("console-pki")
    ca_cert, ca_key, ca, _ = issue(directory, "ca", "console-ca", ca=True)
    _, _, server_cert, server_key = issue(directory, "server", "localhost", issuer=(ca_cert, ca_key))
    _, _, cert, key = issue(directory, "console", "console", issuer=(ca_cert, ca_key), server=False)
    return {"ca": ca, "server_cert": server_cert, "server_key": server_key, "cert": cert, "key": key}


@pytest.fixture(scope="module")
def node(tmp_path_factory, files):
    config = (f'[stomp.tls]\nbind = "127.0.0.1:0"\ncertificate = "{files["server_cert"]}"\n'
              f'private_key = "{files["server_key"]}"\nca_certificate = "{files["ca"]}"\n')
    broker = BrokerProcess(tmp_path_factory.mktemp("console-tls"), name="console-tls", config=config, tls=True)
    broker.start()
    yield broker
    broker.cleanup()


@pytest.fixture
def console_management(settings):
    """``console_management(environ)``: the console's management client as those variables configure it."""
    from console.mesh import sources

    def make(environ: dict[str, str]):
        settings.MESHGATE = {**settings.MESHGATE, **management_settings(environ)}
        sources.management.cache_clear()
        return sources.management()

    yield make
    sources.management.cache_clear()


def test_the_console_asks_a_tls_node(node, files, console_management):
    management = console_management({
        "MESHGATE_CONSOLE_STOMP": f"127.0.0.1:1, stomp+ssl://127.0.0.1:{node.tls_port}",
        "MESHGATE_CONSOLE_CA": str(files["ca"]), "MESHGATE_CONSOLE_CERT": str(files["cert"]),
        "MESHGATE_CONSOLE_KEY": str(files["key"])})
    reply = management.ask(Nodes())
    assert reply.ok and [summary.node.name for summary in reply.result.nodes] == ["console-tls"]


def test_without_its_certificate_the_console_says_why(node, files, console_management):
    management = console_management({"MESHGATE_CONSOLE_STOMP": f"stomp+ssl://127.0.0.1:{node.tls_port}",
                                     "MESHGATE_CONSOLE_CA": str(files["ca"])})
    with pytest.raises(Unavailable, match="requires a client certificate"):
        management.ask(Nodes())


def test_a_plaintext_entry_to_the_tls_port_says_use_tls(node, console_management):
    management = console_management({"MESHGATE_CONSOLE_STOMP": f"127.0.0.1:{node.tls_port}"})
    with pytest.raises(Unavailable, match="if it speaks TLS, use stomp\\+ssl://"):
        management.ask(Nodes())


def test_a_missing_ca_file_is_an_answer_not_a_crash(node, console_management, tmp_path):
    management = console_management({"MESHGATE_CONSOLE_STOMP": f"stomp+ssl://127.0.0.1:{node.tls_port}",
                                     "MESHGATE_CONSOLE_CA": str(tmp_path / "missing.crt")})
    with pytest.raises(Unavailable, match="cannot use the CA file"):
        management.ask(Nodes())
