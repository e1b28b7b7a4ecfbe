"""What the ``meshgate`` commands that ask a node share (meshgate/admin_cli.py and
meshgate/trace_cli.py): the shape of a command and the argparse types of more than one."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from typing import Any, Callable

from model.names import quoted
from model.requests import Request

VIEW, ACTION = "view", "action"

# command -> (help, kind, extra arguments, request from args, text from the result, node names and args)
Command = tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[Any], Request],
                Callable[[Any, dict, Any], str]]

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_THRESHOLD_S = 366 * 24 * 3600  # as model.requests.Seconds


def duration(text: str) -> float:
    """Seconds from "90", "90s", "5m", "2h" or "1d"."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _DURATION_UNITS else (text, "s")
    try:
        seconds = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_THRESHOLD_S:  # (NaN fails both comparisons)
        raise argparse.ArgumentTypeError(f"expected a duration such as 90s, 5m or 2h (at most a year), "
                                         f"got {quoted(text[:40])}")
    return seconds


def iso_time(text: str) -> float:
    """Epoch seconds from an ISO 8601 time; without a UTC offset, a UTC time."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a time such as 2026-11-28T18:00 or 2026-11-28T18:00+01:00, "
                                         f"got {quoted(text[:40])}") from None
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def moment(text: str) -> float:
    """Epoch seconds from a duration ago ("10m") or an ISO 8601 time (UTC without an offset)."""
    try:
        return time.time() - duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        return iso_time(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a duration ago (10m, 2h) or an ISO time "
                                         f"(2026-11-28T09:30), got {quoted(text[:40])}") from None
