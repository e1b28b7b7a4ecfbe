"""Whole numbers a client writes as text (STOMP headers, AMQP short strings)."""

from __future__ import annotations

# More digits than any bound here has (2**63 - 1 has 19): int() refuses over 4,300
# digits, and a longer number is out of range anyway.
_MAX_DIGITS = 20


def whole_number(raw: str, largest: int) -> int:
    """``raw`` as a whole number from 0 to ``largest``, else -1. ASCII digits only:
    ``str.isdigit`` takes '²', which ``int`` refuses."""
    if raw.isascii() and raw.isdigit() and len(raw) <= _MAX_DIGITS:
        value = int(raw)
        if value <= largest:
            return value
    return -1
