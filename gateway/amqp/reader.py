"""AMQP 0-9-1 frames in, without I/O: a reader fed bytes hands back events in order,
whole commands (a method, with its content when it carries one) among them.

Every byte a client sends is hostile until decoded: the decoders (gateway.amqp.codec,
gateway.amqp.fields) raise DecodeError, and nothing else, whatever the bytes, and the
reader turns that into the AmqpError the specification asks for."""

from __future__ import annotations

import struct
from types import SimpleNamespace

from gateway.amqp.codec import decode_fields, decode_properties, decode_publish
from gateway.amqp.fields import FAILURES, DecodeError, reason
from gateway.amqp.spec import (
    BASIC_CLASS,
    BY_NAME,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    CONNECTION_CLASS,
    FRAME_BODY,
    FRAME_END,
    FRAME_ERROR,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    METHODS,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    PROTOCOL_HEADER,
    SYNTAX_ERROR,
    UNEXPECTED_FRAME,
    AmqpError,
    MethodSpec,
)

# The frame layouts, as gateway.amqp.codec has them. Made here, not imported: CPython 3.11
# compiles a call on an imported name (``_FRAME_HEAD.unpack_from(...)``) as an attribute
# load and a call, not as a method call, and the frame loop is ~8% slower for it.
_FRAME_HEAD = struct.Struct(">BHI")
_METHOD_HEAD = struct.Struct(">HH")
_CONTENT_HEAD = struct.Struct(">HHQH")


# -- events -------------------------------------------------------------------------------


class ProtocolHeader:
    """The 8 bytes a client opens with; ``ok`` if they are AMQP 0-9-1's."""

    __slots__ = ("ok", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.ok = raw == PROTOCOL_HEADER


class Command:
    """A method, with its content (properties and body) when it carries one."""

    __slots__ = ("channel", "spec", "args", "properties", "body", "raw_properties")

    def __init__(self, channel: int, spec: MethodSpec, args: SimpleNamespace,
                 properties: dict | None = None, body: bytes | None = None,
                 raw_properties: tuple[int, bytes] | None = None) -> None:
        self.channel = channel
        self.spec = spec
        self.args = args
        self.properties = properties
        self.body = body
        # The properties as they came (flags, bytes): delivered as they are, as RabbitMQ does.
        self.raw_properties = raw_properties

    def __repr__(self) -> str:
        return f"Command({self.channel}, {self.spec.name}, {vars(self.args)})"


class Heartbeat:
    __slots__ = ()


class ContentRefused:
    """A content on ``channel`` was refused (too large): its frames are skipped."""

    __slots__ = ("error",)

    def __init__(self, error: AmqpError) -> None:
        self.error = error


HEARTBEAT = Heartbeat()


# -- reading ------------------------------------------------------------------------------


class _Partial:
    __slots__ = ("channel", "spec", "args", "properties", "raw", "size", "chunks", "received", "refused")

    def __init__(self, channel: int, spec: MethodSpec, args: SimpleNamespace) -> None:
        self.channel = channel
        self.spec = spec
        self.args = args
        self.properties: dict | None = None
        self.raw: tuple[int, bytes] | None = None
        self.size = -1  # body size, once the header frame came
        self.chunks: list[bytes] = []
        self.received = 0
        self.refused = False


_PUBLISHES_KEPT = 256  # the basic.publish arguments a connection's reader keeps decoded
_LOST = 1 << 62  # bytes to pass over once the frame boundaries are lost: all that comes
_PUBLISH = BY_NAME["basic.publish"]
_PUBLISH_IDS = _METHOD_HEAD.pack(_PUBLISH.class_id, _PUBLISH.method_id)
_OPEN = BY_NAME["connection.open"]


class FrameReader:
    """Feed it bytes; it returns events in order. Raises AmqpError for what no
    connection can go on after (a malformed frame, a frame out of order).

    Frames on a channel over ``channel_max`` are refused as soon as their head is
    read; with ``closed_until_open``, so is any frame off channel 0 until the
    client's connection.open (before it, nothing a client sends on a channel is in
    turn, and the reader would hold contents of up to ``max_body`` for it)."""

    def __init__(self, *, frame_max: int = 131072, max_body: int = 100 * 1024 * 1024,
                 expect_header: bool = True, channel_max: int = 65535, closed_until_open: bool = False) -> None:
        self.frame_max = frame_max
        self.max_body = max_body
        self.channel_max = channel_max
        self._channel_limit = 0 if closed_until_open else channel_max
        self._buffer = bytearray()
        self._expect_header = expect_header
        self._skip = 0  # bytes to pass over after an error: the rest of a refused frame, or all (_LOST)
        self._closing = False
        self._content: dict[int, _Partial] = {}
        self._publishes: dict[bytes, SimpleNamespace] = {}  # basic.publish method frames -> their arguments

    def feed(self, data: bytes) -> list:
        # Frames are read from bytes, whose slices are the bytes the events hold: what an
        # earlier read left unfinished (less than a frame) is joined to this one first.
        buffer = self._buffer
        if buffer:
            buffer += data
            data = bytes(buffer)
            buffer.clear()
        events: list = []
        if self._expect_header:
            if len(data) < 8 and PROTOCOL_HEADER.startswith(data):
                buffer += data
                return events  # the rest of a right header may follow
            self._expect_header = False
            header = ProtocolHeader(data[:8])
            events.append(header)
            if not header.ok:
                return events
            data = data[8:]
        position = 0
        length = len(data)
        if self._skip:  # after an error, so that the client's close-ok can still be read
            position = min(self._skip, length)
            self._skip -= position
        frame_max = self.frame_max
        try:
            while length - position >= 7:
                kind, channel, size = _FRAME_HEAD.unpack_from(data, position)
                if size + 8 > frame_max:
                    position = self._lose(length)
                    raise AmqpError(FRAME_ERROR, f"a frame of {size + 8} bytes is over frame_max ({frame_max})")
                if channel > self._channel_limit:
                    position = self._pass_over(position, 8 + size, length)
                    if self._closing:
                        continue
                    raise self._off_limits(channel)
                end = position + 7 + size
                if end >= length:
                    break
                if data[end] != FRAME_END:
                    position = self._lose(length)
                    raise AmqpError(FRAME_ERROR, f"a frame does not end with 0xCE (got {data[end]:#04x})")
                if kind == FRAME_METHOD and data[position + 7:position + 11] == _PUBLISH_IDS:
                    taken = self._whole_publish(data, position, end, length, channel, events)
                    if taken:
                        position = taken
                        continue
                payload = data[position + 7:end]
                position = end + 1
                if kind == FRAME_METHOD:
                    self._method(channel, payload, events)
                elif kind == FRAME_HEADER:
                    self._header(channel, payload, events)
                elif kind == FRAME_BODY:
                    self._body(channel, payload, events)
                elif kind == FRAME_HEARTBEAT:
                    if channel:
                        raise AmqpError(FRAME_ERROR, f"a heartbeat frame on channel {channel}, not 0")
                    events.append(HEARTBEAT)
                else:
                    raise AmqpError(FRAME_ERROR, f"unknown frame type {kind}")
        finally:
            if position < length:
                buffer += memoryview(data)[position:]
        return events

    def _lose(self, length: int) -> int:
        """Where frames begin is lost: nothing more is read (nor held). Where to stop reading now."""
        self._skip = _LOST
        return length

    def _pass_over(self, position: int, size: int, length: int) -> int:
        """A refused frame of ``size`` bytes at ``position`` is passed over, what of it is
        still to come too. Where to go on reading now."""
        taken = min(size, length - position)
        self._skip = size - taken
        return position + taken

    def _off_limits(self, channel: int) -> AmqpError:
        if self._channel_limit < self.channel_max:
            return AmqpError(UNEXPECTED_FRAME, f"a frame on channel {channel} before connection.open")
        return AmqpError(CHANNEL_ERROR, f"a frame on channel {channel}, over channel_max ({self.channel_max})")

    def _whole_publish(self, data: bytes, start: int, end: int, length: int, channel: int,
                       events: list) -> int:
        """A basic.publish whose header and single body frame are all in the data read,
        taken in one go (the usual case): where the next frame starts, or 0 to take
        it frame by frame (anything unusual, which the general path then judges)."""
        header_at = end + 1
        if not channel or channel in self._content or length - header_at < 7 + _CONTENT_HEAD.size + 1:
            return 0
        kind, header_channel, header_size = _FRAME_HEAD.unpack_from(data, header_at)
        header_end = header_at + 7 + header_size
        if kind != FRAME_HEADER or header_channel != channel or header_end >= length or \
                header_size + 8 > self.frame_max or data[header_end] != FRAME_END:
            return 0
        class_id, _, size, flags = _CONTENT_HEAD.unpack_from(data, header_at + 7)
        if class_id != BASIC_CLASS or size > self.max_body:
            return 0
        body_at = header_end + 1
        if size:
            if length - body_at < 8:
                return 0
            kind, body_channel, body_size = _FRAME_HEAD.unpack_from(data, body_at)
            body_end = body_at + 7 + body_size
            if kind != FRAME_BODY or body_channel != channel or body_size != size or body_end >= length or \
                    body_size + 8 > self.frame_max or data[body_end] != FRAME_END:
                return 0
            body = data[body_at + 7:body_end]
            after = body_end + 1
        else:
            body, after = b"", body_at
        method = data[start + 7:end]
        raw = data[header_at + 7 + _CONTENT_HEAD.size:header_end]
        try:
            args = self._publishes.get(method) or self._publish_args(method)
            properties = decode_properties(flags, raw, 0)
        except FAILURES:
            return 0
        if args is None:
            return 0
        events.append(Command(channel, _PUBLISH, args, properties, body, (flags, raw)))
        return after

    def _publish_args(self, method: bytes) -> SimpleNamespace | None:
        """A basic.publish's arguments, kept for the next one with the same (publishers
        mostly repeat theirs; handlers only read them). None if it is malformed."""
        args, used = decode_publish(method)
        if used != len(method):
            return None
        publishes = self._publishes
        if len(publishes) >= _PUBLISHES_KEPT:
            publishes.clear()
        publishes[method] = args
        return args

    def _method(self, channel: int, payload: bytes, events: list) -> None:
        if channel in self._content:
            raise AmqpError(UNEXPECTED_FRAME, f"a method frame on channel {channel} while its content is unfinished")
        if len(payload) < 4:
            raise AmqpError(FRAME_ERROR, "a method frame shorter than its class and method ids")
        class_id, method_id = _METHOD_HEAD.unpack_from(payload)
        spec = METHODS.get((class_id, method_id))
        if spec is None:
            raise AmqpError(NOT_IMPLEMENTED, f"unknown method {class_id}.{method_id}", channel, class_id, method_id)
        if (class_id == CONNECTION_CLASS) != (channel == 0):
            # The connection's methods go on channel 0, and only they do (so no content is held for channel 0).
            raise AmqpError(COMMAND_INVALID, f"{spec.name} on channel {channel}", 0, class_id, method_id)
        try:
            fast = spec.fast_decoder
            args, end = fast(payload) if fast is not None else decode_fields(spec.fields, payload, 4)
        except FAILURES as error:
            raise AmqpError(SYNTAX_ERROR, f"{spec.name}: malformed arguments ({reason(error)})", channel, class_id,
                            method_id) from None
        if end != len(payload):
            raise AmqpError(SYNTAX_ERROR, f"{spec.name}: {len(payload) - end} bytes after its arguments", channel,
                            class_id, method_id)
        if spec.has_content:
            self._content[channel] = _Partial(channel, spec, args)
        else:
            if spec is _OPEN:
                self._channel_limit = self.channel_max
            events.append(Command(channel, spec, args))

    def _header(self, channel: int, payload: bytes, events: list) -> None:
        partial = self._content.get(channel)
        if partial is None or partial.size >= 0:
            raise AmqpError(UNEXPECTED_FRAME, f"a content header frame on channel {channel} with no method before it")
        try:
            class_id, _, size, flags = _CONTENT_HEAD.unpack_from(payload)
            if class_id != BASIC_CLASS:
                raise DecodeError(f"content class {class_id}, not basic (60)")
            partial.properties = decode_properties(flags, payload, _CONTENT_HEAD.size)
            partial.raw = (flags, payload[_CONTENT_HEAD.size:])
        except FAILURES as error:
            raise AmqpError(FRAME_ERROR, f"malformed content header on channel {channel} ({reason(error)})") from None
        partial.size = size
        if size > self.max_body:
            partial.refused = True
            events.append(ContentRefused(AmqpError(
                PRECONDITION_FAILED, f"message of {size} bytes is over the node's limit of {self.max_body} bytes",
                channel, partial.spec.class_id, partial.spec.method_id)))
        if size == 0:
            self._complete(partial, events)

    def _body(self, channel: int, payload: bytes, events: list) -> None:
        partial = self._content.get(channel)
        if partial is None or partial.size < 0:
            raise AmqpError(UNEXPECTED_FRAME, f"a content body frame on channel {channel} with no header before it")
        partial.received += len(payload)
        if partial.received > partial.size:
            raise AmqpError(FRAME_ERROR, f"content on channel {channel} longer than its header said ({partial.size})")
        if not partial.refused:
            partial.chunks.append(payload)
        if partial.received == partial.size:
            self._complete(partial, events)

    def _complete(self, partial: _Partial, events: list) -> None:
        del self._content[partial.channel]
        if partial.refused:
            return
        chunks = partial.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        events.append(Command(partial.channel, partial.spec, partial.args, partial.properties, body, partial.raw))

    def forget_channel(self, channel: int) -> None:
        """The channel closed: a content half received on it is dropped."""
        self._content.pop(channel, None)

    def connection_closing(self) -> None:
        """connection.close went: only channel 0 counts from now on (the spec: the rest
        is discarded), so contents half received are dropped, and frames on channels
        passed over, not held nor refused."""
        self._content.clear()
        self._channel_limit = 0
        self._closing = True
