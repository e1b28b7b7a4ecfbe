"""The one rule for names a client chooses: queues, topics, exchanges, client ids,
durable subscription names and virtual hosts. Every protocol, the API and
the CLI check a name with it, so a name one of them accepts every other can address.

A name is 1 to 255 bytes of UTF-8 (AMQP carries names as short strings) of printable
characters: no control characters (NUL, CR, LF, TAB, …), no Unicode format or
separator characters other than the ASCII space. A STOMP header, an AMQP short
string, a JSON document and a terminal line all carry such a name as it is."""

from __future__ import annotations

MAX_NAME_BYTES = 255
QUOTE_LIMIT = 60  # characters of a client's value quoted in an error or a log line


class InvalidName(ValueError):
    """A name the rule refuses; the text says why, for a human, with the name
    quoted and cut short (it comes from the client)."""


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid name, or None when it is."""
    if not name:
        return "it is empty"
    if not name.isprintable():
        bad = next(char for char in name if not char.isprintable())
        return f"it holds the character U+{ord(bad):04X}; names are printable characters only"
    if len(name) > MAX_NAME_BYTES // 4 and len(name.encode()) > MAX_NAME_BYTES:
        return f"it is {len(name.encode())} bytes long; names are at most {MAX_NAME_BYTES} bytes of UTF-8"
    return None


def quoted(value: str | bytes, limit: int = QUOTE_LIMIT) -> str:
    """A client's value as error texts and log lines show it: its repr, cut to ``limit``
    characters (what a client chose never makes a line longer than that)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} in all)"


def check_name(name: str, what: str = "name") -> str:
    """``name`` if valid, else :class:`InvalidName` saying which ``what`` (queue
    name, topic, exchange, client-id, …) and why."""
    problem = name_problem(name)
    if problem is not None:
        raise InvalidName(f"invalid {what} {quoted(name)}: {problem}")
    return name


DEFAULT_VHOST = "/"  # the vhost of every name a client gives without one, and of a data dir from before vhosts


def check_vhost_name(name: str) -> str:
    """``name`` if it can name a virtual host (the one rule: an AMQP client carries it
    in connection.open's short string, a STOMP client in CONNECT's ``host`` header),
    else :class:`InvalidName` saying why."""
    return check_name(name, "vhost name")
