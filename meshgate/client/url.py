"""Connection URLs of the failover client, in ActiveMQ's failover transport syntax.

``failover:(uri,...,uri)?option=value&...`` (also ``failover:uri,uri`` and ``failover://(…)``),
where each ``uri`` is a broker or a discovery of brokers:

- ``tcp://HOST:PORT`` (or ``stomp://HOST:PORT``): a node's STOMP listener;
- ``ssl://HOST:PORT`` (or ``stomp+ssl://``, ``stomp+tls://``): its TLS listener;
- ``udp://GROUP:PORT``: the nodes the mesh's multicast discovery announces
  (``?interface=ADDR&window=MS``);
- ``dns://NAME`` (SRV records ``_stomp._tcp.NAME``) or ``dns://NAME:PORT`` (also NAME's
  A records at PORT) (``?server=HOST:PORT&service=_x._tcp&tls=true``).

A single broker or discovery URI without ``failover:`` is accepted too. The options are
ActiveMQ's, with its defaults and meanings (:class:`FailoverOptions`); anything else is
a :class:`ValueError` naming what is wrong. Nothing here opens a socket.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qsl

Address = tuple[str, int]

POLICIES = ("round-robin", "random", "random-sticky", "first-element")
Policy = Literal["round-robin", "random", "random-sticky", "first-element"]

BROKER_SCHEMES = {"tcp": False, "stomp": False, "ssl": True, "stomp+ssl": True, "stomp+tls": True, "tls": True}
DISCOVERY_SCHEMES = ("udp", "dns")
DEFAULT_SERVICE = "_stomp._tcp"
DEFAULT_WINDOW_MS = 2500  # a little more than the nodes' default broadcast period (2000 ms)

# ActiveMQ failover options this client does not implement: named in the error, not silently ignored.
UNSUPPORTED = {
    "backup", "priorityBackup", "priorityURIs", "trackMessages", "maxCacheSize", "trackTransactionProducers",
    "updateURIsSupported", "updateURIsURL", "rebalanceUpdateURIs", "reconnectSupported",
    "warnAfterReconnectAttempts", "nested",
}


@dataclass(frozen=True)
class BrokerURI:
    """One broker: a STOMP listener, plain or TLS."""

    host: str
    port: int
    tls: bool = False

    @property
    def address(self) -> Address:
        return (self.host, self.port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'ssl' if self.tls else 'tcp'}://{host}:{self.port}"


@dataclass(frozen=True)
class DiscoveryURI:
    """Brokers found at connect time: ``udp`` (multicast announcements of the mesh) or ``dns``."""

    kind: Literal["udp", "dns"]
    host: str  # the multicast group (udp) or the DNS name (dns)
    port: int | None  # the group's port (udp); the STOMP port of the A records (dns), None for SRV only
    interface: str = "127.0.0.1"  # udp: the local interface to listen on, as mesh.discovery.interface
    window_ms: int = DEFAULT_WINDOW_MS  # udp: how long to listen before the first connect
    servers: tuple[Address, ...] = ()  # dns: servers to ask instead of the system's resolver
    service: str = DEFAULT_SERVICE  # dns: the SRV service label
    tls: bool = False  # dns: connect to the found addresses with TLS
    password: str | None = field(default=None, repr=False)  # udp: the mesh's cluster password

    def __str__(self) -> str:
        return f"{self.kind}://{self.host}" + (f":{self.port}" if self.port is not None else "")


Entry = BrokerURI | DiscoveryURI


@dataclass(frozen=True)
class FailoverOptions:
    """ActiveMQ's failover transport options (times in milliseconds), plus ``policy`` and
    ``connectionTimeout``.

    - ``maxReconnectAttempts``: passes over the broker list after a lost connection before
      giving up; -1 = forever, 0 = never reconnect.
    - ``startupMaxReconnectAttempts``: the same for the first connect; -1 = as
      ``maxReconnectAttempts``.
    - ``initialReconnectDelay`` / ``maxReconnectDelay`` / ``useExponentialBackOff`` /
      ``backOffMultiplier`` (alias ``reconnectDelayExponent``): the wait before the first
      reconnect pass and between passes.
    - ``timeout``: how long a send waits for a connection while disconnected, then raises;
      -1 = as long as reconnecting goes on.
    - ``randomize``: true picks brokers at random (policy ``random``), false in order
      (``first-element``); ``policy`` names one of :data:`POLICIES` instead.
    - ``connectionTimeout``: how long one connect attempt (TCP, TLS, CONNECTED) may take.
    """

    policy: Policy = "random"
    max_reconnect_attempts: int = -1
    startup_max_reconnect_attempts: int = -1
    initial_reconnect_delay_ms: int = 10
    max_reconnect_delay_ms: int = 30000
    use_exponential_backoff: bool = True
    backoff_multiplier: float = 2.0
    timeout_ms: int = -1
    connection_timeout_ms: int = 10000

    def startup_limit(self) -> int:
        """The pass limit of the first connect (ActiveMQ's calculateReconnectAttemptLimit)."""
        if self.startup_max_reconnect_attempts != -1:
            return self.startup_max_reconnect_attempts
        return self.max_reconnect_attempts

    def delays(self) -> DelaySequence:
        """The successive waits (seconds) before reconnect passes."""
        return DelaySequence(self)


class DelaySequence:
    """``initialReconnectDelay``, then times ``backOffMultiplier`` each pass (with
    ``useExponentialBackOff``) up to ``maxReconnectDelay``; in seconds."""

    def __init__(self, options: FailoverOptions) -> None:
        self.options = options
        self._next = float(options.initial_reconnect_delay_ms)

    def __iter__(self) -> DelaySequence:
        return self

    def __next__(self) -> float:
        current = min(self._next, float(self.options.max_reconnect_delay_ms))
        if self.options.use_exponential_backoff:
            self._next = min(self._next * self.options.backoff_multiplier, float(self.options.max_reconnect_delay_ms))
        return current / 1000.0


@dataclass(frozen=True)
class FailoverURL:
    """A parsed connection URL: the entries in order and the options."""

    entries: tuple[Entry, ...]
    options: FailoverOptions = field(default_factory=FailoverOptions)

    @property
    def brokers(self) -> tuple[BrokerURI, ...]:
        return tuple(e for e in self.entries if isinstance(e, BrokerURI))

    @property
    def discoveries(self) -> tuple[DiscoveryURI, ...]:
        return tuple(e for e in self.entries if isinstance(e, DiscoveryURI))


# -- parsing ---------------------------------------------------------------------------------


def parse_url(url: str) -> FailoverURL:
    """Parse a connection URL; raise :class:`ValueError` naming the problem."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("empty connection URL")
    text = url.strip()
    if not text.lower().startswith("failover:"):
        if "," in text.split("?", 1)[0]:
            raise ValueError(f"several URIs without failover:(…) in {url!r}; write failover:({text})")
        return FailoverURL((parse_entry(text),))
    rest = text[len("failover:"):]
    if rest.startswith("//"):
        rest = rest[2:]
    if rest.startswith("("):
        close = _matching_paren(rest, url)
        inner, tail = rest[1:close], rest[close + 1:]
        if tail and not tail.startswith("?"):
            raise ValueError(f"unexpected {tail!r} after the closing parenthesis in {url!r}")
        query = tail[1:]
    else:
        # failover:uri1,uri2?options — the options follow the last URI, as in ActiveMQ.
        inner, _, query = rest.partition("?")
    parts = [p.strip() for p in _split_top(inner)]
    if not parts or parts == [""]:
        raise ValueError(f"no broker URIs in {url!r}")
    if any(not p for p in parts):
        raise ValueError(f"an empty URI in the list of {url!r}")
    entries = tuple(parse_entry(p) for p in parts)
    return FailoverURL(entries, parse_options(query))


def _matching_paren(text: str, url: str) -> int:
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced parentheses in {url!r}")


def _split_top(text: str) -> list[str]:
    """Split at commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<path>[^?#]*)"
                  r"(?:\?(?P<query>[^#]*))?$")


def parse_entry(text: str) -> Entry:
    """One URI of the list: a broker (tcp, ssl) or a discovery (udp, dns)."""
    match = _URI.match(text.strip())
    if match is None:
        raise ValueError(f"not a URI: {text!r} (expected e.g. tcp://HOST:PORT)")
    scheme = match["scheme"].lower()
    if match["path"] not in ("", "/"):
        raise ValueError(f"unexpected path {match['path']!r} in {text!r}")
    if scheme in BROKER_SCHEMES:
        host, port = _host_port(match["authority"], text, port_required=True)
        if match["query"]:
            raise ValueError(f"options on a broker URI are not supported: {text!r} "
                             "(put failover options after the closing parenthesis)")
        assert port is not None
        return BrokerURI(host, port, BROKER_SCHEMES[scheme])
    if scheme == "udp":
        return _udp(match["authority"], _query(match["query"] or "", text), text)
    if scheme == "dns":
        return _dns(match["authority"], _query(match["query"] or "", text), text)
    known = ", ".join(sorted(BROKER_SCHEMES) + list(DISCOVERY_SCHEMES))
    raise ValueError(f"unknown scheme {scheme!r} in {text!r} (known: {known})")


def _host_port(authority: str, text: str, port_required: bool) -> tuple[str, int | None]:
    if "@" in authority:
        raise ValueError(f"credentials in a URI are not supported: {text!r} (pass login and passcode)")
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise ValueError(f"unclosed IPv6 address in {text!r}")
        host, rest = authority[1:end], authority[end + 1:]
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad address {authority!r} in {text!r}")
        port_text = rest[1:] if rest else None
    else:
        host, sep, port_text = authority.rpartition(":")
        if not sep:
            host, port_text = authority, None
    if not host:
        raise ValueError(f"no host in {text!r}")
    if port_text is None or port_text == "":
        if port_required:
            raise ValueError(f"no port in {text!r} (write HOST:PORT)")
        return host, None
    return host, _port(port_text, text)


def _port(value: str, text: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise ValueError(f"bad port {value!r} in {text!r} (1-65535)")
    return int(value)


def _query(query: str, text: str) -> dict[str, str]:
    if not query:
        return {}
    result: dict[str, str] = {}
    for item in query.split("&"):
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"option {item!r} has no value in {text!r} (write name=value)")
        name, value = parse_qsl(item, keep_blank_values=True)[0]
        if name in result:
            raise ValueError(f"option {name!r} given twice in {text!r}")
        result[name] = value
    return result


def _udp(authority: str, options: dict[str, str], text: str) -> DiscoveryURI:
    group, port = _host_port(authority, text, port_required=True)
    try:
        multicast = ipaddress.IPv4Address(group).is_multicast
    except ValueError:
        multicast = False
    if not multicast:
        raise ValueError(f"udp:// needs an IPv4 multicast group (224.0.0.0-239.255.255.255), not {group!r}, "
                         f"in {text!r}")
    interface = options.pop("interface", "127.0.0.1")
    try:
        ipaddress.IPv4Address(interface)
    except ValueError:
        raise ValueError(f"interface must be an IPv4 address, not {interface!r}, in {text!r}") from None
    window = _int(options.pop("window", str(DEFAULT_WINDOW_MS)), "window", text, minimum=1)
    password = options.pop("password", None)
    _no_more(options, text, ("interface", "window", "password"))
    return DiscoveryURI("udp", group, port, interface=interface, window_ms=window, password=password)


def _dns(authority: str, options: dict[str, str], text: str) -> DiscoveryURI:
    name, port = _host_port(authority, text, port_required=False)
    if not re.fullmatch(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?", name):
        raise ValueError(f"bad DNS name {name!r} in {text!r}")
    servers: list[Address] = []
    for item in filter(None, options.pop("server", "").split(",")):
        host, server_port = _host_port(item.strip(), text, port_required=False)
        servers.append((host, server_port or 53))
    service = options.pop("service", DEFAULT_SERVICE)
    if not re.fullmatch(r"_[A-Za-z0-9-]+\._(tcp|udp)", service):
        raise ValueError(f"service must look like _stomp._tcp, not {service!r}, in {text!r}")
    tls = _bool(options.pop("tls", "false"), "tls", text)
    _no_more(options, text, ("server", "service", "tls"))
    return DiscoveryURI("dns", name.rstrip("."), port, servers=tuple(servers), service=service, tls=tls)


def _no_more(options: dict[str, str], text: str, known: tuple[str, ...]) -> None:
    if options:
        name = next(iter(options))
        raise ValueError(f"unknown option {name!r} in {text!r} (known: {', '.join(known)})")


def _bool(value: str, name: str, text: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"{name} must be true or false, not {value!r}, in {text!r}")


def _int(value: str, name: str, text: str, minimum: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise ValueError(f"{name} must be an integer, not {value!r}, in {text!r}") from None
    if number < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {number}, in {text!r}")
    return number


def _float(value: str, name: str, text: str, minimum: float) -> float:
    try:
        number = float(value.strip())
    except ValueError:
        raise ValueError(f"{name} must be a number, not {value!r}, in {text!r}") from None
    if not number >= minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}, in {text!r}")
    return number


def parse_options(query: str) -> FailoverOptions:
    """The failover options after ``?``, by ActiveMQ's names."""
    text = "?" + query
    options = _query(query, text)
    for name in options:
        if name in UNSUPPORTED or name.startswith("nested."):
            raise ValueError(f"the ActiveMQ failover option {name!r} is not supported by meshgate.client")
    if "backOffMultiplier" in options and "reconnectDelayExponent" in options:
        raise ValueError("give backOffMultiplier or its alias reconnectDelayExponent, not both")
    if "randomize" in options and "policy" in options:
        raise ValueError("give randomize or policy, not both (randomize=true is policy=random, "
                         "randomize=false is policy=first-element)")
    values: dict[str, object] = {}
    if "randomize" in options:
        values["policy"] = "random" if _bool(options.pop("randomize"), "randomize", text) else "first-element"
    if "policy" in options:
        policy = options.pop("policy").strip().lower()
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
        values["policy"] = policy
    integers = {
        "maxReconnectAttempts": ("max_reconnect_attempts", -1),
        "startupMaxReconnectAttempts": ("startup_max_reconnect_attempts", -1),
        "initialReconnectDelay": ("initial_reconnect_delay_ms", 0),
        "maxReconnectDelay": ("max_reconnect_delay_ms", 0),
        "timeout": ("timeout_ms", -1),
        "connectionTimeout": ("connection_timeout_ms", 1),
    }
    for name, (attribute, minimum) in integers.items():
        if name in options:
            values[attribute] = _int(options.pop(name), name, text, minimum)
    if "useExponentialBackOff" in options:
        values["use_exponential_backoff"] = _bool(options.pop("useExponentialBackOff"), "useExponentialBackOff", text)
    for name in ("backOffMultiplier", "reconnectDelayExponent"):
        if name in options:
            values["backoff_multiplier"] = _float(options.pop(name), name, text, 1.0)
    known = ("randomize", "policy", *integers, "useExponentialBackOff", "backOffMultiplier", "reconnectDelayExponent")
    _no_more(options, text, known)
    result = FailoverOptions(**values)  # type: ignore[arg-type]
    if result.max_reconnect_delay_ms < result.initial_reconnect_delay_ms:
        raise ValueError(f"maxReconnectDelay ({result.max_reconnect_delay_ms}) is less than initialReconnectDelay "
                         f"({result.initial_reconnect_delay_ms})")
    return result
