"""Message journeys on one node (docs/journeys.md): which messages are traced, and the
record each step of a traced one makes (a model.journeys.JourneyStep when it is read).

The decision is made once, when a producer's message becomes a Message
(gateway.broker.routing ``send``/``publish``): a STOMP ``trace: true`` header, or an
AMQP headers-table entry ``x-trace`` of true (or "true"), or its destination's arm
(``trace_next``, a trace definition) picking it. Its ``traced`` slot is then set, and
every hook on the per-message path is ``if message.traced:`` with the tracer fetched
inside the branch: an untraced message pays one attribute test per hook, and a broker
without ``[journeys]`` has no tracer at all (``Broker.tracer is None``), so none of its
messages is ever traced.

The records go to a ``JourneySink`` (management.journeys.JourneyStore keeps them,
bounded); this module only makes them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from gateway.broker.message import QUEUE, TOPIC, Message
from model.journeys import FIELD_OVERHEAD, RecordClient, RecordOrigin, Step, fields_size, kept_headers, short
from model.names import DEFAULT_VHOST

if TYPE_CHECKING:
    from gateway.broker.queue import Queue, Subscription
    from gateway.broker.session import Session

STOMP_HEADER = "trace"  # a STOMP SEND's header asking for its journey
AMQP_HEADER = "x-trace"  # an AMQP publish's headers-table entry asking for it


def asks_trace(value: object) -> bool:
    """Whether a header value asks for a trace: "true" in any case. Anything else (false,
    a number, junk of any length) is simply no trace, never an error."""
    return type(value) is str and len(value) == 4 and value.lower() == "true"


class JourneySink(Protocol):
    def add(self, origin: RecordOrigin, step: Step, message_id: str, queue: str | None,
            fields: dict[str, Any] | None, fields_bytes: int, client: RecordClient | None) -> None:
        """Keep one record of ``message_id``'s ``step`` (in ``queue``); ``fields``: its other
        model.journeys.JourneyStep fields, if any, holding ``fields_bytes``
        (model.journeys.fields_size, the client's counted as fields too); ``client``: the
        client it names, if any. The sink numbers and times it."""


class Arm:
    """Tracing asked for a destination (management ``trace_next``): every ``every``-th
    message sent to it (``countdown`` to the next), ``left`` more at most (None: no
    limit), until ``until``. ``queue``: the queue that holds it too (``Queue.arm``), if
    it names a queue that exists."""

    __slots__ = ("every", "countdown", "left", "until", "queue")

    def __init__(self, every: int, left: int | None, until: float) -> None:
        self.every, self.countdown, self.left, self.until = every, every, left, until
        self.queue: Queue | None = None


class Tracer:
    """What a broker holds when journeys are on: one per vhost (``for_vhost``), all of a
    node's sharing its sink, whose ``seq`` orders every step on the node.
    ``queue_arms``/``topic_arms``: the destinations traced without a header (``arm``), by
    address; with none (``armed`` 0), they cost the receive path one truth test. An armed
    queue that exists holds its arm too (``Queue.arm``): a SEND, which looks its queue up
    anyway, reads it there. Armed, the receive path (gateway.broker.routing) counts each
    arm down itself and calls ``take`` only when the count reaches 0: the messages an arm
    skips pay a lookup (or a read of their queue's arm) and a decrement, not a call."""

    __slots__ = ("sink", "node", "node_name", "vhost", "origin", "seconds", "queue_arms", "topic_arms", "armed",
                 "max_header_bytes", "body_preview")

    def __init__(self, sink: JourneySink, node: str, node_name: str, seconds: Callable[[], float],
                 vhost: str = DEFAULT_VHOST, max_header_bytes: int = 2048, body_preview: int = 256) -> None:
        self.sink = sink
        # What a received record keeps for search ([journeys] max_header_bytes, body_preview).
        self.max_header_bytes = max_header_bytes
        self.body_preview = body_preview
        self.node = node
        self.node_name = node_name
        self.seconds = seconds
        self.vhost = vhost
        self.origin: RecordOrigin = (node, node_name, vhost)  # what each record names as its maker
        # By address alone: a string's hash is kept in it, a (kind, address) key's is made per message.
        self.queue_arms: dict[str, Arm] = {}
        self.topic_arms: dict[str, Arm] = {}
        self.armed = 0  # how many arms: with none, a STOMP SEND pays one test, not the choice of its kind's arms

    def for_vhost(self, vhost: str) -> Tracer:
        """The tracer of vhost ``vhost``'s broker: its records name the vhost."""
        return Tracer(self.sink, self.node, self.node_name, self.seconds, vhost, self.max_header_bytes,
                      self.body_preview)

    # -- the decision, at receive ----------------------------------------------------------

    def arms(self) -> dict[tuple[str, str], Arm]:
        """Every arm, by (kind, address)."""
        return {**{(QUEUE, address): arm for address, arm in self.queue_arms.items()},
                **{(TOPIC, address): arm for address, arm in self.topic_arms.items()}}

    def arm(self, kind: str, address: str, every: int, count: int | None, seconds: float,
            queue: Queue | None) -> None:
        """Trace every ``every``-th message of ``kind`` ("queue", "topic") sent to ``address``
        from now, ``count`` at most, for ``seconds``; a ``count`` of 0 stops it. ``queue``:
        the broker's queue ``address``, if it exists (Broker.trace_next finds it)."""
        self._disarm(kind, address)
        if count != 0:
            arm = self._arms_of(kind)[address] = Arm(every, count, self.seconds() + seconds)
            if queue is not None:
                arm.queue, queue.arm = queue, arm
            self.armed = len(self.queue_arms) + len(self.topic_arms)

    def queue_made(self, queue: Queue) -> None:
        """``queue`` was made (again): it holds its arm, if it has one."""
        arm = self.queue_arms.get(queue.name)
        if arm is not None:
            arm.queue, queue.arm = queue, arm

    def take(self, arm: Arm, kind: str, address: str) -> bool:
        """``arm``'s countdown reached 0 on a message sent to ``address``: whether it traces
        it (the arm may have ended, or used its last count: then it goes)."""
        arm.countdown = arm.every
        if self.seconds() > arm.until:  # looked at only when it would trace: it may run past its end unseen
            self._disarm(kind, address)
            return False
        if arm.left is not None:
            arm.left -= 1
            if arm.left <= 0:
                self._disarm(kind, address)
        return True

    def _disarm(self, kind: str, address: str) -> None:
        arm = self._arms_of(kind).pop(address, None)
        if arm is not None and arm.queue is not None and arm.queue.arm is arm:
            arm.queue.arm = None
        self.armed = len(self.queue_arms) + len(self.topic_arms)

    def _arms_of(self, kind: str) -> dict[str, Arm]:
        if kind == QUEUE:
            return self.queue_arms
        if kind == TOPIC:
            return self.topic_arms
        raise ValueError(f"only a queue or a topic is armed, not a {kind}")

    def sent(self, message: Message, session: Session | None, from_id: str | None) -> None:
        """A STOMP SEND (or a management send, or a dead-letter) with a ``trace`` header, or
        made from a traced message (``from_id``), became ``message``: traced if the header
        says true, or if it is made from a traced message."""
        if from_id is not None or asks_trace(message.headers.get(STOMP_HEADER)):
            self._received(message, session, from_id, f"/{message.kind}/{message.address}", None, None)

    def sampled(self, message: Message, session: Session | None) -> None:
        """A STOMP SEND without the header that its destination's arm picked (``take``)."""
        self._received(message, session, None, f"/{message.kind}/{message.address}", None, None)

    def published(self, message: Message, session: Session | None, from_id: str | None, exchange: str,
                  routing_key: str, sampled: bool = False) -> None:
        """An AMQP publish (or a dead-letter through an exchange) became ``message``, before
        it is copied into its queues (the copies keep its mark): traced if its ``x-trace``
        entry says true, or if it is made from a traced message, or if its destination's arm
        picked it (``sampled``: the default exchange's queue, amq.topic's topic)."""
        if sampled or from_id is not None or asks_trace(message.headers.get(AMQP_HEADER)):
            destination = f"/exchange/{exchange}/{routing_key}" if exchange else f"/queue/{routing_key}"
            self._received(message, session, from_id, destination, exchange, routing_key)

    def _received(self, message: Message, session: Session | None, from_id: str | None, destination: str,
                  exchange: str | None, routing_key: str | None) -> None:
        message.traced = True  # its copies follow (Message.copy)
        destination = short(destination)
        fields: dict[str, Any] = {"destination": destination, "persistent": message.persistent,
                                  "priority": message.priority, "size": len(message.body)}
        size = len(destination)
        if from_id is not None:
            fields["from_id"] = from_id = short(from_id)
            size += len(from_id)
        if exchange is not None:
            exchange, routing_key = short(exchange), short(routing_key or "")
            fields["exchange"], fields["routing_key"] = exchange, routing_key
            size += len(exchange) + len(routing_key)
        headers, headers_bytes = kept_headers(message.headers, self.max_header_bytes)
        if headers:
            fields["headers"] = headers
            size += headers_bytes
        if self.body_preview:
            fields["body_preview"] = preview = message.body[:self.body_preview].decode("utf-8", "replace")
            size += len(preview)
        client, client_bytes = (None, 0) if session is None else _client_of(session)
        self.sink.add(self.origin, "received", message.id, None, fields,
                      size + FIELD_OVERHEAD * len(fields) + client_bytes, client)

    # -- the steps of a traced message -----------------------------------------------------
    # The steps every traced message takes (queued, delivered, acked; forwarded and
    # peer_stored across a link) are on the per-message path of a 1 % sample: each is one
    # call of the sink with what it has at hand, no struct made (management.journeys), its
    # size counted as it is made; the rarer steps' sizes are counted by ``fields_size``.

    def queued(self, queue: Queue, message: Message) -> None:
        """Put in ``queue``: ``stored`` when the journal holds it too."""
        step: Step = "stored" if message.persistent and queue.durable else "queued"
        self.sink.add(self.origin, step, message.id, queue.name, None, 0, None)

    def delivered(self, sub: Subscription, message: Message, auto_ack: bool) -> None:
        """Given to a client's consumer; in auto-ack, acked as it goes out. A mesh link's
        subscription forwards it to the next node instead."""
        link = sub.link
        if link is not None:
            # Why it goes: as mesh.forwarding.Forwarder decides, which runs right after this.
            redistribution = not link.durable and sub.queue.mesh.backlog and sub.prefetch
            peer, reason = link.peer, "redistribution" if redistribution else link.role.value
            self.sink.add(self.origin, "forwarded", message.id, sub.queue.name,
                          {"peer": peer, "visit": len(message.path) + 1, "reason": reason},
                          3 * FIELD_OVERHEAD + len(peer) + len(reason), None)
            return
        self._delivery(sub.session, sub.id, sub.ack_mode, sub.queue, message)
        if auto_ack:
            self.acked(sub.queue, message, self.seconds())

    def got(self, session: Session, queue: Queue, message: Message, no_ack: bool) -> None:
        """Given to an AMQP basic.get (which no subscription delivers)."""
        self._delivery(session, "get", "auto" if no_ack else "client", queue, message)

    def acked(self, queue: Queue, message: Message, now: float) -> None:
        created = message.created
        # To the µs, without round(x, 3): that formats and parses the float (dtoa), ~5 µs cold.
        self.sink.add(self.origin, "acked", message.id, queue.name,
                      {"latency_ms": int((now - created) * 1_000_000) / 1000} if created else None,
                      FIELD_OVERHEAD if created else 0, None)

    def requeued(self, queue: Queue, message: Message, reason: str) -> None:
        self._record("requeued", message.id, queue.name, {"reason": short(reason), "deliveries": message.deliveries})

    def dead_lettered(self, queue: Queue, message: Message, reason: str, target: str) -> dict[str, Any]:
        """To ``target`` (a queue, or ``exchange:X``). Returns the record's fields, so the caller
        can name the copy it became (``next_id``) once it has it: the record keeps its place."""
        fields: dict[str, Any] = {"reason": short(reason), "destination": short(target),
                                  "deliveries": message.deliveries}
        self._record("dead_lettered", message.id, queue.name, fields)
        return fields

    def expired(self, queue: Queue, message: Message) -> None:
        self.sink.add(self.origin, "expired", message.id, queue.name, None, 0, None)

    def dropped(self, queue: Queue | None, message: Message, reason: str) -> None:
        self._record("dropped", message.id, None if queue is None else queue.name, {"reason": short(reason)})

    # -- between nodes (mesh.forwarding) ---------------------------------------------------

    def link_received(self, message: Message, peer: str, redistributed: bool, duplicate: bool) -> None:
        """Taken from ``peer``'s link (before it is queued here), or dropped as a copy this
        node already has."""
        fields: dict[str, Any] = {"peer": peer, "visit": len(message.path), "persistent": message.persistent}
        if redistributed:
            fields["reason"] = "redistribution"
        self._record("duplicate_dropped" if duplicate else "link_received", message.id, None, fields)

    def peer_stored(self, queue: Queue, message: Message, peer: str) -> None:
        """``peer`` has it (durably, when persistent): this node's copy is done."""
        self._record("peer_stored", message.id, queue.name, {"peer": peer})

    def peer_busy(self, queue: Queue, message: Message, peer: str) -> None:
        """``peer`` had no room to store it: back at the head of its queue here, tried again later."""
        self._record("peer_busy", message.id, queue.name, {"peer": peer})

    def in_doubt(self, queue: Queue, message: Message, peers: str) -> None:
        """Held: it was in flight to ``peers`` when the link went (or this node restarted), and
        it waits until they say whether they have it."""
        self._record("in_doubt", message.id, queue.name, {"peer": short(peers)})

    def doubt_settled(self, queue: Queue, message: Message, peer: str, outcome: str) -> None:
        """``peer`` answered (or was waited for long enough): ``outcome`` is ``peer has it``
        (done here) or ``requeued`` (delivered again from here, marked redelivered)."""
        self._record("doubt_settled", message.id, queue.name, {"peer": peer, "reason": outcome})

    def moved(self, queue: Queue, message: Message, target: str) -> None:
        self._record("moved", message.id, queue.name, {"destination": short(target)})

    def _delivery(self, session: Session, consumer: str, ack_mode: str, queue: Queue, message: Message) -> None:
        consumer = short(consumer)
        client, client_bytes = _client_of(session)
        self.sink.add(self.origin, "delivered", message.id, queue.name,
                      {"consumer": consumer, "ack_mode": ack_mode, "deliveries": message.deliveries,
                       "redelivered": message.redelivered},
                      4 * FIELD_OVERHEAD + len(consumer) + len(ack_mode) + client_bytes, client)

    def _record(self, step: Step, message_id: str, queue: str | None, fields: dict[str, Any]) -> None:
        self.sink.add(self.origin, step, message_id, queue, fields, fields_size(fields), None)


def _client_of(session: Session) -> tuple[RecordClient, int]:
    """The client at the other end of ``session`` as records name it (protocol, connection
    id, address, user), and the bytes it holds counted as fields: made once a session."""
    known = session.journey_client
    if known is None:
        user = getattr(session.principal, "name", None)
        user = short(user) if type(user) is str else None
        info = session.connection
        client: RecordClient = ((info.protocol, short(info.name or session.name), short(info.remote), user)
                                if info is not None else (None, short(session.name), None, user))
        texts = [text for text in client if text is not None]
        known = session.journey_client = (client, FIELD_OVERHEAD * len(texts) + sum(map(len, texts)))
    return known
