"""Per-vhost permissions, as RabbitMQ has them: for each user (or group) and vhost,
three regular expressions saying which queues and exchanges the user may
*configure* (declare, delete), *write* (publish to; bind a queue to) and *read*
(consume, get, purge; bind from).  Pure: no I/O, no Twisted.

RabbitMQ's rules, followed exactly (rabbit_auth_backend_internal):

- a user with no entry for a vhost may not open a connection to it (530);
- a pattern is searched for, not anchored (``re:run(Name, Regex)``): ``orders``
  matches ``my-orders-eu``; write ``^orders$`` to mean that one name;
- ``""`` means ``"^$"``, which no resource name matches: nothing is granted;
- the nameless default exchange is checked under the name ``amq.default``.

Meshgate adds groups: an entry names a user or a group, and a principal is granted
what any of the entries naming it (its name, or one of its groups) grants.

This map sits beside :class:`gateway.auth.Authorizer` (the ActiveMQ-style map,
unchanged and vhost-blind); :class:`AccessControl` asks both and allows an action
only when both allow it, so neither map can widen what the other refuses.  See
docs/vhosts.md.

Entries come from the node's configuration and from commands (``meshgate vhost
permissions``: mesh-wide definitions of kind "permission", given to
:meth:`VhostPermissions.define` as they change). For a user (or group) and vhost the
configuration names, its entry stands and a command's is ignored on that node: the
configuration is authoritative, as for vhosts and their limits.

Patterns come from an admin (configuration or command); the names matched against
them come from clients but are at most 255 bytes (model.names), so the worst case
is bounded by how the operator wrote the pattern (avoid nested quantifiers such
as ``(a+)+``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from gateway.auth import Authorizer, Principal
from gateway.broker.exchanges import TOPIC_EXCHANGE
from model.definitions import compile_permission_pattern
from model.names import quoted

if TYPE_CHECKING:
    from gateway.broker.vhost_limits import VhostLimits

__all__ = [
    "AMQP_NEEDS",
    "DEFAULT_EXCHANGE",
    "OPERATIONS",
    "SERVER_NAMED_PREFIX",
    "AccessControl",
    "Need",
    "PermissionEntry",
    "VhostPermission",
    "VhostPermissions",
    "amqp_needs",
    "compile_permission_pattern",
    "destination_needs",
    "stomp_resource",
]

OPERATIONS = ("configure", "write", "read")
RESOURCE_KINDS = ("queue", "exchange")
# RabbitMQ checks the default exchange ("") under this name (its access-control guide).
DEFAULT_EXCHANGE = "amq.default"
# RabbitMQ names the queues it generates amq.gen-…; a temporary queue is checked under
# such a name so that the usual RabbitMQ grant ``^amq\.gen-`` covers it.
SERVER_NAMED_PREFIX = "amq.gen-"


class PermissionEntry(Protocol):
    """One ``[[vhosts.permissions]]`` entry, as the configuration gives it."""

    @property
    def user(self) -> str | None: ...

    @property
    def group(self) -> str | None: ...

    @property
    def vhost(self) -> str: ...

    @property
    def configure(self) -> str: ...

    @property
    def write(self) -> str: ...

    @property
    def read(self) -> str: ...


@dataclass(frozen=True)
class Need:
    """One permission an operation needs: ``operation`` on the queue or exchange ``name``."""

    operation: str
    kind: str
    name: str

    def __post_init__(self) -> None:
        if self.operation not in OPERATIONS:
            raise ValueError(f"unknown operation {self.operation!r}, expected one of {OPERATIONS}")
        if self.kind not in RESOURCE_KINDS:
            raise ValueError(f"unknown resource kind {self.kind!r}, expected one of {RESOURCE_KINDS}")
        if self.kind == "exchange" and not self.name:
            object.__setattr__(self, "name", DEFAULT_EXCHANGE)


class VhostPermission:
    """One entry with its three patterns compiled; ValueError if one does not compile."""

    __slots__ = ("user", "group", "vhost", "_patterns")

    def __init__(self, user: str | None, group: str | None, vhost: str,
                 configure: str, write: str, read: str) -> None:
        if (user is None) == (group is None):
            raise ValueError("a permission names either a user or a group")
        self.user = user
        self.group = group
        self.vhost = vhost
        self._patterns: dict[str, re.Pattern[str]] = {}
        for operation, pattern in zip(OPERATIONS, (configure, write, read), strict=True):
            try:
                self._patterns[operation] = compile_permission_pattern(pattern)
            except re.error as error:
                raise ValueError(f"{operation}: not a valid regular expression: {error}") from None

    @classmethod
    def of(cls, entry: PermissionEntry) -> VhostPermission:
        return cls(entry.user, entry.group, entry.vhost, entry.configure, entry.write, entry.read)

    def names(self, principal: Principal) -> bool:
        """Whether the entry is about ``principal`` (its name, or one of its groups)."""
        if self.user is not None:
            return principal.name == self.user
        return self.group in principal.groups

    def permits(self, operation: str, resource: str) -> bool:
        return self._patterns[operation].search(resource) is not None


Entry = TypeVar("Entry", bound=PermissionEntry)
Source = Literal["config", "command"]


def _who(entry: PermissionEntry | VhostPermission) -> tuple[str, str | None, str | None]:
    return entry.vhost, entry.user, entry.group


class VhostPermissions:
    """RabbitMQ's per-vhost configure/write/read map for the node: the configuration's
    entries, and those made by command (:meth:`define`) for the users and groups the
    configuration leaves out there.

    Disabled (``enabled=False``: the node does not authenticate) or with no entries,
    every principal may open every vhost and do everything in it: a node without vhost
    permissions behaves as before vhosts. The first entry made by command turns the
    map on (RabbitMQ's rule: a user without an entry for a vhost may not open it).
    Used from the reactor thread only, like :class:`Authorizer`.
    """

    def __init__(self, entries: Sequence[PermissionEntry], enabled: bool, *, cache_size: int = 4096) -> None:
        self._enabled = enabled
        self._configured_entries = tuple(entries)
        self._configured = [VhostPermission.of(entry) for entry in entries]
        self._configured_who = {_who(entry) for entry in self._configured}
        self._defined: list[VhostPermission] = []
        self._defined_entries: tuple[PermissionEntry, ...] = ()
        self._watchers: list[Callable[[], None]] = []
        # Producers publish to the same few resources over and over; searching every
        # pattern per message would be wasted work.
        self._cache: dict[tuple[Principal, str, str, str], bool] = {}
        self._cache_size = cache_size
        self._build()

    def _build(self) -> None:
        self._active = self._enabled and bool(self._configured or self._defined)
        self._by_vhost: dict[str, list[VhostPermission]] = {}
        for permission in (*self._configured, *self._defined):
            self._by_vhost.setdefault(permission.vhost, []).append(permission)
        self._cache.clear()  # answers of the map before
        for watcher in self._watchers:
            watcher()

    def define(self, entries: Sequence[Entry]) -> list[Entry]:
        """The entries made by command, all of them, as they are now (the earlier ones
        are replaced). Returns those ignored because the configuration has an entry for
        the same user (or group) and vhost; ValueError if a pattern does not compile
        (nothing changes then)."""
        ignored = [entry for entry in entries if _who(entry) in self._configured_who]
        self._defined = [VhostPermission.of(entry) for entry in entries if _who(entry) not in self._configured_who]
        self._defined_entries = tuple(entries)
        self._build()
        return ignored

    def watch(self, changed: Callable[[], None]) -> None:
        """Call ``changed`` whenever the entries change (:attr:`enabled` may have)."""
        self._watchers.append(changed)

    def entries(self) -> list[tuple[PermissionEntry, Source, bool]]:
        """Every entry with its source ("config" or "command") and whether it is in
        force here (False: a command's entry the configuration overrides)."""
        listed: list[tuple[PermissionEntry, Source, bool]] = [
            (entry, "config", True) for entry in self._configured_entries]
        listed += [(entry, "command", _who(entry) not in self._configured_who) for entry in self._defined_entries]
        return listed

    def configures(self, vhost: str, user: str | None, group: str | None) -> bool:
        """Whether the configuration has the entry of ``user`` (or ``group``) in ``vhost``."""
        return (vhost, user, group) in self._configured_who

    @property
    def authenticates(self) -> bool:
        """Whether the node knows who its clients are: without it no entry applies."""
        return self._enabled

    @property
    def enabled(self) -> bool:
        """False when every request is allowed, so callers may skip asking."""
        return self._active

    def _entries(self, principal: Principal, vhost: str) -> list[VhostPermission]:
        return [entry for entry in self._by_vhost.get(vhost, ()) if entry.names(principal)]

    def may_open(self, principal: Principal, vhost: str) -> bool:
        """Whether ``principal`` may connect to ``vhost``: it has at least one entry there,
        even one that grants nothing (RabbitMQ's check_vhost_access)."""
        return not self._active or bool(self._entries(principal, vhost))

    def allowed(self, principal: Principal, vhost: str, operation: str, resource: str) -> bool:
        """Whether ``principal`` may ``operation`` the queue or exchange ``resource`` of
        ``vhost`` (the name as AMQP gives it; the default exchange is ``amq.default``)."""
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}, expected one of {OPERATIONS}")
        if not self._active:
            return True
        key = (principal, vhost, operation, resource)
        result = self._cache.get(key)
        if result is None:
            result = any(entry.permits(operation, resource) for entry in self._entries(principal, vhost))
            if len(self._cache) >= self._cache_size:
                self._cache.pop(next(iter(self._cache)), None)  # oldest first
            self._cache[key] = result
        return result

    def grants(self, principal: Principal, vhost: str, needs: Sequence[Need]) -> bool:
        """Whether every one of ``needs`` is allowed (an operation needs all of its rows)."""
        return all(self.allowed(principal, vhost, need.operation, need.name) for need in needs)


# --- what each operation needs ---------------------------------------------

# RabbitMQ's table (access-control guide): method -> (operation, kind, field of the
# method's arguments naming the resource).  Passive declares need nothing.
AMQP_NEEDS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "exchange.declare": (("configure", "exchange", "exchange"),),
    "exchange.delete": (("configure", "exchange", "exchange"),),
    "exchange.bind": (("write", "exchange", "destination"), ("read", "exchange", "source")),
    "exchange.unbind": (("write", "exchange", "destination"), ("read", "exchange", "source")),
    "queue.declare": (("configure", "queue", "queue"),),
    "queue.delete": (("configure", "queue", "queue"),),
    "queue.bind": (("write", "queue", "queue"), ("read", "exchange", "exchange")),
    "queue.unbind": (("write", "queue", "queue"), ("read", "exchange", "exchange")),
    "queue.purge": (("read", "queue", "queue"),),
    "basic.publish": (("write", "exchange", "exchange"),),
    "basic.get": (("read", "queue", "queue"),),
    "basic.consume": (("read", "queue", "queue"),),
}


def amqp_needs(method: str, arguments: object, *, dead_letter_exchange: str | None = None) -> tuple[Need, ...]:
    """What the AMQP 0-9-1 ``method`` (``"queue.bind"``) needs, the resource names taken
    from its decoded ``arguments`` (``.queue``, ``.exchange``, ``.source``, ``.destination``).

    A queue.declare naming a dead-letter exchange also needs write on that exchange
    and read on the queue, as in RabbitMQ.
    """
    needs = [Need(operation, kind, getattr(arguments, field)) for operation, kind, field in AMQP_NEEDS[method]]
    if method == "queue.declare" and dead_letter_exchange is not None:
        queue = needs[0].name
        needs += [Need("write", "exchange", dead_letter_exchange), Need("read", "queue", queue)]
    return tuple(needs)


def stomp_resource(destination: str) -> tuple[str, str]:
    """(kind, name) of the queue or exchange a STOMP (or authorization-map) destination
    stands for, as RabbitMQ's STOMP plugin maps it: ``/queue/x`` is the queue ``x``;
    ``/topic/x`` the exchange ``amq.topic`` (the topic is its routing key, which
    these permissions do not look at); ``/exchange/x`` the exchange ``x``; a temporary
    queue ``/temp-queue/x`` (or ``/remote-temp-queue/x``) the server-named queue
    ``amq.gen-x``.  ValueError for anything else."""
    kind, separator, name = destination[1:].partition("/")
    if destination[:1] != "/" or not separator or not name:
        raise ValueError(f"not a destination: {destination[:80]!r}")
    if kind == "queue":
        return "queue", name
    if kind == "topic":
        return "exchange", TOPIC_EXCHANGE
    if kind == "exchange":
        return "exchange", name
    if kind in ("temp-queue", "remote-temp-queue"):
        return "queue", SERVER_NAMED_PREFIX + name
    raise ValueError(f"not a destination: {destination[:80]!r}")


def destination_needs(action: str, destination: str) -> tuple[Need, ...]:
    """What today's authorization question (``read``/``write``/``admin`` on a destination
    such as ``/queue/orders``) needs of the vhost map, as RabbitMQ's STOMP plugin asks:

    - ``/queue/Q``: the plugin declares Q on SEND and SUBSCRIBE, so both need
      configure on Q; SEND also needs write on the default exchange (``amq.default``),
      SUBSCRIBE read on Q; admin needs configure on Q.
    - ``/topic/T``: write or read on ``amq.topic``; admin (deleting a durable
      subscription) needs what creating it did, read on ``amq.topic``.
    - ``/temp-queue/N``: SEND (a reply) needs write on ``amq.default``; reading or
      administering one's own temporary queue needs configure and read on ``amq.gen-N``.
    - ``/exchange/X``: write → write on X, read → read on X, admin → configure on X.

    AMQP methods are asked through :func:`amqp_needs` instead: there a write on a
    queue means a binding, not a publish.
    """
    if action not in ("read", "write", "admin"):
        raise ValueError(f"unknown action {action!r}, expected read, write or admin")
    kind, name = stomp_resource(destination)
    if destination.startswith("/topic/"):
        return (Need("write" if action == "write" else "read", kind, name),)
    if kind == "exchange":
        return (Need({"read": "read", "write": "write", "admin": "configure"}[action], kind, name),)
    temporary = destination.startswith(("/temp-queue/", "/remote-temp-queue/"))
    if action == "write":
        publish = Need("write", "exchange", DEFAULT_EXCHANGE)
        return (publish,) if temporary else (Need("configure", kind, name), publish)
    if action == "read":
        return Need("configure", kind, name), Need("read", kind, name)
    return (Need("configure", kind, name),)


class AccessControl:
    """Both maps together: an action is allowed only when the ActiveMQ-style map
    (:class:`Authorizer`) allows it AND the vhost map grants every RabbitMQ permission
    it needs.  A map that is not configured allows everything, so with one map the
    node follows that map alone, and with neither it allows everything as before.
    """

    def __init__(self, authorizer: Authorizer, permissions: VhostPermissions) -> None:
        self.authorizer = authorizer
        self.permissions = permissions
        # An attribute, not a property: read on every publish. The vhost map changes when
        # a permission is made or cleared by command: it says so (watch).
        self.enabled = authorizer.enabled or permissions.enabled  # False: every request is allowed
        permissions.watch(self._permissions_changed)

    def _permissions_changed(self) -> None:
        self.enabled = self.authorizer.enabled or self.permissions.enabled

    def may_open(self, principal: Principal, vhost: str) -> bool:
        """The ActiveMQ-style map has no vhost dimension: only the vhost map decides."""
        return self.permissions.may_open(principal, vhost)

    def allowed(self, principal: Principal, vhost: str, action: str, destination: str,
                needs: Sequence[Need] | None = None) -> bool:
        """Whether ``principal`` may ``action`` (read/write/admin) ``destination`` in ``vhost``.

        ``needs`` are the vhost map's questions when the caller knows them better than
        the destination does (an AMQP method: :func:`amqp_needs`); by default they come
        from :func:`destination_needs`.
        """
        if not self.authorizer.allowed(principal, action, destination):
            return False
        if not self.permissions.enabled:
            return True
        asked = destination_needs(action, destination) if needs is None else needs
        return self.permissions.grants(principal, vhost, asked)


def admit(access: AccessControl, limits: VhostLimits, principal: Principal, vhost: str) -> str | None:
    """Whether a client of ``principal`` may open a connection to ``vhost``, STOMP or
    AMQP alike: None, and the connection is counted against the vhost's limit; else
    the refusal, in RabbitMQ's words (what AMQP's 530 says and its users know)."""
    if not access.may_open(principal, vhost):
        return f"access to vhost {quoted(vhost)} refused for user {quoted(principal.name)}"
    return limits.connect(vhost)
