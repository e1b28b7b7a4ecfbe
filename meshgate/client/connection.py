"""``FailoverConnection``: a STOMP 1.2 connection over stomp.py that survives the loss of a
broker by moving to another one of the mesh.

- It connects to one broker at a time, chosen by the URL's policy; when the connection
  is lost (the broker crashed, the network broke, heart-beats stopped) it reconnects
  with ActiveMQ's back-off to the brokers the URL lists or discovers, re-subscribes
  every active subscription with the same id, destination, ack mode and headers, and
  resends every SEND that had asked for a receipt and not got it yet.
- Every SEND carries a stable id (``meshgate-send-id``, set by the client unless the
  caller gave one); a resent SEND also carries ``meshgate-resent:true``. A consumer thus
  recognises a possible duplicate: a broker may have stored the first copy and died
  before its RECEIPT reached the client. Meshgate nodes do not drop duplicates of
  SENDs themselves (the mesh's duplicate markers cover forwarding between nodes only),
  so the mark is how "none is duplicated unmarked" holds.
- A message is delivered to its subscription's callback on one dispatch thread, in
  order; callbacks may call :meth:`FailoverConnection.send` and wait for receipts.
  An ACK or NACK for a message from a connection that is gone is not sent (the broker
  redelivers that message, marked ``redelivered:true``) and returns ``False``.

Threads: stomp.py's receiver thread per connection, one reconnect thread while
reconnecting, one dispatch thread. All state is under one condition variable; no
socket write is made while holding it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from random import Random
from typing import Any

from stomp.exception import StompException

from meshgate.client.delivery import Deliveries
from meshgate.client.discovery import Discovery
from meshgate.client.link import Confirm, Link
from meshgate.client.messages import (
    DEFAULT_RECEIPT_TIMEOUT,
    RESENT,
    SEND_ID,
    ConnectFailed,
    ConnectRefused,
    FailoverError,
    FrameRefused,
    Message,
    NotConnected,
    PendingSend,
    SendRefused,
    SendTimeout,
    Stats,
    Subscription,
)
from meshgate.client.policy import LoadBalancingPolicy, make_policy
from meshgate.client.url import BrokerURI, FailoverOptions, FailoverURL, parse_url

log = logging.getLogger("meshgate.client")

_ids = itertools.count(1)
_LOST = (OSError, StompException)  # what writing to a connection that went raises


class FailoverConnection:
    """A STOMP 1.2 connection to a mesh that fails over between its nodes.

    ``url`` is a failover URL (see :mod:`meshgate.client.url`), e.g.
    ``failover:(tcp://a:61613,tcp://b:61613)?randomize=false&maxReconnectAttempts=-1``.
    ``ssl`` holds stomp.py ``set_ssl`` arguments (``ca_certs``, ``cert_file``, ``key_file``,
    …) for ``ssl://`` brokers; ``cluster_password`` checks ``udp://`` announcements;
    ``policy`` (an instance) or ``rng`` override the URL's policy (tests)."""

    def __init__(self, url: str | FailoverURL, *, login: str | None = None, passcode: str | None = None,
                 vhost: str | None = None, heartbeats: tuple[int, int] = (0, 0),
                 headers: Mapping[str, str] | None = None, ssl: Mapping[str, Any] | None = None,
                 cluster_password: str | None = None, policy: LoadBalancingPolicy | None = None,
                 rng: Random | None = None) -> None:
        self.url = parse_url(url) if isinstance(url, str) else url
        self.options: FailoverOptions = self.url.options
        self.login, self.passcode, self.vhost = login, passcode, vhost
        self.heartbeats = heartbeats
        self.connect_headers = dict(headers or {})
        self.ssl = dict(ssl or {})
        self.policy = policy or make_policy(self.options.policy, rng)
        self.discovery = Discovery(self.url.entries, cluster_password)
        self.stats = Stats()
        self.client_id = uuid.uuid4().hex[:12]
        self._cond = threading.Condition(threading.RLock())
        self._state = "new"  # new, connecting, connected, reconnecting, resuming, failed, closed
        self._link: Link | None = None
        self._generation = 0
        self._pending: dict[str, PendingSend] = {}  # in send order
        self._subscriptions: dict[str, Subscription] = {}
        self._sub_confirms: dict[str, Confirm] = {}  # each subscription's latest SUBSCRIBE
        self._failure: BaseException | None = None
        self._reconnector: threading.Thread | None = None
        self._deliveries = Deliveries()

    # -- state -------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._state

    @property
    def broker(self) -> BrokerURI | None:
        """The broker connected to now (None while disconnected)."""
        link = self._link
        return link.broker if link is not None and self._state == "connected" else None

    @property
    def failure(self) -> BaseException | None:
        """Why the connection gave up (reconnect attempts exhausted), if it did."""
        return self._failure

    def is_connected(self) -> bool:
        return self._state == "connected"

    def wait_connected(self, timeout: float | None = None) -> BrokerURI:
        """Until connected (e.g. after a failover); raise if it gave up or ``timeout`` passed."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._state in ("connected", "failed", "closed"), timeout):
                raise SendTimeout(f"not connected within {timeout}s")
            if self._state != "connected":
                raise self._failure or NotConnected("the connection is closed")
            assert self._link is not None
            return self._link.broker

    # -- connecting --------------------------------------------------------------------------

    def connect(self) -> FailoverConnection:
        """Connect to a broker of the URL: one pass over the brokers, then up to
        ``startupMaxReconnectAttempts`` more (-1: as ``maxReconnectAttempts``; -1 there:
        until one answers). Raise :class:`ConnectFailed` when none answers,
        :class:`ConnectRefused` when one answers CONNECT with an ERROR (not retried).
        Returns the connection, for ``FailoverConnection(url).connect()``."""
        with self._cond:
            if self._state not in ("new", "closed", "failed"):
                raise FailoverError(f"already {self._state}")
            self._state, self._failure = "connecting", None
            self._subscriptions.clear()
            self._sub_confirms.clear()
        self._deliveries.start()
        startup = self.options.startup_limit()
        try:
            link = self._establish(-1 if startup == -1 else 1 + startup, first=True)
        except BaseException as e:
            with self._cond:
                if self._state != "closed":
                    self._state, self._failure = "failed", e
                self._cond.notify_all()
            self._release()
            raise
        if not self._resume(link, resent=False):
            self._start_reconnector()
        return self

    def _establish(self, limit: int, first: bool) -> Link:
        """Passes over the candidates until one connects, at most ``limit`` passes (-1:
        forever); the back-off waits between passes (and before the first reconnect)."""
        delays = self.options.delays()
        failures = 0
        errors: list[str] = []
        if not first:
            self._sleep(next(delays))
        while True:
            self._check_open()
            try:
                candidates = self.discovery.candidates()
            except (ValueError, OSError) as e:
                raise ConnectFailed(str(e)) from e
            errors = list(self.discovery.errors)
            if not candidates:
                errors.append("no broker found" if self.url.discoveries else "no broker listed")
            with self._cond:
                order = self.policy.order(candidates)
            for broker in order:
                self._check_open()
                with self._cond:
                    self._generation += 1
                    generation = self._generation
                link = Link(self, broker, generation)
                try:
                    link.open()
                except ConnectFailed as e:
                    with self._cond:
                        self.policy.failed(broker)
                    if isinstance(e, ConnectRefused):
                        raise
                    errors.append(str(e))
                    continue
                with self._cond:
                    self.policy.connected(broker)
                return link
            failures += 1
            if limit != -1 and failures >= limit:
                raise ConnectFailed(f"could not connect after {failures} pass(es) over "
                                    f"{', '.join(map(str, candidates)) or 'no brokers'}: {'; '.join(errors)}")
            self._sleep(next(delays))

    def _sleep(self, seconds: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._state == "closed", seconds)
        self._check_open()

    def _check_open(self) -> None:
        if self._state == "closed":
            raise NotConnected("the connection was closed")

    def _resume(self, link: Link, resent: bool) -> bool:
        """Make ``link`` current: re-subscribe, resend what waits for a receipt, then
        accept sends. False if the link was lost meanwhile (the caller goes on reconnecting)."""
        with self._cond:
            if self._state == "closed":
                link.close()
                return True
            self._link = link
            self._state = "resuming"
            subscriptions = list(self._subscriptions.values())
            pending = list(self._pending.values())
            for p in pending:
                link.receipts[self._receipt_id(p.send_id, link)] = p
            subscribes = []
            for sub in subscriptions:  # a refused one is dropped (not made again and again)
                receipt_id = f"r-{self.client_id}-{next(_ids)}"
                link.receipts[receipt_id] = self._sub_confirms[sub.id] = Confirm(link, sub.id)
                subscribes.append((sub, receipt_id))
        try:
            for sub, receipt_id in subscribes:
                link.conn.subscribe(sub.destination, id=sub.id, ack=sub.ack,
                                    headers={**sub.headers, "receipt": receipt_id})
            for p in pending:
                self._transmit(link, p, resent=True)
        except Exception as e:  # the new link broke at once (or a frame cannot be written: logged)
            log.info("meshgate.client: %s lost while resuming: %s", link.broker, e)
        with self._cond:
            if self._link is not link or link.ended.is_set():
                if self._state not in ("closed", "failed"):
                    self._link, self._state = None, "reconnecting"
                return False
            self.stats.connects += 1
            self.stats.history.append(str(link.broker))
            if resent:
                self.stats.reconnects += 1
                self.stats.resubscribed += len(subscriptions)
                self.stats.resent += len(pending)
            self._state = "connected"
            self._cond.notify_all()
        log.info("meshgate.client: connected to %s%s", link.broker,
                 f" (resubscribed {len(subscriptions)}, resent {len(pending)})" if resent else "")
        return True

    def _on_lost(self, link: Link) -> None:
        with self._cond:
            if link is not self._link or self._state in ("closed", "failed"):
                return
            self._link = None
            self._state = "reconnecting"
            self.policy.failed(link.broker)
            self._cond.notify_all()
        log.warning("meshgate.client: connection to %s lost; reconnecting", link.broker)
        self._start_reconnector()

    def _start_reconnector(self) -> None:
        with self._cond:
            if self._reconnector is not None:
                return  # running: it loops while the state says reconnecting
            if self._state in ("closed", "failed"):
                return
            self._state = "reconnecting"
            if self.options.max_reconnect_attempts == 0:
                error = ConnectFailed("connection lost and maxReconnectAttempts=0")
            else:
                self._reconnector = threading.Thread(target=self._reconnect, name="meshgate-client-reconnect",
                                                     daemon=True)
                self._reconnector.start()
                return
        self._give_up(error)

    def _reconnect(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._state != "reconnecting":
                        return
                try:
                    link = self._establish(self.options.max_reconnect_attempts, first=False)
                except NotConnected:
                    return
                except BaseException as e:
                    self._give_up(e)
                    return
                self._resume(link, resent=True)  # if it was lost meanwhile, the state says reconnecting
        finally:
            with self._cond:
                self._reconnector = None
                if self._state == "reconnecting":  # lost again after the last check: go on
                    self._start_reconnector()

    def _give_up(self, error: BaseException) -> None:
        log.error("meshgate.client: giving up: %s", error)
        with self._cond:
            if self._state == "closed":
                return
            self._state, self._failure = "failed", error
            pending, self._pending = list(self._pending.values()), {}
            self._cond.notify_all()
        for p in pending:
            p._finish(error)

    # -- sending -----------------------------------------------------------------------------

    def _receipt_id(self, send_id: str, link: Link) -> str:
        return f"{send_id}@{link.generation}"

    def _transmit(self, link: Link, p: PendingSend, resent: bool) -> None:
        headers = dict(p.headers)
        if resent:
            headers[RESENT] = "true"
        headers["receipt"] = self._receipt_id(p.send_id, link)
        p.transmissions += 1
        link.conn.send(p.destination, p.body, headers=headers)

    def _wait_usable(self, deadline: float | None) -> Link:
        """The current link once connected; waits at most until ``deadline`` while reconnecting."""
        with self._cond:
            while True:
                if self._state == "connected" and self._link is not None:
                    return self._link
                if self._state == "failed":
                    raise self._failure or NotConnected("the connection gave up")
                if self._state in ("new", "closed"):
                    raise NotConnected("not connected: call connect() first" if self._state == "new"
                                       else "the connection is closed")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise SendTimeout(f"not connected within timeout={self.options.timeout_ms} ms "
                                      f"(state {self._state})")
                self._cond.wait(remaining)

    def _connection_deadline(self) -> float | None:
        return None if self.options.timeout_ms < 0 else time.monotonic() + self.options.timeout_ms / 1000.0

    def send(self, destination: str, body: Any = "", headers: Mapping[str, str] | None = None, *,
             receipt: bool = True, wait: bool = True,
             timeout: float | None = DEFAULT_RECEIPT_TIMEOUT) -> PendingSend | None:
        """SEND a message. While disconnected this waits for a connection at most the URL's
        ``timeout`` (then :class:`SendTimeout`).

        With ``receipt`` (the default) the SEND asks for a RECEIPT and is resent after a
        failover until it gets one; ``wait`` waits for that RECEIPT up to ``timeout``
        seconds (then :class:`SendTimeout`, and it is not resent any more), else the
        :class:`PendingSend` is returned to wait on later. Without ``receipt`` nothing is
        tracked: a message in flight when a connection is lost may be lost."""
        h = {k: str(v) for k, v in (headers or {}).items()}
        send_id = h.setdefault(SEND_ID, f"{self.client_id}-{next(_ids)}")
        deadline = self._connection_deadline()
        while True:
            link = self._wait_usable(deadline)
            p = None
            with self._cond:
                if self._link is not link or self._state != "connected":
                    continue  # lost meanwhile: wait again
                if receipt:
                    p = PendingSend(self._abandon, send_id, destination, body, h)
                    self._pending[send_id] = p
                    link.receipts[self._receipt_id(send_id, link)] = p
            if p is not None:
                break
            try:
                link.conn.send(destination, body, headers=h)
                return None
            except _LOST as e:  # not fully written, so not taken: try again on the next connection
                log.debug("meshgate.client: send on %s failed (%s)", link.broker, e)
                link.ended.wait(1.0)
        try:
            self._transmit(link, p, resent=False)
        except _LOST as e:  # the socket broke under us: it is resent after the reconnect
            log.debug("meshgate.client: send on %s failed (%s); resent after reconnecting", link.broker, e)
        except BaseException:  # not a connection problem (a body stomp.py cannot encode): not tracked
            self._abandon(p)
            raise
        if wait:
            p.wait(timeout)
        return p

    def flush(self, timeout: float | None = DEFAULT_RECEIPT_TIMEOUT) -> None:
        """Wait until every SEND that asked for a receipt has it (or failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            pending = list(self._pending.values())
        for p in pending:
            p.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    @property
    def unreceipted(self) -> int:
        return len(self._pending)

    def _abandon(self, p: PendingSend) -> None:
        with self._cond:
            if self._pending.get(p.send_id) is p:
                del self._pending[p.send_id]

    def _on_receipt(self, link: Link, receipt_id: str) -> None:
        waiter = link.receipts.pop(receipt_id, None)
        if isinstance(waiter, PendingSend):
            with self._cond:
                if self._pending.get(waiter.send_id) is waiter:
                    del self._pending[waiter.send_id]
            waiter._finish()
        elif isinstance(waiter, Confirm):
            waiter.event.set()

    def _on_error(self, link: Link, receipt_id: str | None, message: str) -> None:
        log.warning("meshgate.client: ERROR from %s: %s", link.broker, message)
        waiter = link.receipts.pop(receipt_id, None) if receipt_id else None
        if isinstance(waiter, PendingSend):
            self._abandon(waiter)
            waiter._finish(SendRefused(f"{link.broker} refused {waiter.send_id}: {message}", waiter.send_id))
        elif isinstance(waiter, Confirm):
            if waiter.subscription is not None:
                with self._cond:  # before the reconnect that follows the ERROR could make it again
                    if self._subscriptions.pop(waiter.subscription, None) is not None:
                        log.error("meshgate.client: subscription %s refused by %s and dropped: %s",
                                  waiter.subscription, link.broker, message)
            waiter.error = message
            waiter.event.set()

    # -- subscribing -------------------------------------------------------------------------

    def subscribe(self, destination: str, id: str | None = None, ack: str = "auto",
                  headers: Mapping[str, str] | None = None, callback: Callable[[Message], None] | None = None,
                  timeout: float | None = DEFAULT_RECEIPT_TIMEOUT) -> str:
        """SUBSCRIBE (waiting for its RECEIPT) and keep the subscription across failovers:
        after a reconnect it is made again with the same id, ack mode and headers.
        ``callback(message)`` runs on the dispatch thread; without one, :meth:`receive`
        returns the messages. Returns the subscription id."""
        if ack not in ("auto", "client", "client-individual"):
            raise ValueError(f"ack must be auto, client or client-individual, not {ack!r}")
        sub = Subscription(id or f"sub-{self.client_id}-{next(_ids)}", destination, ack,
                           {k: str(v) for k, v in (headers or {}).items()}, callback)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if sub.id in self._subscriptions:
                raise ValueError(f"subscription id {sub.id!r} is in use")
            self._subscriptions[sub.id] = sub
        try:
            self._confirmed(lambda link, h: link.conn.subscribe(destination, id=sub.id, ack=ack, headers=h),
                            dict(sub.headers), deadline, subscription=sub.id)
        except BaseException:
            with self._cond:
                self._subscriptions.pop(sub.id, None)
                self._sub_confirms.pop(sub.id, None)
            raise
        return sub.id

    def unsubscribe(self, id: str, timeout: float | None = DEFAULT_RECEIPT_TIMEOUT) -> None:
        """UNSUBSCRIBE (waiting for its RECEIPT); the subscription is not re-made any more."""
        with self._cond:
            if self._subscriptions.pop(id, None) is None:
                raise ValueError(f"no subscription {id!r}")
            self._sub_confirms.pop(id, None)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._confirmed(lambda link, h: link.conn.unsubscribe(id, headers=h), {}, deadline)

    def _confirmed(self, frame: Callable[[Link, dict[str, str]], None], headers: dict[str, str],
                   deadline: float | None, subscription: str | None = None) -> None:
        """Send a frame with a receipt and wait for it. If the connection is lost first,
        the resume does the work: for a SUBSCRIBE, wait for the one the resume made; an
        UNSUBSCRIBE needs nothing on the new connection. An ERROR for it raises
        :class:`FrameRefused`."""
        link = self._wait_usable(self._connection_deadline())
        receipt_id = f"r-{self.client_id}-{next(_ids)}"
        with self._cond:
            confirm = link.receipts[receipt_id] = Confirm(link, subscription)
            if subscription is not None:
                self._sub_confirms[subscription] = confirm
        headers["receipt"] = receipt_id
        try:
            frame(link, headers)
        except _LOST:
            pass  # lost: the resume makes the subscription again
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise SendTimeout("no RECEIPT from the broker in time")
            if confirm.event.wait(0.05 if remaining is None else min(0.05, remaining)):
                if confirm.error is not None:
                    raise FrameRefused(f"{confirm.link.broker} refused it: {confirm.error}")
                return
            if confirm.link.ended.is_set() and not confirm.event.wait(0.05):
                self._wait_usable(deadline)  # the resume has made its frames on the new connection
                if subscription is None:
                    return
                with self._cond:
                    confirm = self._sub_confirms[subscription]

    def _on_message(self, link: Link, frame: Any) -> None:
        headers = dict(frame.headers)
        message = Message(headers, frame.body, headers.get("subscription", ""), link.generation)
        sub = self._subscriptions.get(message.subscription)
        if sub is None:
            return  # unsubscribed meanwhile: the broker returns what it had not acked
        self._deliveries.put(sub.callback, message)

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message of a subscription made without a callback (None after ``timeout``)."""
        return self._deliveries.receive(timeout)

    # -- acknowledging -----------------------------------------------------------------------

    def ack(self, message: Message, receipt: bool = False, timeout: float | None = DEFAULT_RECEIPT_TIMEOUT) -> bool:
        """ACK a message of a ``client`` or ``client-individual`` subscription. False if it
        came on a connection that is gone: the broker redelivers it, and nothing is sent."""
        return self._settle("ack", message, receipt, timeout)

    def nack(self, message: Message, receipt: bool = False,
             timeout: float | None = DEFAULT_RECEIPT_TIMEOUT) -> bool:
        """NACK a message (the broker redelivers it); False as for :meth:`ack`."""
        return self._settle("nack", message, receipt, timeout)

    def _settle(self, command: str, message: Message, receipt: bool, timeout: float | None) -> bool:
        ack_id = message.headers.get("ack")
        if ack_id is None:
            raise ValueError("the message has no ack header (an auto-ack subscription?)")
        with self._cond:
            link = self._link
            # While resuming, the link is current already: what it delivered after the
            # re-SUBSCRIBE is settled on it, in order after the SUBSCRIBE.
            if self._state not in ("connected", "resuming") or link is None or \
                    link.generation != message.generation:
                return False
        confirm = Confirm(link)
        receipt_id = None
        if receipt:
            receipt_id = f"r-{self.client_id}-{next(_ids)}"
            link.receipts[receipt_id] = confirm
        try:
            getattr(link.conn, command)(ack_id, receipt=receipt_id)
        except _LOST:
            return False  # lost: the broker redelivers
        if receipt and (not confirm.event.wait(timeout) or confirm.error is not None):
            return False
        return True

    # -- closing -----------------------------------------------------------------------------

    def disconnect(self, timeout: float = 10.0) -> None:
        """DISCONNECT (waiting for its RECEIPT at most ``timeout``), stop reconnecting; SENDs
        still waiting for a RECEIPT fail with :class:`NotConnected` (``flush()`` first to wait)."""
        with self._cond:
            link, self._link = self._link, None
            self._state = "closed"
            pending, self._pending = list(self._pending.values()), {}
            self._cond.notify_all()
        for p in pending:
            p._finish(NotConnected("disconnected before the RECEIPT"))
        if link is not None and not link.ended.is_set():
            try:
                link.conn.disconnect()  # stomp.py closes the socket on the RECEIPT
            except Exception:
                pass
            link.ended.wait(timeout)
            link.close()
        reconnector = self._reconnector
        if reconnector is not None and reconnector is not threading.current_thread():
            reconnector.join(timeout)
        self._release(timeout)

    def _release(self, timeout: float = 10.0) -> None:
        """Stop the discovery listeners and the dispatch thread (both are made again by connect)."""
        self.discovery.close()
        self._deliveries.stop(timeout)

    def __enter__(self) -> FailoverConnection:
        if self._state in ("new", "closed", "failed"):
            self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()
