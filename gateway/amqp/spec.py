"""AMQP 0-9-1 as far as a broker speaks it: every method's class and method ids,
name and argument types, the basic content properties, reply codes.

The argument types are the specification's domains reduced to their wire types:
``octet short long longlong shortstr longstr bit table timestamp``. AmqpError is a
reply code with what goes with it, what closes a channel or the connection."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
FRAME_MIN_SIZE = 4096

# Reply codes (spec, "constants"): soft errors close the channel, hard ones the connection.
REPLY_SUCCESS = 200
CONTENT_TOO_LARGE = 311
NO_ROUTE = 312
CONNECTION_FORCED = 320
INVALID_PATH = 402
ACCESS_REFUSED = 403
NOT_FOUND = 404
RESOURCE_LOCKED = 405
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
RESOURCE_ERROR = 506
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

CONNECTION_CLASS = 10  # its methods go on channel 0, and only they do
_SHORTSTR_MAX = 255


class AmqpError(Exception):
    """What went wrong, with its reply code. ``channel`` 0 (or a hard code) closes
    the connection; otherwise the channel. ``text`` goes to the client as the reply
    text, so it is cut to fit one (and is what a log line quotes, bounded with it)."""

    def __init__(self, code: int, text: str, channel: int = 0, class_id: int = 0, method_id: int = 0) -> None:
        text = _fit_shortstr(text)
        super().__init__(text)
        self.code = code
        self.text = text
        self.channel = channel
        self.class_id = class_id
        self.method_id = method_id


def _fit_shortstr(text: str) -> str:
    """``text`` within the 255 bytes of a short string (a reply text), cut at a character."""
    raw = text.encode(errors="replace")
    if len(raw) <= _SHORTSTR_MAX:
        return raw.decode()
    return raw[:_SHORTSTR_MAX - 3].decode(errors="ignore") + "..."


_METHODS = """
10 10 connection.start         octet version_major, octet version_minor, table server_properties, longstr mechanisms, longstr locales
10 11 connection.start_ok      table client_properties, shortstr mechanism, longstr response, shortstr locale
10 20 connection.secure        longstr challenge
10 21 connection.secure_ok     longstr response
10 30 connection.tune          short channel_max, long frame_max, short heartbeat
10 31 connection.tune_ok       short channel_max, long frame_max, short heartbeat
10 40 connection.open          shortstr virtual_host, shortstr reserved_1, bit reserved_2
10 41 connection.open_ok       shortstr reserved_1
10 50 connection.close         short reply_code, shortstr reply_text, short class_id, short method_id
10 51 connection.close_ok
10 60 connection.blocked       shortstr reason
10 61 connection.unblocked
20 10 channel.open             shortstr reserved_1
20 11 channel.open_ok          longstr reserved_1
20 20 channel.flow             bit active
20 21 channel.flow_ok          bit active
20 40 channel.close            short reply_code, shortstr reply_text, short class_id, short method_id
20 41 channel.close_ok
40 10 exchange.declare         short reserved_1, shortstr exchange, shortstr type, bit passive, bit durable, bit auto_delete, bit internal, bit nowait, table arguments
40 11 exchange.declare_ok
40 20 exchange.delete          short reserved_1, shortstr exchange, bit if_unused, bit nowait
40 21 exchange.delete_ok
40 30 exchange.bind            short reserved_1, shortstr destination, shortstr source, shortstr routing_key, bit nowait, table arguments
40 31 exchange.bind_ok
40 40 exchange.unbind          short reserved_1, shortstr destination, shortstr source, shortstr routing_key, bit nowait, table arguments
40 51 exchange.unbind_ok
50 10 queue.declare            short reserved_1, shortstr queue, bit passive, bit durable, bit exclusive, bit auto_delete, bit nowait, table arguments
50 11 queue.declare_ok         shortstr queue, long message_count, long consumer_count
50 20 queue.bind               short reserved_1, shortstr queue, shortstr exchange, shortstr routing_key, bit nowait, table arguments
50 21 queue.bind_ok
50 30 queue.purge              short reserved_1, shortstr queue, bit nowait
50 31 queue.purge_ok           long message_count
50 40 queue.delete             short reserved_1, shortstr queue, bit if_unused, bit if_empty, bit nowait
50 41 queue.delete_ok          long message_count
50 50 queue.unbind             short reserved_1, shortstr queue, shortstr exchange, shortstr routing_key, table arguments
50 51 queue.unbind_ok
60 10 basic.qos                long prefetch_size, short prefetch_count, bit global_
60 11 basic.qos_ok
60 20 basic.consume            short reserved_1, shortstr queue, shortstr consumer_tag, bit no_local, bit no_ack, bit exclusive, bit nowait, table arguments
60 21 basic.consume_ok         shortstr consumer_tag
60 30 basic.cancel             shortstr consumer_tag, bit nowait
60 31 basic.cancel_ok          shortstr consumer_tag
60 40 basic.publish            short reserved_1, shortstr exchange, shortstr routing_key, bit mandatory, bit immediate
60 50 basic.return             short reply_code, shortstr reply_text, shortstr exchange, shortstr routing_key
60 60 basic.deliver            shortstr consumer_tag, longlong delivery_tag, bit redelivered, shortstr exchange, shortstr routing_key
60 70 basic.get                short reserved_1, shortstr queue, bit no_ack
60 71 basic.get_ok             longlong delivery_tag, bit redelivered, shortstr exchange, shortstr routing_key, long message_count
60 72 basic.get_empty          shortstr reserved_1
60 80 basic.ack                longlong delivery_tag, bit multiple
60 90 basic.reject             longlong delivery_tag, bit requeue
60 100 basic.recover_async     bit requeue
60 110 basic.recover           bit requeue
60 111 basic.recover_ok
60 120 basic.nack              longlong delivery_tag, bit multiple, bit requeue
85 10 confirm.select           bit nowait
85 11 confirm.select_ok
90 10 tx.select
90 11 tx.select_ok
90 20 tx.commit
90 21 tx.commit_ok
90 30 tx.rollback
90 31 tx.rollback_ok
"""


class MethodSpec:
    __slots__ = ("class_id", "method_id", "name", "handler", "fields", "has_content", "fast_decoder")

    def __init__(self, class_id: int, method_id: int, name: str, fields: list[tuple[str, str]]) -> None:
        self.class_id = class_id
        self.method_id = method_id
        self.name = name  # "basic.publish"
        self.handler = "method_" + name.replace(".", "_")  # what a protocol class defines to take it
        self.fields = fields  # [(argument, wire type)]
        self.has_content = name in ("basic.publish", "basic.return", "basic.deliver", "basic.get_ok")
        # Set by the codec for the busiest methods: their arguments and where they end.
        self.fast_decoder: Callable[[bytes], tuple[SimpleNamespace, int]] | None = None


def _parse(table: str) -> dict[tuple[int, int], MethodSpec]:
    methods = {}
    for line in table.strip().splitlines():
        class_id, method_id, name, *rest = line.split(None, 3)
        fields = []
        for argument in (rest[0].split(",") if rest else []):
            kind, field = argument.split()
            fields.append((field, kind))
        methods[(int(class_id), int(method_id))] = MethodSpec(int(class_id), int(method_id), name, fields)
    return methods


METHODS: dict[tuple[int, int], MethodSpec] = _parse(_METHODS)
BY_NAME: dict[str, MethodSpec] = {spec.name: spec for spec in METHODS.values()}

# The basic class's content properties, in flag order (bit 15 first).
BASIC_PROPERTIES: list[tuple[str, str]] = [
    ("content_type", "shortstr"), ("content_encoding", "shortstr"), ("headers", "table"),
    ("delivery_mode", "octet"), ("priority", "octet"), ("correlation_id", "shortstr"), ("reply_to", "shortstr"),
    ("expiration", "shortstr"), ("message_id", "shortstr"), ("timestamp", "timestamp"), ("type", "shortstr"),
    ("user_id", "shortstr"), ("app_id", "shortstr"), ("cluster_id", "shortstr"),
]
BASIC_CLASS = 60
