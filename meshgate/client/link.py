"""One stomp.py connection to one broker, as the failover connection uses it: the
connection, its listener (which hands every frame to the owning
:class:`~meshgate.client.connection.FailoverConnection`) and what waits for receipts."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import stomp
from stomp.exception import ConnectFailedException

from meshgate.client.messages import ConnectFailed, ConnectRefused, PendingSend
from meshgate.client.url import BrokerURI

if TYPE_CHECKING:
    from meshgate.client.connection import FailoverConnection


class Confirm:
    """A frame other than SEND waiting for its RECEIPT (or an ERROR naming it)."""

    def __init__(self, link: Link, subscription: str | None = None) -> None:
        self.link = link
        self.subscription = subscription  # dropped if the broker refuses it
        self.error: str | None = None
        self.event = threading.Event()


class Link:
    """One stomp.py connection to one broker, and its stomp.py listener."""

    def __init__(self, owner: FailoverConnection, broker: BrokerURI, generation: int) -> None:
        self.owner = owner
        self.broker = broker
        self.generation = generation
        self.receipts: dict[str, PendingSend | Confirm] = {}
        self.connected = threading.Event()
        self.ended = threading.Event()  # refused or closed
        self.settled = threading.Event()  # connected or ended: open() waits for it
        self.refusal: str | None = None
        options = owner.options
        self.conn = stomp.Connection12(
            [broker.address], heartbeats=owner.heartbeats, vhost=owner.vhost,
            reconnect_attempts_max=1, reconnect_sleep_initial=0.0, reconnect_sleep_increase=0.0,
            reconnect_sleep_jitter=0.0, timeout=options.connection_timeout_ms / 1000.0,
        )
        if broker.tls:
            self.conn.set_ssl(for_hosts=[broker.address], **owner.ssl)
        self.conn.set_listener("meshgate-failover", _Listener(self))

    def open(self) -> None:
        """Connect and wait for CONNECTED; raise ConnectFailed or ConnectRefused."""
        owner = self.owner
        timeout = owner.options.connection_timeout_ms / 1000.0
        try:
            self.conn.connect(owner.login, owner.passcode, wait=False, headers=dict(owner.connect_headers))
        except ConnectFailedException:
            raise ConnectFailed(f"{self.broker}: cannot connect") from None
        except OSError as e:
            self.close()
            raise ConnectFailed(f"{self.broker}: {e}") from None
        self.settled.wait(timeout)
        if self.connected.is_set() and not self.ended.is_set():
            return
        self.close()
        if self.refusal is not None:
            raise ConnectRefused(self.broker, self.refusal)
        if self.ended.is_set():
            raise ConnectFailed(f"{self.broker}: closed before CONNECTED")
        raise ConnectFailed(f"{self.broker}: no CONNECTED within {timeout}s")

    def close(self) -> None:
        if self.ended.is_set():
            return  # stomp.py closed it already
        try:
            self.conn.transport.disconnect_socket()
        except Exception:  # already gone
            pass


class _Listener(stomp.ConnectionListener):
    def __init__(self, link: Link) -> None:
        self.link = link

    def on_connected(self, frame: Any) -> None:
        self.link.connected.set()
        self.link.settled.set()

    def on_error(self, frame: Any) -> None:
        message = frame.headers.get("message", "") or str(frame.body)[:200]
        if not self.link.connected.is_set():
            self.link.refusal = message
            self.link.ended.set()
            self.link.settled.set()
            return
        self.link.owner._on_error(self.link, frame.headers.get("receipt-id"), message)

    def on_receipt(self, frame: Any) -> None:
        self.link.owner._on_receipt(self.link, frame.headers.get("receipt-id", ""))

    def on_message(self, frame: Any) -> None:
        self.link.owner._on_message(self.link, frame)

    def on_disconnected(self) -> None:
        self.link.ended.set()
        self.link.settled.set()
        self.link.owner._on_lost(self.link)
