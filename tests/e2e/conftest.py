"""Fixtures for the end-to-end suite: broker processes and clients, always cleaned up.

The helpers live in ``e2e_support.py``, ``stomp_client.py`` and ``raw_stomp.py`` next
to this file (importable by the test modules under ``--import-mode=importlib``
because this directory is put on ``sys.path`` here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import BrokerProcess, password_hash
from raw_stomp import RawClient
from stomp_client import Client, open_client


@pytest.fixture
def amqp():
    """``amqp(process, user="guest", password="guest", **options)``: pika connections to a
    broker's AMQP listener, closed at teardown."""
    from amqp_support import Pika

    clients = Pika()
    yield clients
    clients.close_all()


@pytest.fixture
def broker_factory(tmp_path):
    """``broker_factory(config=None, sets=(), name=None, tls=False, start=True)`` starts a
    ``meshgate broker`` on a free port with its data dir in ``tmp_path``."""
    brokers: list[BrokerProcess] = []

    def make(config: str | None = None, sets=(), name: str | None = None, tls: bool = False,
             start: bool = True, data_dir: Path | None = None) -> BrokerProcess:
        broker = BrokerProcess(tmp_path, name=name or f"n{len(brokers) + 1}", config=config, sets=sets, tls=tls,
                               data_dir=data_dir)
        brokers.append(broker)
        if start:
            broker.start()
        return broker

    yield make
    for broker in brokers:
        broker.cleanup()


@pytest.fixture
def broker(request, broker_factory) -> BrokerProcess:
    """A broker with the default configuration (anonymous): its own, or in a module marked
    ``shared_broker`` the module's shared one (tests there use destinations of their own)."""
    if request.node.get_closest_marker("shared_broker"):
        return request.getfixturevalue("shared")
    return broker_factory()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One default broker for a whole module, for tests that only need a plain broker
    and use their own destinations (cheaper than a process per test)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("shared"), name="shared")
    broker.start()
    try:
        yield broker
        if broker.running:
            broker.stop()  # after a module's worth of traffic, SIGTERM must still exit 0
    finally:
        broker.cleanup()


@pytest.fixture
def shared(shared_broker) -> BrokerProcess:
    """The module's shared broker, restarted first if an earlier test crashed it (so one
    crash fails one test, not the rest of the module)."""
    if not shared_broker.running:
        crashed = shared_broker.describe()
        shared_broker.start(port=0)
        print(f"shared broker had died and was restarted:\n{crashed}")
    return shared_broker


@pytest.fixture
def connect():
    """``connect(broker, version="1.2", login=None, passcode=None, heartbeats=(0, 0),
    headers=None, tls=None)`` -> a connected :class:`Client`; closed at teardown."""
    clients: list[Client] = []

    def make(broker: BrokerProcess, version: str = "1.2", **kwargs) -> Client:
        client = open_client(broker, version, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.drop()


@pytest.fixture
def raw():
    """``raw(broker)`` -> a :class:`RawClient` socket; closed at teardown."""
    clients: list[RawClient] = []

    def make(broker: BrokerProcess) -> RawClient:
        client = RawClient.to(broker)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture(scope="session")
def hashes() -> dict[str, str]:
    """Password hashes made by ``meshgate passwd --stdin`` (once per session)."""
    return {
        "alice": password_hash("alice-secret"),
        "bob": password_hash("bob-secret"),
        # Characters that STOMP 1.1/1.2 would escape elsewhere; CONNECT is never unescaped.
        "carol": password_hash("c:ar\\ol\\n"),
        "dave": password_hash("dave-secret"),
    }


VERSIONS = ["1.0", "1.1", "1.2"]


@pytest.fixture(params=VERSIONS)
def version(request) -> str:
    return request.param


@pytest.fixture(params=["1.1", "1.2"])
def version11(request) -> str:
    """STOMP versions with NACK, client-individual and header escaping."""
    return request.param


@pytest.fixture(scope="session")
def image() -> str:
    """The OCI image's tag (deploy/container/build.sh), built once per test session."""
    from image_support import build_image

    return build_image()
