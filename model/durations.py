"""A length of time in words for people (events, the doctor's findings): seconds, then
minutes, hours and days as they grow. Defined once, for every layer that says one."""

from __future__ import annotations


def spoken(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
