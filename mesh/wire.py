"""The link's frames, typed: the frame types, one struct per control frame body
(JSON on the wire, as older nodes write and read it: fields they lack have
defaults, fields this node does not know are ignored), the typed decoder of each
frame type's body, and the table that hands each frame to the part that handles it.

A peer's body is decoded into its type before any part sees it, so a malformed
frame is a LinkError naming the frame type (the link is refused, saying why),
never a TypeError deep in the mesh."""

from __future__ import annotations

import enum
import json
import math
from typing import Annotated, Any, Callable, Generic, Literal, Protocol, TypeVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from model.mesh import NodeSummary
from model.names import MAX_NAME_BYTES

__all__ = ["FrameType", "LinkError", "LinkSender", "FrameTable", "Body", "Hello", "Auth", "Refuse", "DemandRecord",
           "DurableSubscription", "LinkHandover", "Forget", "Request", "Reply", "VhostDefinitions", "decode_hello",
           "decode_auth",
           "decode_refuse", "encode_body"]


class FrameType(enum.IntEnum):
    HELLO = 1      # who I am, and a nonce for the peer to prove the cluster password on
    AUTH = 2       # proof: HMAC(password, peer's nonce + my node id)
    REFUSE = 3     # why the link is refused; then close
    PING = 4
    PONG = 5
    DEMAND = 6     # the full set of consumer demand this node advertises to the peer
    TOPOLOGY = 7   # what this node knows of the mesh: nodes, links, partial queues
    MESSAGE = 8    # a forwarded message (custody passes on STORED)
    STORED = 9     # ids the receiver has durably stored (or already had)
    RELEASED = 10  # ids the sender has durably forgotten: the receiver may drop its duplicate markers
    MARKERS = 11   # on (re)connect: ids the receiver still remembers from this sender
    DURABLE = 12   # scale-down: make this durable subscription here; its backlog follows
    ASK = 13       # on reconnect: non-persistent messages in flight when the link went; which did you get?
    HAVE = 14      # the asked ones the receiver got (its recent window)
    LEAVING = 15   # scale-down finished: this node holds nothing of anyone's and goes for good
    FORGET = 16    # an administrator says a crashed node is gone for good; passed on to every node
    REQUEST = 17   # a management request on its way to a node (mesh.router)
    REPLY = 18     # its answer on the way back
    CHUNK = 19     # a piece of a large MESSAGE (mesh.large), to peers whose HELLO says "chunks"
    BUSY = 20      # ids the receiver did not take: its store has no room; the sender keeps them, tries later
    DEFINITIONS = 21  # mesh-wide definitions (model.definitions): all of them on link up, then each change
    VOTE = 22      # instead of a HELLO: a backup asks whether the peer still hears its primary (mesh.quorum)
    VOTED = 23     # the answer to a VOTE; then close (the connection never becomes a link)
    VHOST_DEFINITIONS = 24  # a vhost's own definitions (not "/"'s), to peers of link protocol 5 only


class LinkError(Exception):
    """The peer sent something that is not a valid link frame."""


MAX_NAME = 200  # characters of a node id, name, nonce, user or group in a HELLO: far above a uuid or a host name
_Name = Annotated[str, Meta(max_length=MAX_NAME)]
_Key = Annotated[str, Meta(min_length=1, max_length=MAX_NAME)]
_Address = tuple[_Name, int]

# A proven peer's frames are bounded by what a node of any release sends (from 0.1.0,
# link protocol 4), so that what this node logs and passes on to its peers stays small;
# a frame past a bound is malformed (Body.decode: the link is refused, naming its type).

# A demand path or a request's route names each node at most once: it is never longer
# than the mesh has nodes. mesh.max_hops has no ceiling to take this from, so it is
# chosen, far above any mesh this design serves (demand floods every link).
MAX_PATH = 1024
_Route = Annotated[list[_Key], Meta(max_length=MAX_PATH)]
# A name by the one rule of names (model.names): a queue, a topic or its pattern, a
# durable subscription; its bytes bound its characters. A peer's topic queue among
# the bindings, "link/" + its node id, fits too.
_ClientName = Annotated[str, Meta(max_length=MAX_NAME_BYTES)]
# A request id is "node id:boot:count" (mesh.router.Router.request): 8 hex digits of
# boot, and a count that would need ages to pass 20 digits.
MAX_REQUEST_ID = MAX_NAME + len(":01234567:") + 20
_RequestId = Annotated[str, Meta(min_length=1, max_length=MAX_REQUEST_ID)]
# An id in STORED, BUSY, MARKERS, ASK, HAVE and RELEASED is "origin/target/message id"
# (mesh.custody.Custody.key, mesh.forwarding.entry_name): the origin a node id, the
# target a durable subscription or a peer's topic queue, "" or left out for a queue.
# A message id is the broker's (gateway.broker: 8 characters of the node id, its
# boots, a count, and a copy's suffix), under 100 characters: a node id's bound is ample.
MAX_MESSAGE_ID = MAX_NAME
MAX_MESSAGE_KEY = MAX_NAME + len("/") + MAX_NAME_BYTES + len("/") + MAX_MESSAGE_ID
# The kinds of demand a node of every release sends (gateway.broker.message.QUEUE,
# TOPIC; model.definitions.DURABLE_SUBSCRIPTION): mypy checks the three against them.
DemandKind = Literal["queue", "topic", "durable"]


# -- the handshake --------------------------------------------------------------------------------

class Hello(Struct, kw_only=True):
    """Who a node is. Older nodes lack the later flags (chunks, busy, epoch, votes)."""

    version: int
    node_id: _Key
    name: _Name = "?"
    user: _Name | None = None
    nonce: _Key
    started: float = 0.0
    link: _Address | None = None
    stomp: _Address | None = None
    group: _Name = ""
    chunks: bool = False  # large messages may come as CHUNK frames (mesh.large)
    busy: bool = False  # a message it cannot store for want of room gets BUSY back, not silence
    epoch: Annotated[int, Meta(ge=0)] = 0  # the data dir's epoch it serves under (fencing)
    votes: bool = False  # answers a backup's quorum VOTE sent instead of a HELLO (mesh.quorum)
    speaks: Annotated[int, Meta(ge=0)] = 0  # the newest link protocol it speaks (0: only "version", a node of 4)

    def protocol(self, newest: int) -> int:
        """The link protocol of a link with this node, for a node that speaks up to ``newest``."""
        return min(newest, max(self.version, self.speaks))


class Auth(Struct):
    proof: str


class Refuse(Struct, omit_defaults=True):
    reason: str
    # The refused node id was replaced: the epoch this node has seen of it, with a proof
    # made with the cluster password on the refused side's nonce.
    fenced: int | None = None
    proof: str | None = None


_WITHOUT = ("node_id", "nonce")  # what a HELLO cannot do without: "without a valid ..."


def decode_hello(payload: bytes, oldest: int, newest: int) -> Hello:
    """A peer's HELLO, if its oldest link protocol ("version") is one this node speaks."""
    body = decode_control(payload)
    version = body.get("version") if isinstance(body, dict) else None
    if type(version) is not int or not oldest <= version <= newest:
        raise LinkError("not a Meshgate link peer of this protocol version")
    try:
        hello = msgspec.convert(body, Hello)
    except msgspec.ValidationError as error:
        key = _field_of(str(error))
        raise LinkError(f"a HELLO without a valid {key}" if key in _WITHOUT else
                        f"a HELLO with an invalid {key}") from None
    if not math.isfinite(hello.started):
        raise LinkError("a HELLO with an invalid started")
    return hello


def _field_of(error: str) -> str:
    """The field msgspec's error names: "... - at `$.name`" or "... required field `name`"."""
    _, at, path = error.partition("`$.")
    if at:
        return path.split("`")[0].split("[")[0]
    return error.rpartition("`")[0].rpartition("`")[2]


def decode_auth(payload: bytes) -> Auth | None:
    """A peer's AUTH, or None if it is no proof at all (a wrong password)."""
    try:
        return msgspec.convert(decode_control(payload), Auth)
    except (msgspec.ValidationError, LinkError):
        return None


def decode_refuse(payload: bytes) -> Refuse:
    """A refusal is read however it looks: the link closes anyway."""
    body = decode_control(payload)
    try:
        return msgspec.convert(body, Refuse)
    except msgspec.ValidationError:
        return Refuse(reason=str(body.get("reason", "")) if isinstance(body, dict) else "")


# -- established links ----------------------------------------------------------------------------

_Vhost = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_BYTES)]


class DemandRecord(Struct, kw_only=True, omit_defaults=True):
    """Consumers that want an address, at the end of ``path`` (the node that has them first).
    Fields at their default are left out, so a record of "/" reads as before vhosts."""

    kind: DemandKind  # queue, topic (a pattern) or durable (a durable subscription's subscriber)
    address: _ClientName
    # Unbounded but by the frame: no limit is set on a selector (a STOMP header's length is
    # configured), and a link's selector is its consumers' joined with OR.
    selector: str | None = None
    consumers: Annotated[int, Meta(ge=0)] = 1
    path: Annotated[_Route, Meta(min_length=1)]
    vhost: _Vhost = "/"  # link protocol 5 (model.names.DEFAULT_VHOST)


class DurableSubscription(Struct, omit_defaults=True):
    """Scale-down: make this durable subscription here (its backlog follows)."""

    name: _ClientName
    topic: _ClientName
    selector: str | None = None  # unbounded, as a demand record's
    vhost: _Vhost = "/"  # another than "/" only to a peer of link protocol 5


class LinkHandover(Struct, kw_only=True, omit_defaults=True):
    """Scale-down: keep this topic queue for a peer whose link is down (its backlog follows)."""

    name: _ClientName = ""
    link: _Key  # the peer's node id
    patterns: list[_ClientName]  # as many as topics are subscribed beyond that peer
    vhost: _Vhost = "/"


class Forget(Struct):
    node: _Key  # bounded as a HELLO's node id: the node logs it and passes it to every peer
    id: _Key


class Request(Struct):
    """A management request on its way along ``route`` (origin first, target last)."""

    id: _RequestId
    route: _Route
    body: Any = None


class Reply(Struct, omit_defaults=True):
    """Its answer on the way back: ``answer``, or why there is none."""

    id: _RequestId
    route: _Route
    answer: Any = UNSET
    unreachable: str | UnsetType = UNSET


class VhostDefinitions(Struct, kw_only=True):
    """The definitions of one vhost other than "/" (mesh.definitions): ``incarnation``
    is the (version, origin) of the vhost record that made the vhost (null for a
    vhost of the nodes' configuration), so that records of a vhost deleted and made
    again meanwhile are told apart. Each record is read alone (a bad one is skipped)."""

    vhost: Annotated[str, Meta(min_length=1, max_length=MAX_NAME_BYTES)]  # a vhost name's bytes bound its characters
    incarnation: tuple[Annotated[int, Meta(ge=0)], _Name] | None
    records: list[Any]


T = TypeVar("T")


class Body(Generic[T]):
    """How one frame type's body is decoded, and what it must look like."""

    __slots__ = ("_decode", "expected")

    def __init__(self, decode: Callable[[bytes], T], expected: str) -> None:
        self._decode = decode
        self.expected = expected

    @classmethod
    def of(cls, body_type: type[T], expected: str) -> Body[T]:
        return cls(msgspec.json.Decoder(body_type).decode, expected)

    def decode(self, kind: int, payload: bytes) -> T:
        if payload:
            try:
                return self._decode(payload)
            except msgspec.ValidationError:
                pass
            except (msgspec.DecodeError, UnicodeDecodeError) as error:  # not JSON, or not UTF-8
                raise LinkError(f"malformed control frame: {error}") from None
        raise LinkError(f"malformed link frame of type {kind}: expected {self.expected} "
                        f"({FrameType(kind).name})")


def _durable(payload: bytes) -> DurableSubscription | LinkHandover:
    body = msgspec.json.decode(payload)
    if isinstance(body, dict) and "link" in body:
        return msgspec.convert(body, LinkHandover)
    return msgspec.convert(body, DurableSubscription)


IDS = Body.of(list[Annotated[str, Meta(max_length=MAX_MESSAGE_KEY)]], "a list of message ids")
DEMAND = Body.of(list[DemandRecord], "a list of demand records (kind, address, path, selector, consumers)")
DURABLE = Body(_durable, "a durable subscription (name, topic, selector) or a link binding")
FORGET = Body.of(Forget, "a node and a request id")
REQUEST = Body.of(Request, "a request id and a route")
REPLY = Body.of(Reply, "a request id and a route")
DEFINITIONS = Body.of(list[Any], "a list of definitions")  # each read by mesh.definitions, which skips bad ones
TOPOLOGY = Body.of(list[NodeSummary], "a list of node summaries")
VHOST_DEFINITIONS = Body.of(VhostDefinitions, "a vhost, its incarnation and a list of definitions")


class LinkSender(Protocol):
    """An established link, as the parts that answer its frames see it."""

    @property
    def peer_id(self) -> str: ...

    @property
    def peer_name(self) -> str: ...

    @property
    def dialled(self) -> bool: ...

    def send_control(self, kind: FrameType, body: object = None) -> None: ...

    def send_encoded(self, kind: FrameType, payload: bytes) -> None:
        """A control frame whose body is encoded already."""

    def send_message(self, frame: bytes, address: str = "") -> None:
        """An encoded MESSAGE frame (mesh.codec.encode_message)."""


Handler = Callable[[LinkSender, bytes], None]


class FrameTable:
    """Frame type -> the part's handler, for frames on established links. Each part
    registers its own frame types; a type no part registered is refused."""

    def __init__(self) -> None:
        self.handlers: dict[int, Handler] = {}

    def on_raw(self, kind: FrameType, handler: Handler) -> None:
        """``handler`` gets the payload as it came (MESSAGE: no decoding on the way)."""
        if kind in self.handlers:
            raise ValueError(f"{kind.name} frames are handled already")
        self.handlers[int(kind)] = handler

    def on(self, kind: FrameType, body: Body[T], handler: Callable[[LinkSender, T], None]) -> None:
        """``handler`` gets the body decoded as ``body`` says."""
        decode = body.decode
        self.on_raw(kind, lambda link, payload: handler(link, decode(kind, payload)))


def encode_body(body: object) -> bytes:
    return b"" if body is None else msgspec.json.encode(body)


def decode_control(payload: bytes) -> Any:
    """A control frame's JSON as Python values (None for an empty body)."""
    if not payload:
        return None
    try:
        return json.loads(payload)
    except ValueError as error:
        raise LinkError(f"malformed control frame: {error}") from None
