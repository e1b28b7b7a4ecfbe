"""Sans-I/O STOMP frame codec: feed bytes, get frames; no sockets, no reactor.

The parser accepts LF or CR LF line ends, any number of EOLs between frames
(heart-beats), ``content-length`` bodies that contain NULs, frames split at any
byte and many frames per read. Anything malformed or over a limit raises
:class:`FrameError`, and only that.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from gateway.broker.message import DELIVERY_HEADERS

__all__ = [
    "Frame",
    "FrameError",
    "FrameParser",
    "encode_frame",
    "escape_header",
    "message_head",
    "HEARTBEAT",
]

HEARTBEAT = b"\n"

# Which escape table applies: 1.0 has none; 1.2 adds \r to 1.1's set.
_UNESCAPES = {
    "1.0": None,
    "1.1": {"n": "\n", "c": ":", "\\": "\\"},
    "1.2": {"n": "\n", "c": ":", "\\": "\\", "r": "\r"},
}
_ESCAPE_11 = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c"})
_ESCAPE_12 = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"})
ESCAPES = {"1.0": None, "1.1": _ESCAPE_11, "1.2": _ESCAPE_12}
# What a header cannot carry, per version, even escaped: 1.0 escapes nothing, so a line
# end would start another header line; 1.1 has no escape for CR; a NUL ends the frame
# in every version; and a lone surrogate (only JSON can make one) is not UTF-8.
_UNCARRIED = {
    "1.0": re.compile("[\r\n\0\ud800-\udfff]"),
    "1.1": re.compile("[\r\0\ud800-\udfff]"),
    "1.2": re.compile("[\0\ud800-\udfff]"),
}
_RECEIPT_LINE = re.compile(r"^receipt:(.*)$", re.MULTILINE)
_ESCAPE_SEQUENCE = re.compile(r"\\(.?)", re.DOTALL)
# CONNECT and CONNECTED are never escaped, so pre-1.1 clients can negotiate.
_UNESCAPED_COMMANDS = frozenset({"CONNECT", "CONNECTED", "STOMP"})
_CONNECT_COMMANDS = frozenset({"CONNECT", "STOMP"})


class FrameError(Exception):
    """A frame that cannot be accepted. ``receipt`` is the receipt header of the
    offending frame when it could be read, so the ERROR can carry ``receipt-id``."""

    def __init__(self, message: str, receipt: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.receipt = receipt
        # Complete frames that came before the bad one in the same read: a
        # client is owed their effects (and receipts) before the ERROR.
        self.frames: list[Frame] = []


class Frame:
    __slots__ = ("command", "headers", "body")

    def __init__(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.command = command
        self.headers = {} if headers is None else headers
        self.body = body

    def __repr__(self) -> str:
        return f"Frame({self.command!r}, {self.headers!r}, {self.body[:64]!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Frame)
            and self.command == other.command
            and self.headers == other.headers
            and self.body == other.body
        )


def escape_header(text: str, version: str) -> str:
    table = ESCAPES[version]
    return text if table is None else text.translate(table)


def _carry_value(text: str, version: str) -> str:
    """``text`` as a header value to a ``version`` client: escaped, and any character
    the version cannot carry replaced by U+FFFD (for a value that must be sent)."""
    if not text.isprintable():  # the rare case, and the only one that can hold such a character
        text = _UNCARRIED[version].sub("\ufffd", text)
    return escape_header(text, version)


def _header_lines(headers: Mapping[str, str], version: str) -> str:
    """``headers`` as header lines ("name:value\\n" each) that a ``version`` client reads
    back exactly; a header the version cannot carry is left out, as is, in 1.0, one whose
    name holds a ':' (it would read as another name). Checked in C over the joined lines:
    only headers holding a character to escape or drop pay for a second pass."""
    lines = "".join([f"{k}:{v}\n" for k, v in headers.items()])
    count = len(headers)
    if (lines.count("\n") == count and lines.count(":") == count and "\\" not in lines and "\r" not in lines
            and "\0" not in lines):
        return lines  # the common case: nothing to escape, nothing any version cannot carry
    table = ESCAPES[version]
    if table is None:
        if (lines.count("\n") == count and "\r" not in lines and "\0" not in lines
                and ":" not in "".join(headers)):
            return lines
    else:
        lines = "".join([f"{k.translate(table)}:{v.translate(table)}\n" for k, v in headers.items()])
        if "\0" not in lines and (version == "1.2" or "\r" not in lines):
            return lines
    return _header_lines(_carried(headers, version), version)


def _carried(headers: Mapping[str, str], version: str) -> dict[str, str]:
    uncarried = _UNCARRIED[version].search
    colon_ends_name = version == "1.0"
    return {k: v for k, v in headers.items()
            if not (uncarried(k) or uncarried(v) or (colon_ends_name and ":" in k))}


def message_head(destination: str, message_id: str, headers: Mapping[str, str], length: int,
                 version: str) -> bytes:
    """A MESSAGE's header block after its subscription line, up to the body: the broker's
    destination, message-id and content-length around the message's own headers (as
    :func:`_header_lines` writes them), none named like one of :data:`DELIVERY_HEADERS`:
    whatever a publisher put in the message under those names is never sent, so it can
    neither frame the body nor shadow the broker's."""
    if not DELIVERY_HEADERS.isdisjoint(headers):
        headers = {k: v for k, v in headers.items() if k not in DELIVERY_HEADERS}
    if not destination.isprintable() or ":" in destination or "\\" in destination:
        destination = _carry_value(destination, version)
    lines = _header_lines(headers, version) if headers else ""  # none: what most AMQP publishers send
    try:
        return f"destination:{destination}\nmessage-id:{message_id}\n{lines}content-length:{length}\n\n".encode()
    except UnicodeEncodeError:  # a lone surrogate, which the checks in C let by: this pass drops it
        lines = _header_lines(_carried(headers, version), version)
        return f"destination:{destination}\nmessage-id:{message_id}\n{lines}content-length:{length}\n\n".encode()


def encode_frame(
    command: str,
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    body: bytes = b"",
    version: str = "1.2",
) -> bytes:
    """Serialise one frame. Headers are escaped as ``version`` requires."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    table = None if command in _UNESCAPED_COMMANDS else ESCAPES[version]
    if table is None:
        lines = [f"{k}:{v}" for k, v in items]
    else:
        lines = [f"{k.translate(table)}:{v.translate(table)}" for k, v in items]
    head = command + "\n" + "".join(line + "\n" for line in lines) + "\n"
    return head.encode() + body + b"\0"


class FrameParser:
    """Incremental parser. ``version`` selects header unescaping and may be
    changed by the protocol once CONNECT has negotiated it."""

    __slots__ = (
        "version",
        "max_frame_size",
        "max_headers",
        "max_header_length",
        "_buffer",
        "_pending",
        "_scan_from",
        "stopped_at_connect",
    )

    def __init__(
        self,
        version: str = "1.0",
        max_frame_size: int = 100 * 1024 * 1024,
        max_headers: int = 1000,
        max_header_length: int = 10240,
    ) -> None:
        self.version = version
        self.max_frame_size = max_frame_size
        self.max_headers = max_headers
        self.max_header_length = max_header_length
        self._buffer = bytearray()
        # (frame, body_start, content_length or -1) once a header block is parsed
        # and the body is still incomplete, so headers are never parsed twice.
        self._pending: tuple[Frame, int, int, int] | None = None
        # Where the next NUL search starts, so a large body arriving in small
        # reads is scanned once, not once per read.
        self._scan_from = 0
        self.stopped_at_connect = False

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame]:
        """Consume ``data`` and return every frame it completes (possibly none).
        After a CONNECT or STOMP frame it stops and sets ``stopped_at_connect``;
        feed ``b""`` once the version is known to get the frames after it."""
        self.stopped_at_connect = False
        buf = self._buffer
        buf += data
        frames: list[Frame] = []
        pos = 0
        end = len(buf)
        view = memoryview(buf)  # slices of it copy once, not twice
        try:
            pos = self._parse_frames(buf, view, end, frames)
        except FrameError as error:
            error.frames = frames
            raise
        finally:
            view.release()
        if pos:
            del buf[:pos]
            if self._pending is not None:
                frame, body_start, length, head_size = self._pending
                self._pending = (frame, body_start - pos, length, head_size)
                self._scan_from -= pos
        return frames

    def _parse_frames(self, buf: bytearray, view: memoryview, end: int, frames: list[Frame]) -> int:
        pos = 0
        while pos < end:
            if self._pending is None:
                # EOLs between frames are heart-beats or ActiveMQ-style trailers.
                byte = buf[pos]
                if byte == 10:
                    pos += 1
                    continue
                if byte == 13:
                    if pos + 1 >= end:
                        break
                    if buf[pos + 1] != 10:
                        raise FrameError("stray carriage return between frames")
                    pos += 2
                    continue
                head_end, body_start = _find_header_end(buf, pos)
                if head_end < 0:
                    if buf.find(b"\0", pos) >= 0:
                        raise FrameError("frame ended (NUL) before the blank line that ends its headers")
                    if end - pos > self._max_header_block():
                        raise FrameError("frame header block exceeds the maximum header size")
                    break
                try:
                    text = str(view[pos:head_end], "utf-8")
                except UnicodeDecodeError:
                    raise FrameError("frame header block is not valid UTF-8") from None
                frame, length = self._parse_head(text)
                head_size = body_start - pos
                if length >= 0 and head_size + length > self.max_frame_size:
                    raise self._too_big(frame)
                self._pending = (frame, body_start, length, head_size)
                self._scan_from = body_start
            frame, body_start, length, head_size = self._pending
            if length >= 0:
                stop = body_start + length
                if stop >= end:
                    break
                if buf[stop] != 0:
                    raise FrameError(
                        "frame body is not terminated by NUL after content-length bytes",
                        frame.headers.get("receipt"),
                    )
            else:
                stop = buf.find(b"\0", self._scan_from)
                if stop < 0:
                    if head_size + end - body_start > self.max_frame_size:
                        raise self._too_big(frame)
                    self._scan_from = end
                    break
                if head_size + stop - body_start > self.max_frame_size:
                    raise self._too_big(frame)
            frame.body = bytes(view[body_start:stop])
            frames.append(frame)
            self._pending = None
            pos = stop + 1
            if frame.command in _CONNECT_COMMANDS:
                # What follows CONNECT is escaped per the version it negotiates:
                # stop here until the protocol has set it.
                self.stopped_at_connect = True
                break
        return pos

    def _too_big(self, frame: Frame) -> FrameError:
        return FrameError(
            f"frame exceeds the maximum frame size of {self.max_frame_size} bytes", frame.headers.get("receipt")
        )

    def _max_header_block(self) -> int:
        return (self.max_headers + 1) * (self.max_header_length + 2)

    def _parse_head(self, text: str) -> tuple[Frame, int]:
        if "\0" in text:
            raise FrameError("frame ended (NUL) before the blank line that ends its headers")
        lines = text.split("\n")
        if "\r" in text:
            lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        command = lines[0]
        if not command or not command.isalpha():
            raise FrameError(f"malformed command line {command[:40]!r}")
        if len(lines) - 1 > self.max_headers:
            raise FrameError(f"frame has more than {self.max_headers} headers")
        try:
            headers = self._parse_headers(command, lines, text)
        except FrameError as error:
            if error.receipt is None:  # so the ERROR can still say which frame failed
                match = _RECEIPT_LINE.search(text)
                error.receipt = match.group(1).rstrip("\r") if match else None
            raise
        frame = Frame(command, headers)
        length = -1
        raw_length = headers.get("content-length")
        if raw_length is not None:
            if not (raw_length.isascii() and raw_length.isdigit()):
                raise FrameError(
                    f"content-length {raw_length[:20]!r} is not a number", headers.get("receipt")
                )
            # int() refuses over 4,300 digits; 18 are more than any frame size needs.
            length = int(raw_length) if len(raw_length) <= 18 else self.max_frame_size + 1
            if length > self.max_frame_size:
                raise FrameError(
                    f"content-length {raw_length[:20]!r} exceeds the maximum frame size of {self.max_frame_size} bytes",
                    headers.get("receipt"),
                )
        return frame, length

    def _parse_headers(self, command: str, lines: list[str], text: str) -> dict[str, str]:
        if "\\" not in text and len(text) <= self.max_header_length:
            # The common case, in C: no escapes, and no line can be over the limit.
            pairs = [line.split(":", 1) for line in lines[1:]]
            try:
                headers = dict(pairs)
            except ValueError:  # a line with no colon; the slow path names it
                pass
            else:
                if len(headers) == len(pairs):
                    return headers
        unescape = None if command in _UNESCAPED_COMMANDS else _UNESCAPES[self.version]
        headers = {}
        max_length = self.max_header_length
        for line in lines[1:]:
            if len(line) > max_length:
                raise FrameError(f"header exceeds the maximum header length of {max_length}")
            name, colon, value = line.partition(":")
            if not colon:
                raise FrameError(f"malformed header line {line[:40]!r}: no colon")
            if unescape is not None and ("\\" in name or "\\" in value):
                name = _unescape(name, unescape)
                value = _unescape(value, unescape)
            if name not in headers:  # repeated headers: the first one wins
                headers[name] = value
        return headers


def _find_header_end(buf: bytearray, pos: int) -> tuple[int, int]:
    """Return (end of header block, start of body) or (-1, -1) when incomplete.
    The block ends at the first empty line, whether lines end in LF or CR LF."""
    lf = buf.find(b"\n\n", pos)
    # Look for the CR LF form only before the LF one, so a read holding many
    # frames is not scanned to its end for every frame.
    crlf = buf.find(b"\n\r\n", pos) if lf < 0 else buf.find(b"\n\r\n", pos, lf)
    if crlf >= 0:
        return crlf, crlf + 3
    if lf >= 0:
        return lf, lf + 2
    return -1, -1


def _unescape(text: str, table: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        try:
            return table[match.group(1)]
        except KeyError:
            raise FrameError(f"undefined escape sequence \\{match.group(1)} in header") from None

    return _ESCAPE_SEQUENCE.sub(replace, text)
