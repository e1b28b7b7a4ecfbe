"""The [stomp.tls] listener with certificates made on the fly (cryptography package)."""

from __future__ import annotations

import re
import socket
import ssl
import time
from pathlib import Path

import pika
import pytest
from cryptography.hazmat.primitives import serialization
from e2e_support import unique
from stomp_client import ConnectRefused
from tls_support import issue as _issue


def _tls_config(cert: Path, key: Path, ca: Path | None = None) -> str:
    text = f'[stomp.tls]\nbind = "127.0.0.1:0"\ncertificate = "{cert}"\nprivate_key = "{key}"\n'
    if ca is not None:
        text += f'ca_certificate = "{ca}"\n'
    return text


def test_tls_send_and_receive(broker_factory, connect, tmp_path, version):
    _, _, cert, key = _issue(tmp_path, "server", "localhost")
    broker = broker_factory(config=_tls_config(cert, key), tls=True)
    assert broker.tls_port and broker.tls_port != broker.port
    client = connect(broker, version, tls={"ca_certs": str(cert)})
    destination = "/queue/" + unique("tls")
    client.subscribe(destination)
    client.send(destination, "over tls", receipt=True)
    assert client.listener.wait_for(1)[0].body == "over tls"
    # The plain listener still works alongside, and both see the same queues.
    plain = connect(broker, version)
    plain.send(destination, "over tcp", receipt=True)
    assert [m.body for m in client.listener.wait_for(2)] == ["over tls", "over tcp"]


def test_tls_listener_speaks_only_tls(broker_factory, tmp_path):
    _, _, cert, key = _issue(tmp_path, "server", "localhost")
    broker = broker_factory(config=_tls_config(cert, key), tls=True)
    with socket.create_connection((broker.host, broker.tls_port), timeout=5) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
        data = b""
        try:
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert b"CONNECTED" not in data


def test_tls_certificate_is_the_configured_one(broker_factory, tmp_path):
    server_cert, _, cert, key = _issue(tmp_path, "server", "localhost")
    broker = broker_factory(config=_tls_config(cert, key), tls=True)
    context = ssl.create_default_context(cafile=str(cert))
    with socket.create_connection((broker.host, broker.tls_port), timeout=5) as sock:
        with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der == server_cert.public_bytes(serialization.Encoding.DER)


def test_mutual_tls_requires_a_client_certificate(broker_factory, connect, tmp_path):
    ca_cert, ca_key, ca_path, _ = _issue(tmp_path, "ca", "test-ca", ca=True)
    _, _, cert, key = _issue(tmp_path, "server", "localhost", issuer=(ca_cert, ca_key))
    _, _, client_cert, client_key = _issue(tmp_path, "client", "client-1", issuer=(ca_cert, ca_key), server=False)
    _, _, rogue_cert, rogue_key = _issue(tmp_path, "rogue", "rogue", server=False)
    broker = broker_factory(config=_tls_config(cert, key, ca_path), tls=True)

    client = connect(broker, "1.2", tls={"ca_certs": str(ca_path), "cert_file": str(client_cert),
                                         "key_file": str(client_key)})
    destination = "/queue/" + unique("mtls")
    client.subscribe(destination)
    client.send(destination, "mutual", receipt=True)
    assert client.listener.wait_for(1)[0].body == "mutual"

    for extra in ({}, {"cert_file": str(rogue_cert), "key_file": str(rogue_key)}):
        with pytest.raises((ConnectRefused, OSError, ssl.SSLError)):
            connect(broker, "1.2", tls={"ca_certs": str(ca_path), **extra}, timeout=5)


def test_stomp_over_websocket_over_tls(broker_factory, tmp_path):
    import websocket  # websocket-client, which stomp.py's WebSocket transport uses

    _, _, cert, key = _issue(tmp_path, "server", "localhost")
    config = (f'[stomp.websocket]\nbind = "127.0.0.1:0"\n[stomp.websocket.tls]\nbind = "127.0.0.1:0"\n'
              f'certificate = "{cert}"\nprivate_key = "{key}"\n')
    broker = broker_factory(config=config)
    match = broker.output.wait_for(r"listening on wss://(\S+):(\d+)\s*$", timeout=10)
    assert match is not None, broker.describe()
    connection = websocket.create_connection(f"wss://127.0.0.1:{match.group(2)}/ws", timeout=10,
                                             sslopt={"ca_certs": str(cert)}, subprotocols=["v12.stomp"])
    try:
        assert connection.subprotocol == "v12.stomp"
        destination = "/queue/" + unique("wss")
        connection.send("CONNECT\naccept-version:1.2\nhost:x\n\n\0")
        assert connection.recv().startswith("CONNECTED\nversion:1.2")
        connection.send(f"SUBSCRIBE\nid:s\ndestination:{destination}\n\n\0"
                        f"SEND\ndestination:{destination}\n\nover wss\0")
        message = connection.recv()
        assert message.startswith("MESSAGE\n") and message.endswith("\n\nover wss\0")
    finally:
        connection.close()


def test_amqps_listener_serves_pika_over_tls(broker_factory, tmp_path):
    ca_cert, ca_key, ca_path, _ = _issue(tmp_path, "ca", "Test CA", ca=True)
    _, _, cert_path, key_path = _issue(tmp_path, "server", "localhost", issuer=(ca_cert, ca_key))
    broker = broker_factory(config=f'[amqp]\nbind = "127.0.0.1:0"\n\n[amqp.tls]\nbind = "127.0.0.1:0"\n'
                                   f'certificate = "{cert_path}"\nprivate_key = "{key_path}"\n')
    deadline = time.monotonic() + 10
    while not (ports := re.findall(r"listening on amqps://[^\s:]+:(\d+)", broker.stdout())):
        assert time.monotonic() < deadline, broker.describe()
        time.sleep(0.02)
    context = ssl.create_default_context(cafile=str(ca_path))
    parameters = pika.ConnectionParameters("127.0.0.1", int(ports[0]), ssl_options=pika.SSLOptions(context,
                                                                                                   "localhost"))
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        queue = unique("tls")
        channel.queue_declare(queue)
        channel.basic_publish("", queue, b"over tls")
        assert channel.basic_get(queue, auto_ack=True)[2] == b"over tls"
    finally:
        connection.close()
