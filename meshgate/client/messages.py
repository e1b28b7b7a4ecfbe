"""What the failover client hands out: messages, pending sends, statistics, errors, and
the headers that mark a SEND (``meshgate-send-id``, ``meshgate-resent``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from meshgate.client.url import BrokerURI

SEND_ID = "meshgate-send-id"
RESENT = "meshgate-resent"
DEFAULT_RECEIPT_TIMEOUT = 30.0


class FailoverError(Exception):
    """Base of the client's errors."""


class ConnectFailed(FailoverError):
    """No broker could be reached within the URL's attempt limits."""


class ConnectRefused(ConnectFailed):
    """A broker answered CONNECT with an ERROR (wrong login, say): not retried."""

    def __init__(self, broker: BrokerURI, message: str) -> None:
        super().__init__(f"{broker} refused the connection: {message}")
        self.broker = broker


class NotConnected(FailoverError):
    """The connection is closed, or was never opened."""


class SendTimeout(FailoverError):
    """No connection within the ``timeout`` option, or no RECEIPT within the send's timeout.

    Whether the broker has the message is unknown: to resend it and keep duplicates
    marked, pass ``headers={"meshgate-send-id": error.send_id, "meshgate-resent": "true"}``."""

    def __init__(self, message: str, send_id: str | None = None) -> None:
        super().__init__(message)
        self.send_id = send_id


class FrameRefused(FailoverError):
    """The broker answered a SUBSCRIBE or UNSUBSCRIBE with an ERROR (not authorized, say);
    a refused subscription is dropped, not made again after a reconnect."""


class SendRefused(FailoverError):
    """The broker answered the SEND with an ERROR (not authorized, not stored): not resent."""

    def __init__(self, message: str, send_id: str) -> None:
        super().__init__(message)
        self.send_id = send_id


@dataclass
class Message:
    """A MESSAGE as delivered to a subscription's callback."""

    headers: dict[str, str]
    body: Any  # str (stomp.py decodes UTF-8) or bytes
    subscription: str
    generation: int  # which connection delivered it (acks are only valid on that one)

    @property
    def destination(self) -> str:
        return self.headers.get("destination", "")

    @property
    def send_id(self) -> str | None:
        return self.headers.get(SEND_ID)

    @property
    def resent(self) -> bool:
        """The producer's client resent it after a failover: a copy may have arrived before."""
        return self.headers.get(RESENT) == "true"

    @property
    def redelivered(self) -> bool:
        return self.headers.get("redelivered") == "true"

    @property
    def possible_duplicate(self) -> bool:
        return self.resent or self.redelivered


@dataclass
class Subscription:
    id: str
    destination: str
    ack: str
    headers: dict[str, str]
    callback: Callable[[Message], None] | None


class PendingSend:
    """A SEND waiting for its RECEIPT; :meth:`wait` for it (``send(..., wait=False)`` returns one)."""

    def __init__(self, abandon: Callable[[PendingSend], None], send_id: str, destination: str, body: Any,
                 headers: dict[str, str]) -> None:
        self._abandon = abandon  # forget it: it is not resent any more
        self.send_id = send_id
        self.destination = destination
        self.body = body
        self.headers = headers
        self.transmissions = 0
        self.error: BaseException | None = None
        self.receipted = False
        self._done = threading.Event()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _finish(self, error: BaseException | None = None) -> None:
        if not self._done.is_set():
            self.error = error
            self.receipted = error is None
            self._done.set()

    def wait(self, timeout: float | None = DEFAULT_RECEIPT_TIMEOUT) -> None:
        """Until the RECEIPT (across reconnects and resends); raise on error or timeout.

        After a timeout the send is given up: it is not resent any more."""
        if not self._done.wait(timeout):
            self._abandon(self)
            if not self._done.is_set():
                raise SendTimeout(f"no RECEIPT for {self.send_id} within {timeout}s", self.send_id)
        if self.error is not None:
            raise self.error


@dataclass
class Stats:
    """What happened so far (for monitoring and tests)."""

    connects: int = 0  # connections made, the first one included
    reconnects: int = 0  # connections made after a loss
    resent: int = 0  # SENDs transmitted again after a failover
    resubscribed: int = 0  # SUBSCRIBEs made again after a failover
    history: list[str] = field(default_factory=list)  # the brokers connected to, in order
