"""Clients on a vhost for the vhost tests: stomp.py with a CONNECT ``host`` header
(stomp.py's ``vhost``) and pika with a ``virtual_host``, closed at teardown."""

from __future__ import annotations

from collections.abc import Mapping

import pika
import pytest
import stomp
from amqp_support import amqp_port
from e2e_support import HOST, TIMEOUT, BrokerProcess
from stomp_client import Client, Collector, ConnectRefused

VHOSTS = '[vhosts]\n[[vhosts.host]]\nname = "team-a"\n[[vhosts.host]]\nname = "team b/é"\n'
TEAM_A, TEAM_B = "team-a", "team b/é"


class VhostClients:
    def __init__(self) -> None:
        self.stomp: list[Client] = []
        self.amqp: list[pika.BlockingConnection] = []

    def stomp_on(self, process: BrokerProcess, host: str, headers: Mapping[str, str] | None = None) -> Client:
        """A stomp.py 1.2 client of ``process`` whose CONNECT names ``host``; raises
        ConnectRefused with the ERROR frame."""
        conn = stomp.Connection12([(process.host, process.port)], vhost=host, reconnect_attempts_max=1,
                                  timeout=TIMEOUT)
        listener = Collector()
        conn.set_listener("collector", listener)
        client = Client(conn, listener, "1.2")
        self.stomp.append(client)
        conn.connect(wait=False, headers=dict(headers or {}))
        listener.wait_until(lambda: bool(listener.connected or listener.errors or listener.disconnected), "CONNECTED")
        if not listener.connected:
            raise ConnectRefused(listener.errors[0] if listener.errors else None)
        return client

    def pika_on(self, process: BrokerProcess, vhost: str) -> pika.BlockingConnection:
        parameters = pika.ConnectionParameters(HOST, amqp_port(process), virtual_host=vhost, connection_attempts=1,
                                               socket_timeout=TIMEOUT)
        connection = pika.BlockingConnection(parameters)
        self.amqp.append(connection)
        return connection

    def close_all(self) -> None:
        for client in self.stomp:
            client.drop()
        for connection in self.amqp:
            if connection.is_open:
                connection.close()


def drain(channel, queue: str) -> list[bytes]:
    """Every message waiting in ``queue``, taken with basic.get."""
    bodies = []
    while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(got[2])
    return bodies


@pytest.fixture(name="clients")
def clients_fixture():
    """A VhostClients for one test, every client closed after it (import it as the fixture)."""
    made = VhostClients()
    yield made
    made.close_all()
