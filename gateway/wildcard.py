"""ActiveMQ-style destination wildcards: ``.`` separates elements, ``*`` matches one
element, ``>`` matches one or more trailing elements (``orders.>`` matches ``orders.eu``
and ``orders.eu.paid`` but not ``orders``)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable

__all__ = ["compile_pattern", "has_wildcard"]


def has_wildcard(pattern: str) -> bool:
    return "*" in pattern or ">" in pattern


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """Return a predicate telling whether a destination name matches ``pattern``."""
    if not has_wildcard(pattern):
        return pattern.__eq__
    parts = []
    elements = pattern.split(".")
    for index, element in enumerate(elements):
        if element == ">" and index == len(elements) - 1:
            parts.append(r"[^.]+(?:\.[^.]+)*")
        elif element == "*":
            parts.append(r"[^.]+")
        else:
            parts.append(re.escape(element))
    regex = re.compile(r"\.".join(parts) + r"\Z")
    return lambda name: regex.match(name) is not None
