"""What differs between STOMP 1.0, 1.1 and 1.2, one class per version.

Each class handles the frames of a connected client (``frame_<COMMAND>``) by
driving a broker-core session; the Twisted protocol only feeds it frames."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.broker.broker import TEMP
from gateway.broker.message import NOT_FROM_SENDERS, QUEUE, TOPIC, Message
from gateway.broker.queue import AUTO, CLIENT, CLIENT_INDIVIDUAL, Subscription
from gateway.numbers import whole_number
from gateway.stomp.codec import Frame, escape_header, message_head
from model.names import DEFAULT_VHOST, quoted

STREAM_AT = 256 * 1024  # a MESSAGE body this large goes out in pieces, as the socket takes them
MAX_EXPIRES = 2 ** 63 - 1  # epoch milliseconds: what the journal holds (a signed 64-bit number)
MAX_PREFETCH = 2 ** 31 - 1

if TYPE_CHECKING:
    from gateway.auth import Principal
    from gateway.broker.session import Session
    from gateway.stomp.protocol import StompProtocol

_ACK_MODES = {"auto": AUTO, "client": CLIENT, "client-individual": CLIENT_INDIVIDUAL}
_PREFETCH_HEADERS = ("activemq.prefetchSize", "prefetch-count")


class StompError(Exception):
    """A client mistake: answered with an ERROR frame, then the connection closes."""


class Stomp10:
    version = "1.0"

    def __init__(self, protocol: StompProtocol, session: Session, principal: Principal) -> None:
        self.protocol = protocol
        self.session = session
        self.principal = principal
        self.broker = session.broker
        self.access = protocol.factory.access  # both authorization maps
        self.vhost = protocol.vhost
        # The vhost's max_queues (None: none): a queue name not yet made is checked against it.
        self._max_queues = protocol.factory.limits.max_queues(self.vhost)
        self._subscription_numbers: dict[int, Subscription] = {}
        self._next_number = 0
        self._temp_names: dict[str, str] = {}  # global temp queue name -> name the client used
        self._destinations: dict[str, tuple[str, str]] = {}  # parsed once per connection

    # -- dispatch -------------------------------------------------------------------------

    def handle(self, frame: Frame) -> None:
        handler = getattr(self, "frame_" + frame.command, None)
        if handler is None:
            raise StompError(f"unknown command {quoted(frame.command)} for STOMP {self.version}")
        handler(frame)

    def frame_CONNECT(self, frame: Frame) -> None:
        raise StompError("already connected")

    frame_STOMP = frame_CONNECT

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def required(frame: Frame, name: str) -> str:
        value = frame.headers.get(name)
        if value is None or value == "":
            raise StompError(f"{frame.command} frame is missing the required '{name}' header")
        return value

    def destination(self, text: str) -> tuple[str, str]:
        """Map a STOMP destination to the core's (kind, address)."""
        parsed = self._destinations.get(text)
        if parsed is None:
            parsed = self._parse_destination(text)
            # With max_queues a name is looked at every time: its queue may be deleted and asked for again.
            if len(self._destinations) < 1000 and self._max_queues is None:
                self._destinations[text] = parsed
        return parsed

    def _check_queue_limit(self) -> None:
        refusal = self.protocol.factory.limits.queue_refusal(self.vhost, len(self.broker.queues))
        if refusal is not None:
            raise StompError(refusal)

    def _parse_destination(self, text: str) -> tuple[str, str]:
        kind, sep, name = text[1:].partition("/")
        if not sep or not name or text[0] != "/":
            raise StompError(f"invalid destination {quoted(text)}: use /queue/NAME, /topic/NAME or /temp-queue/NAME")
        if kind == "queue":
            if self._max_queues is not None and name not in self.broker.queues and name not in self.broker.services:
                self._check_queue_limit()
            return QUEUE, name
        if kind == "topic":
            return TOPIC, name
        if kind == "temp-queue":
            queue = self.session.temp_queue(name)
            self._temp_names[queue.name] = text
            return TEMP, queue.name
        if kind == "remote-temp-queue":
            return TEMP, name
        raise StompError(f"invalid destination {quoted(text)}: use /queue/NAME, /topic/NAME or /temp-queue/NAME")

    def format_destination(self, message: Message) -> str:
        if message.kind == TEMP:
            return self._temp_names.get(message.address) or "/remote-temp-queue/" + message.address
        return f"/{message.kind}/{message.address}"

    def authorize(self, action: str, destination: str) -> None:
        if not self.access.enabled:  # read per frame: a permission set by command turns the vhost map on
            return
        # A service address (management) has its own admin check: the vhost map does not apply to it.
        service = destination.startswith("/queue/") and destination[7:] in self.broker.services
        if not self.access.allowed(self.principal, self.vhost, action, destination, () if service else None):
            where = "" if self.vhost == DEFAULT_VHOST else f" in vhost {quoted(self.vhost)}"
            raise StompError(f"user {self.principal.name!r} is not authorized to {action} {destination}{where}")

    # -- producing ------------------------------------------------------------------------

    def frame_SEND(self, frame: Frame) -> None:
        headers = frame.headers
        target = headers.pop("destination", None)
        if not target:
            raise StompError("SEND frame is missing the required 'destination' header")
        parsed = self._destinations.get(target)
        kind, address = parsed if parsed is not None else self.destination(target)
        acl_name = _acl_name(target, kind, address)
        self.authorize("write", acl_name)
        transaction = headers.pop("transaction", None)
        headers.pop("receipt", None)
        headers.pop("content-length", None)  # on nearly every SEND: popped rather than tested
        if not NOT_FROM_SENDERS.isdisjoint(headers):
            for name in NOT_FROM_SENDERS.intersection(headers):
                del headers[name]
        priority = 4
        expires = 0
        if "priority" in headers or "expires" in headers or "reply-to" in headers:
            priority, expires = self._send_options(headers)
        persistent = headers.get("persistent") == "true"
        if "fail-if-no-space" in headers and headers.pop("fail-if-no-space") == "true" and persistent:
            blocked = self.broker.store.blocked
            if blocked is not None:
                raise StompError(f"no room for persistent messages: {blocked} (fail-if-no-space)")
        self.session.send(kind, address, headers, frame.body, persistent, priority, expires, transaction)

    def _send_options(self, headers: dict[str, str]) -> tuple[int, int]:
        priority = 4
        expires = 0
        raw = headers.get("priority")
        if raw is not None:
            priority = whole_number(raw, 9)
            if priority < 0:
                raise StompError(f"priority must be an integer from 0 to 9, got {quoted(raw)}")
        raw = headers.get("expires")
        if raw is not None:
            expires = whole_number(raw, MAX_EXPIRES)
            if expires < 0:
                raise StompError(f"expires must be a time in epoch milliseconds, got {quoted(raw)}")
        reply_to = headers.get("reply-to")
        if reply_to is not None and reply_to.startswith("/temp-queue/"):
            headers["reply-to"] = "/remote-temp-queue/" + self.destination(reply_to)[1]
        return priority, expires

    # -- consuming ------------------------------------------------------------------------

    def subscription_id(self, frame: Frame) -> str:
        # 1.0 made the id optional; the destination then names the subscription.
        return frame.headers.get("id") or self.required(frame, "destination")

    def frame_SUBSCRIBE(self, frame: Frame) -> None:
        headers = frame.headers
        target = self.required(frame, "destination")
        sub_id = self.subscription_id(frame)
        kind, address = self.destination(target)
        self.authorize("read", _acl_name(target, kind, address))
        mode = _ACK_MODES.get(headers.get("ack", "auto"))
        if mode is None:
            raise StompError(f"unknown ack mode {quoted(headers['ack'])}: use auto, client or client-individual")
        prefetch = None
        for name in _PREFETCH_HEADERS:
            raw = headers.get(name)
            if raw is not None:
                prefetch = whole_number(raw, MAX_PREFETCH)
                if prefetch < 1:
                    raise StompError(f"{name} must be a whole number from 1 to {MAX_PREFETCH}, got {quoted(raw)}")
                break
        durable_name = self.durable_name(frame, kind)
        self._next_number += 1
        number = self._next_number
        sub = self.session.subscribe(sub_id, kind, address, mode, prefetch, headers.get("selector"), durable_name,
                                     tag=(number, self.message_prefix(sub_id)))
        self._subscription_numbers[number] = sub

    def durable_name(self, frame: Frame, kind: str) -> str | None:
        headers = frame.headers
        name = headers.get("activemq.subscriptionName")
        if name is not None:
            if kind != TOPIC:
                raise StompError("activemq.subscriptionName applies to /topic/ destinations only")
            client_id = self.session.client_id
            if not client_id:
                raise StompError("a durable subscription needs a client-id header on CONNECT")
            return f"{client_id}.{name}"
        # RabbitMQ's form; on a queue it is moot, since queues are always durable.
        if kind == TOPIC and (headers.get("durable") == "true" or headers.get("persistent") == "true"):
            return self.required(frame, "id")
        return None

    def message_prefix(self, sub_id: str) -> bytes:
        return b"MESSAGE\nsubscription:" + escape_header(sub_id, self.version).encode() + b"\n"

    def frame_UNSUBSCRIBE(self, frame: Frame) -> None:
        headers = frame.headers
        sub_id = self.subscription_id(frame)
        remove = "activemq.subscriptionName" in headers or headers.get("durable") == "true"
        sub = self.session.subscriptions.get(sub_id)
        if sub is not None and sub.tag is not None:
            self._subscription_numbers.pop(sub.tag[0], None)
        if remove and sub is not None and sub.topic is not None:
            self.authorize("admin", "/topic/" + sub.topic)
        self.session.unsubscribe(sub_id, remove_durable=remove)

    def deliver(self, sub: Subscription, message: Message) -> None:
        block = message.encoded.get(self.version)
        if block is None:
            block = self.encode_block(message)
        number, prefix = sub.tag  # its number (in 1.2's ack ids) and its MESSAGE frames' first lines
        if sub.ack_mode != AUTO:
            prefix += self.ack_header(number, message)
        if message.deliveries > 1 or message.recovered:
            prefix += b"redelivered:true\n"
        protocol = self.protocol
        body = message.body
        if len(body) >= STREAM_AT:
            protocol.send_large(prefix + block, body)
            return
        protocol.sent_since_beat = True
        protocol.transport.write(b"".join((prefix, block, body, b"\0")))

    def encode_block(self, message: Message) -> bytes:
        version = self.version
        block = message_head(self.format_destination(message), message.id, message.headers, len(message.body),
                             version)
        if message.kind != TEMP:  # temp destinations read differently per owner
            message.encoded[version] = block
        return block

    def ack_header(self, number: int, message: Message) -> bytes:
        return b""

    # -- acknowledging --------------------------------------------------------------------

    def ack_target(self, frame: Frame) -> tuple[Subscription, str]:
        message_id = self.required(frame, "message-id")
        sub_id = frame.headers.get("subscription")
        if sub_id is not None:
            sub = self.session.subscriptions.get(sub_id)
            if sub is None:
                raise StompError(f"no subscription with id {quoted(sub_id)}")
            return sub, message_id
        for sub in self.session.subscriptions.values():
            if message_id in sub.inflight:
                return sub, message_id
        raise StompError(f"message {quoted(message_id)} is not awaiting acknowledgement")

    def frame_ACK(self, frame: Frame) -> None:
        sub, message_id = self.ack_target(frame)
        self.session.settle(sub, message_id, cumulative=True, transaction=frame.headers.get("transaction"))

    # -- transactions ---------------------------------------------------------------------

    def frame_BEGIN(self, frame: Frame) -> None:
        self.session.begin(self.required(frame, "transaction"))

    def frame_COMMIT(self, frame: Frame) -> None:
        self.session.commit(self.required(frame, "transaction"))

    def frame_ABORT(self, frame: Frame) -> None:
        self.session.abort(self.required(frame, "transaction"))

    def frame_DISCONNECT(self, frame: Frame) -> None:
        self.protocol.disconnect_requested()


class Stomp11(Stomp10):
    version = "1.1"

    def subscription_id(self, frame: Frame) -> str:
        return self.required(frame, "id")

    def frame_NACK(self, frame: Frame) -> None:
        sub, message_id = self.ack_target(frame)
        self.session.settle(sub, message_id, cumulative=True, accept=False)

    def ack_target(self, frame: Frame) -> tuple[Subscription, str]:
        message_id = self.required(frame, "message-id")
        sub_id = self.required(frame, "subscription")
        sub = self.session.subscriptions.get(sub_id)
        if sub is None:
            raise StompError(f"no subscription with id {quoted(sub_id)}")
        return sub, message_id


class Stomp12(Stomp11):
    version = "1.2"

    def ack_header(self, number: int, message: Message) -> bytes:
        return f"ack:{message.id}#{number}\n".encode()

    def ack_target(self, frame: Frame) -> tuple[Subscription, str]:
        ack_id = self.required(frame, "id")
        message_id, _, number = ack_id.rpartition("#")
        sub = self._subscription_numbers.get(whole_number(number, 2 ** 63))
        if sub is None or not message_id:
            raise StompError(f"ack id {quoted(ack_id)} does not name a delivery awaiting acknowledgement")
        return sub, message_id


def _acl_name(target: str, kind: str, address: str) -> str:
    """What authorization entries match: another client's temp queue is a /temp-queue/ too."""
    if kind == TEMP and not target.startswith("/temp-queue/"):
        return "/temp-queue/" + address
    return target


VERSIONS = {"1.0": Stomp10, "1.1": Stomp11, "1.2": Stomp12}
SUPPORTED = ("1.0", "1.1", "1.2")

