"""stomp.py clients for the end-to-end suite: a frame-collecting listener and a
client whose every wait (messages, receipts, ERRORs) has a timeout."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping

import stomp
from e2e_support import TIMEOUT, BrokerProcess, unique
from stomp.exception import ConnectFailedException


class ConnectRefused(AssertionError):
    def __init__(self, frame) -> None:
        super().__init__(f"connection refused: {frame.headers if frame is not None else 'socket closed'}")
        self.frame = frame


class Collector(stomp.ConnectionListener):
    """Collects what a stomp.py connection receives; every wait has a timeout."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.connected: list = []
        self.messages: list = []
        self.receipts: list[str] = []
        self.errors: list = []
        self.heartbeats = 0
        self.heartbeat_timeouts = 0
        self.disconnected = False

    def _record(self, attribute: str, item) -> None:
        with self._cond:
            getattr(self, attribute).append(item)
            self._cond.notify_all()

    def on_connected(self, frame) -> None:
        self._record("connected", frame)

    def on_message(self, frame) -> None:
        self._record("messages", frame)

    def on_receipt(self, frame) -> None:
        self._record("receipts", frame.headers.get("receipt-id"))

    def on_error(self, frame) -> None:
        self._record("errors", frame)

    def on_heartbeat(self) -> None:
        with self._cond:
            self.heartbeats += 1
            self._cond.notify_all()

    def on_disconnected(self) -> None:
        with self._cond:
            self.disconnected = True
            self._cond.notify_all()

    def on_heartbeat_timeout(self) -> None:
        with self._cond:
            self.heartbeat_timeouts += 1
            self._cond.notify_all()

    def summary(self) -> str:
        with self._cond:
            messages = [(m.headers.get("destination"), m.body[:40]) for m in self.messages]
            errors = [e.headers for e in self.errors]
            return (f"{len(self.messages)} messages {messages[:30]}, receipts {self.receipts[:30]}, "
                    f"errors {errors}, disconnected={self.disconnected}")

    def wait_until(self, predicate: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; got {self.summary()}")

    def wait_for(self, n: int, timeout: float = TIMEOUT) -> list:
        """Wait until at least ``n`` messages arrived; return all messages so far."""
        self.wait_until(lambda: len(self.messages) >= n, f"{n} messages", timeout)
        with self._cond:
            return list(self.messages)

    def wait_for_body(self, body: str, timeout: float = TIMEOUT) -> list:
        """Wait for a message with this body (a fence); return all messages so far."""
        self.wait_until(lambda: any(m.body == body for m in self.messages), f"message {body!r}", timeout)
        with self._cond:
            return list(self.messages)

    def wait_receipt(self, receipt_id: str, timeout: float = TIMEOUT) -> None:
        self.wait_until(lambda: receipt_id in self.receipts, f"RECEIPT {receipt_id!r}", timeout)

    def wait_error(self, timeout: float = TIMEOUT):
        self.wait_until(lambda: bool(self.errors), "an ERROR frame", timeout)
        return self.errors[0]

    def wait_disconnected(self, timeout: float = TIMEOUT) -> None:
        self.wait_until(lambda: self.disconnected, "the connection to close", timeout)

    def bodies(self) -> list[str]:
        with self._cond:
            return [m.body for m in self.messages]

    def clear(self) -> None:
        with self._cond:
            self.messages.clear()


_receipt_ids = itertools.count(1)


def _receipt_id() -> str:
    return f"r-{next(_receipt_ids)}"


class Client:
    """A stomp.py connection plus its Collector, with version-aware helpers.
    Frames that take ``receipt=True`` wait for their RECEIPT (synchronisation)."""

    def __init__(self, conn, listener: Collector, version: str) -> None:
        self.conn = conn
        self.listener = listener
        self.version = version

    @property
    def messages(self) -> list:
        return self.listener.messages

    @property
    def connected_frame(self):
        return self.listener.connected[0]

    def _receipt(self, headers: dict, receipt) -> str | None:
        if receipt is True:
            receipt = _receipt_id()
        if receipt:
            headers["receipt"] = receipt
        return receipt or None

    def _wait(self, receipt: str | None, wait: bool) -> None:
        if receipt and wait:
            self.listener.wait_receipt(receipt)

    def send(self, destination: str, body: str | bytes = "", *, receipt=False, wait: bool = True,
             headers: Mapping[str, str] | None = None, **more: str) -> None:
        h = dict(headers or {})
        h.update(more)
        rid = self._receipt(h, receipt)
        self.conn.send(destination, body, headers=h)
        self._wait(rid, wait)

    def subscribe(self, destination: str, id: str | None = None, ack: str = "auto", *, receipt=True,
                  headers: Mapping[str, str] | None = None, **more: str) -> str:
        sub_id = id or unique("sub")
        h = dict(headers or {})
        h.update(more)
        rid = self._receipt(h, receipt)
        self.conn.subscribe(destination, id=sub_id, ack=ack, headers=h)
        self._wait(rid, True)
        return sub_id

    def receive(self, destination: str, count: int) -> list:
        """Subscribe to ``destination`` and wait for ``count`` messages."""
        self.subscribe(destination)
        return self.listener.wait_for(count)

    def fenced(self, destination: str, ack: str = "auto") -> list:
        """Subscribe to ``destination`` and send it a fence: the messages it held, then the fence."""
        self.subscribe(destination, ack=ack)
        self.send(destination, "fence")
        return self.listener.wait_for_body("fence")

    def unsubscribe(self, id: str, destination: str | None = None, *, receipt=True,
                    headers: Mapping[str, str] | None = None) -> None:
        h = dict(headers or {})
        rid = self._receipt(h, receipt)
        if self.version == "1.0":
            self.conn.unsubscribe(destination=destination, id=id, headers=h)
        else:
            self.conn.unsubscribe(id, headers=h)
        self._wait(rid, True)

    def ack(self, message, transaction: str | None = None, receipt=False) -> None:
        self._settle(self.conn.ack, message, transaction, receipt)

    def nack(self, message, transaction: str | None = None, receipt=False) -> None:
        if self.version == "1.0":
            raise AssertionError("STOMP 1.0 has no NACK")
        self._settle(self.conn.nack, message, transaction, receipt)

    def _settle(self, method, message, transaction: str | None, receipt) -> None:
        """ACK or NACK, addressed the way the connection's STOMP version wants."""
        rid = _receipt_id() if receipt is True else (receipt or None)
        h = message.headers
        if self.version == "1.2":
            method(h["ack"], transaction=transaction, receipt=rid)
        elif self.version == "1.1":
            method(h["message-id"], h["subscription"], transaction=transaction, receipt=rid)
        else:
            method(h["message-id"], transaction=transaction, receipt=rid)
        self._wait(rid, True)

    def begin(self, transaction: str, receipt=True) -> None:
        h: dict = {}
        rid = self._receipt(h, receipt)
        self.conn.begin(transaction, headers=h)
        self._wait(rid, True)

    def commit(self, transaction: str, receipt=True) -> None:
        h: dict = {}
        rid = self._receipt(h, receipt)
        self.conn.commit(transaction, headers=h)
        self._wait(rid, True)

    def abort(self, transaction: str, receipt=True) -> None:
        h: dict = {}
        rid = self._receipt(h, receipt)
        self.conn.abort(transaction, headers=h)
        self._wait(rid, True)

    def sync(self) -> None:
        """Round trip: everything this client sent before has been processed."""
        h: dict = {}
        rid = self._receipt(h, True)
        # A BEGIN/ABORT pair of a throw-away transaction is a harmless frame that takes a receipt.
        tx = unique("sync")
        self.conn.begin(tx)
        self.conn.abort(tx, headers=h)
        self._wait(rid, True)

    def disconnect(self, timeout: float = TIMEOUT) -> None:
        """DISCONNECT with a receipt, wait for the socket to close."""
        if self.conn.is_connected():
            # stomp.py adds a receipt and closes the socket when the RECEIPT arrives.
            self.conn.disconnect()
            try:
                self.listener.wait_disconnected(timeout)
            finally:
                self.drop()

    def drop(self) -> None:
        """Close the socket without a DISCONNECT (as a crashing client would)."""
        try:
            self.conn.transport.disconnect_socket()
        except Exception:
            pass
        try:
            self.listener.wait_disconnected(5)
        except AssertionError:
            pass


def open_client(broker: BrokerProcess, version: str = "1.2", *, login: str | None = None,
                passcode: str | None = None, heartbeats: tuple[int, int] = (0, 0),
                headers: Mapping[str, str] | None = None, tls: dict | None = None,
                timeout: float = TIMEOUT) -> Client:
    """Connect a stomp.py client; raises ConnectRefused with the ERROR frame on refusal."""
    port = broker.tls_port if tls is not None else broker.port
    host_and_ports = [(broker.host, port)]
    common = dict(host_and_ports=host_and_ports, reconnect_attempts_max=1, timeout=timeout)
    if version == "1.0":
        conn = stomp.Connection10(**common)
    elif version == "1.1":
        conn = stomp.Connection11(heartbeats=heartbeats, **common)
    elif version == "1.2":
        conn = stomp.Connection12(heartbeats=heartbeats, **common)
    else:
        raise ValueError(version)
    if tls is not None:
        conn.set_ssl(for_hosts=host_and_ports, **tls)
    listener = Collector()
    conn.set_listener("collector", listener)
    client = Client(conn, listener, version)
    try:
        conn.connect(login, passcode, wait=False, headers=dict(headers or {}))
    except ConnectFailedException:
        raise ConnectRefused(None) from None
    try:
        listener.wait_until(lambda: bool(listener.connected or listener.errors or listener.disconnected),
                            "CONNECTED", timeout)
    except AssertionError as silence:
        # No answer at all is a refusal too: a TLS 1.3 server refuses a client certificate
        # after the client's side of the handshake is done, and stomp.py's receiver may end
        # on that alert without telling the listener it is disconnected.
        client.drop()
        raise ConnectRefused(None) from silence
    if not listener.connected:
        client.drop()
        raise ConnectRefused(listener.errors[0] if listener.errors else None)
    return client
