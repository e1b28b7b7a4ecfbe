"""Authentication (who is connecting) and authorization (what they may do).

Knows nothing of STOMP: the protocol layer hands over login/passcode strings and
destination names such as ``/queue/orders.eu`` and gets back a :class:`Principal`
or a yes/no.  Authorization follows ActiveMQ's authorization map: the groups
allowed to do something to a destination are the union over every entry whose
pattern matches it; no matching entry means nobody.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.wildcard import compile_pattern

__all__ = [
    "ACTIONS",
    "ANONYMOUS",
    "DESTINATION_KINDS",
    "Authenticator",
    "Authorizer",
    "Principal",
    "destination_matcher",
    "hash_password",
    "is_password_hash",
    "validate_destination_pattern",
    "verify_password",
]

ALGORITHM = "pbkdf2_sha256"
ITERATIONS = 200_000
SALT_BYTES = 16
# A hash with more iterations than this would stall the event loop for minutes
# on every failed login; treat it as a typo rather than as paranoia.
MAX_ITERATIONS = 10_000_000

ACTIONS = frozenset({"read", "write", "admin"})
DESTINATION_KINDS = ("/queue/", "/topic/", "/temp-queue/", "/exchange/")


# Read-only members (properties), so that the configuration's frozen dataclasses match.
class UserConfig(Protocol):
    """A configured user, as the node's configuration gives it."""

    @property
    def password(self) -> str: ...

    @property
    def groups(self) -> frozenset[str]: ...


class AuthorizationEntry(Protocol):
    """One entry of the authorization map: who may read, write or administer a destination pattern."""

    @property
    def destination(self) -> str: ...

    @property
    def read(self) -> frozenset[str]: ...

    @property
    def write(self) -> frozenset[str]: ...

    @property
    def admin(self) -> frozenset[str]: ...


@dataclass(frozen=True)
class Principal:
    name: str
    groups: frozenset[str] = frozenset()


# Anonymous mode is all-or-nothing (config refuses authorization entries without
# users), so this group only shows up in logs and in the console.
ANONYMOUS = Principal("anonymous", frozenset({"anonymous"}))


# --- passwords -------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, iterations: int = ITERATIONS) -> str:
    """Return ``pbkdf2_sha256$<iterations>$<salt_b64>$<hash_b64>`` for ``password``.

    ``iterations`` exists for tests; production hashes use the default.
    """
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between 1 and {MAX_ITERATIONS}")
    salt = os.urandom(SALT_BYTES)
    digest = hashlib.pbkdf2_hmac("sha256", _encode(password), salt, iterations)
    return f"{ALGORITHM}${iterations}${_b64(salt)}${_b64(digest)}"


def _encode(text: str) -> bytes:
    # surrogatepass: never let an odd passcode turn into an exception mid-CONNECT.
    return text.encode("utf-8", "surrogatepass")


def _parse_hash(value: str) -> tuple[int, bytes, bytes] | None:
    parts = value.split("$")
    if len(parts) != 4 or parts[0] != ALGORITHM:
        return None
    if not re.fullmatch(r"[1-9][0-9]{0,8}", parts[1]):
        return None
    iterations = int(parts[1])
    try:
        salt = base64.b64decode(parts[2], validate=True)
        digest = base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return None
    if iterations > MAX_ITERATIONS or len(salt) < 8 or len(digest) != 32:
        return None
    return iterations, salt, digest


def is_password_hash(value: object) -> bool:
    return isinstance(value, str) and _parse_hash(value) is not None


def verify_password(password: str, encoded: str) -> bool:
    """Slow (one PBKDF2 run); :class:`Authenticator` caches successes."""
    parsed = _parse_hash(encoded)
    if parsed is None:
        return False
    iterations, salt, digest = parsed
    computed = hashlib.pbkdf2_hmac("sha256", _encode(password), salt, iterations)
    return hmac.compare_digest(computed, digest)


# --- authentication --------------------------------------------------------


class Authenticator:
    """Checks login/passcode pairs against the configured users.

    With no users configured every connection is :data:`ANONYMOUS`.  A cache miss
    costs one PBKDF2 run (tens of milliseconds): the caller may run
    :meth:`authenticate` in a thread, it is thread-safe.
    """

    def __init__(self, users: Mapping[str, UserConfig], *, cache_size: int = 10_000) -> None:
        self._hashes = {name: user.password for name, user in users.items()}
        self._principals = {name: Principal(name, frozenset(user.groups)) for name, user in users.items()}
        # Unknown logins burn as many iterations as a real check so that response
        # time does not reveal which user names exist.
        parsed = [_parse_hash(h) for h in self._hashes.values()]
        self._decoy_iterations = max((p[0] for p in parsed if p), default=ITERATIONS)
        self._decoy_salt = os.urandom(SALT_BYTES)
        # The cache holds a keyed digest, never the passcode: a memory dump does not
        # hand out passwords directly.  Only successes go in, so guessing stays slow.
        self._cache_key = os.urandom(32)
        self._verified: dict[tuple[str, bytes], Principal] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def anonymous(self) -> bool:
        return not self._hashes

    def authenticate(self, login: str | None, passcode: str | None) -> Principal | None:
        """Return who is connecting, or None to refuse the connection."""
        if not self._hashes:
            return ANONYMOUS
        if login is None or passcode is None:
            return None
        tag = hmac.new(self._cache_key, _encode(passcode), hashlib.sha256).digest()
        principal = self._verified.get((login, tag))
        if principal is not None:
            return principal
        encoded = self._hashes.get(login)
        if encoded is None:
            hashlib.pbkdf2_hmac("sha256", _encode(passcode), self._decoy_salt, self._decoy_iterations)
            return None
        if not verify_password(passcode, encoded):
            return None
        principal = self._principals[login]
        with self._lock:
            if len(self._verified) >= self._cache_size:
                self._verified.pop(next(iter(self._verified)))  # oldest first
            self._verified[(login, tag)] = principal
        return principal


# --- authorization ---------------------------------------------------------


def validate_destination_pattern(pattern: str) -> None:
    """Raise ValueError explaining what is wrong with an authorization pattern."""
    if pattern == ">":
        return
    kind = next((k for k in DESTINATION_KINDS if pattern.startswith(k)), None)
    if kind is None:
        raise ValueError(f"must start with {', '.join(DESTINATION_KINDS)} or be '>', got {pattern!r}")
    elements = pattern[len(kind) :].split(".")
    for index, element in enumerate(elements):
        if not element:
            raise ValueError(f"empty name element in {pattern!r}")
        if element != ">" and element != "*" and ("*" in element or ">" in element):
            raise ValueError(f"wildcards must be whole '.'-separated elements in {pattern!r}")
        if element == ">" and index != len(elements) - 1:
            raise ValueError(f"'>' may only be the last element in {pattern!r}")


def destination_matcher(pattern: str) -> Callable[[str], bool]:
    """Predicate for full destinations (``/queue/a.b``); the kind prefix must match exactly."""
    validate_destination_pattern(pattern)
    if pattern == ">":
        return lambda destination: True
    kind = next(k for k in DESTINATION_KINDS if pattern.startswith(k))
    name_matches = compile_pattern(pattern[len(kind) :])
    return lambda d: d.startswith(kind) and name_matches(d[len(kind) :])


class Authorizer:
    """ActiveMQ authorization-map semantics; see docs/configuration.md.

    Disabled (``enabled=False``) or with no entries, everything is allowed.
    """

    def __init__(
        self,
        entries: Sequence[AuthorizationEntry],
        enabled: bool,
        *,
        cache_size: int = 4096,
    ) -> None:
        self._active = enabled and bool(entries)
        self._rules = [
            (
                destination_matcher(e.destination),
                {"read": e.read, "write": e.write, "admin": e.admin},
            )
            for e in entries
        ]
        # Producers send to the same few destinations over and over; matching every
        # pattern per SEND would be wasted work.
        self._cache: dict[tuple[Principal, str, str], bool] = {}
        self._cache_size = cache_size

    @property
    def enabled(self) -> bool:
        """False when every request is allowed, so callers may skip asking."""
        return self._active

    def allowed(self, principal: Principal, action: str, destination: str) -> bool:
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}, expected one of {sorted(ACTIONS)}")
        if not self._active:
            return True
        key = (principal, action, destination)
        result = self._cache.get(key)
        if result is None:
            permitted: set[str] = set()
            for matches, groups in self._rules:
                if matches(destination):
                    permitted.update(groups[action])
            result = principal.name in permitted or not permitted.isdisjoint(principal.groups)
            if len(self._cache) >= self._cache_size:
                self._cache.pop(next(iter(self._cache)), None)
            self._cache[key] = result
        return result
