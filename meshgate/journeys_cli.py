"""The ``meshgate`` commands about message journeys (docs/journeys.md): ``trace ID`` (one
message's journey), ``trace-next DESTINATION`` (trace the next messages, or a sample) and
``traces`` (find traced messages by queue, header, body or time), and the durations and
moments their options (and ``doctor``'s) take."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

from meshgate.vhost_permissions_cli import BadArguments
from model.journey_requests import MAX_HITS, JourneySearch
from model.journeys import JourneySummary
from model.names import quoted
from model.requests import ALL

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_THRESHOLD_S = 366 * 24 * 3600  # as model.requests.Seconds


def duration(text: str) -> float:
    """Seconds from "90", "90s", "5m", "2h" or "1d" (an argparse type)."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _DURATION_UNITS else (text, "s")
    try:
        seconds = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_THRESHOLD_S:  # (NaN fails both comparisons)
        raise argparse.ArgumentTypeError(f"expected a duration such as 90s, 5m or 2h (at most a year), "
                                         f"got {quoted(text[:40])}")
    return seconds


def moment(text: str) -> float:
    """Epoch seconds from a duration ago ("10m") or an ISO 8601 time (UTC without an offset)."""
    try:
        return time.time() - duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration ago (10m, 2h) or an ISO time "
                                         f"(2026-11-28T09:30), got {quoted(text[:40])}") from None
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def trace_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message_id", metavar="MESSAGE_ID",
                        help="the message's id (its message-id header; ID.N: that copy alone)")


def trace_next_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("destination", metavar="DESTINATION", help="/queue/NAME or /topic/NAME")
    parser.add_argument("--count", type=int, metavar="N", help="trace N messages at most on each node (0: stop)")
    parser.add_argument("--every", type=int, default=1, metavar="K",
                        help="one message in K (default 1: each; 100 is a 1%% sample)")
    parser.add_argument("--for", dest="for_s", type=duration, default=600.0, metavar="DURATION",
                        help="for this long at most (default 10m, at most 7d)")


def _header_filter(text: str) -> str:
    if "=" not in text[1:]:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {quoted(text[:40])}")
    return text


def _hits(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_HITS:
        raise argparse.ArgumentTypeError(f"expected a count from 1 to {MAX_HITS}, got {quoted(text[:40])}")
    return int(text)


def traces_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", metavar="QUEUE", help="sent to this queue or put in it")
    parser.add_argument("--header", type=_header_filter, metavar="NAME=VALUE",
                        help="received with this header, of this value (whole)")
    parser.add_argument("--body", metavar="TEXT", help="TEXT in its body's first bytes ([journeys] body_preview)")
    parser.add_argument("--since", type=moment, metavar="WHEN", help="first recorded since: 10m (ago) or ISO time")
    parser.add_argument("--until", type=moment, metavar="WHEN", help="first recorded until: 10m (ago) or ISO time")
    parser.add_argument("--limit", type=_hits, default=50, metavar="N",
                        help=f"at most N, newest first (1 to {MAX_HITS}; default 50)")


def traces_request(args: argparse.Namespace) -> JourneySearch:
    try:
        return JourneySearch(node=args.node or ALL, queue=args.queue, vhost=args.vhost, header=args.header,
                             body=args.body, since=args.since, until=args.until, limit=args.limit)
    except ValueError as error:  # (its checks across fields: since after until)
        raise BadArguments(str(error)) from None


def format_traces(hits: list[JourneySummary]) -> str:
    """One line per journey found: when, its id (for ``meshgate trace``), the node, where it
    was going, its last step and how many. Client text is shown as a repr when not printable."""
    if not hits:
        return "no traced message matches (records age out: [journeys] max_age_s)"
    lines = []
    for hit in hits:
        when = datetime.fromtimestamp(hit.time, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        destination = hit.destination if hit.destination.isprintable() else quoted(hit.destination)
        lines.append(f"{when}  {hit.root}  {hit.node_name}  {destination}  {hit.last_step}  "
                     f"{hit.steps} step{'s' if hit.steps != 1 else ''}")
    return "\n".join(lines)
