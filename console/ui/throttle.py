"""The sign-in throttle: after ``per_user`` failed sign-ins for one user name, or
``per_address`` from one address, within ``window`` seconds of the first
(``CONSOLE_LOGIN_THROTTLE``), sign-in for that name or from that address is refused
until the window ends — password guessing gets a few tries per window, not thousands.

Counts live in Django's cache (in-process memory by default: one daphne process is one
throttle; several processes each keep their own unless ``CACHES`` names a shared one). A
user name that does not exist counts like one that does, so the answers tell nothing
about which names exist. Attempts refused by the throttle are not counted: the window
ends when it said it would."""

from __future__ import annotations

import hashlib
import math
import time

from django.conf import settings
from django.core.cache import cache


def _counters(username: str, address: str | None) -> list[tuple[str, int]]:
    """Cache keys (bounded: the name is hashed) with the number of failures each allows."""
    limits = settings.CONSOLE_LOGIN_THROTTLE
    counters = [("console-login:user:" + hashlib.sha256(username.encode()).hexdigest(), limits["per_user"])]
    if address:
        counters.append(("console-login:address:" + address, limits["per_address"]))
    return counters


def retry_after(username: str, address: str | None) -> int:
    """Seconds until sign-in for ``username`` from ``address`` is allowed again; 0: now."""
    now = time.time()
    waits = [math.ceil(ends - now) for key, limit in _counters(username, address)
             for failures, ends in [cache.get(key, (0, now))] if failures >= limit and ends > now]
    return max(waits, default=0)


def failed(username: str, address: str | None) -> None:
    now = time.time()
    for key, _ in _counters(username, address):
        failures, ends = cache.get(key, (0, now))
        if ends <= now:  # a new window starts with this failure
            failures, ends = 0, now + settings.CONSOLE_LOGIN_THROTTLE["window"]
        cache.set(key, (failures + 1, ends), timeout=math.ceil(ends - now))


def succeeded(username: str) -> None:
    """The user's own count starts over; the address's does not (one known password must
    not buy an address more guesses at other names)."""
    cache.delete(_counters(username, None)[0][0])
