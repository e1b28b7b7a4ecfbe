"""The ``meshgate`` commands about message journeys (docs/journeys.md): ``trace`` reads
one message's journey; ``traces`` finds traced messages by queue, header, body text or
time; ``trace-next`` traces the next messages on the nodes asked, for
a while; ``trace-on`` and ``trace-off`` switch tracing of a destination on and off on
every node of the mesh, by a definition that ends by itself."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from management import format as fmt
from management.journey_view import format_journey
from meshgate.cli_args import ACTION, VIEW, Command, duration, iso_time, moment
from meshgate.vhost_permissions_cli import BadArguments
from model.definitions import TRACE
from model.journey_requests import MAX_HITS, JourneySearch, header_filter_problem
from model.journeys import JourneySummary
from model.names import quoted
from model.requests import ALL, DefineTrace, DeleteDefinition, JourneySteps, TraceNext


def _trace_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message_id", metavar="MESSAGE_ID",
                        help="the message's id (its message-id header; ID.N: that copy alone)")


def _destination_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("destination", metavar="DESTINATION", help="/queue/NAME or /topic/NAME")


def _trace_next_args(parser: argparse.ArgumentParser) -> None:
    _destination_arg(parser)
    parser.add_argument("--count", type=int, metavar="N", help="trace N messages at most on each node (0: stop)")
    parser.add_argument("--every", type=int, default=1, metavar="K",
                        help="one message in K (default 1: each; 100 is a 1%% sample)")
    parser.add_argument("--for", dest="for_s", type=duration, default=600.0, metavar="DURATION",
                        help="for this long at most (default 10m, at most 7d)")


def _rate(text: str) -> float:
    """A sampling rate: more than 0, at most 1."""
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0 < rate <= 1:  # (NaN fails it)
        raise argparse.ArgumentTypeError(f"expected a rate above 0 and at most 1 (0.01: one in 100), "
                                         f"got {quoted(text[:40])}")
    return rate


def _trace_on_args(parser: argparse.ArgumentParser) -> None:
    _destination_arg(parser)
    parser.add_argument("--rate", type=_rate, default=1.0, metavar="R",
                        help="the share traced: one message in round(1/R) (default 1: each; 0.01 is a 1%% sample)")
    end = parser.add_mutually_exclusive_group()
    end.add_argument("--for", dest="for_s", type=duration, metavar="DURATION",
                     help="for this long (default 10m, at most 7d)")
    end.add_argument("--until", type=iso_time, metavar="TIME", help="until then (ISO 8601; UTC unless it says)")


def _trace_on(args: argparse.Namespace) -> DefineTrace:
    for_s = args.for_s if args.for_s is not None or args.until is not None else 600.0
    return DefineTrace(destination=args.destination, rate=args.rate, for_s=for_s, until=args.until,
                       vhost=args.vhost)


def _header_filter(text: str) -> str:
    problem = header_filter_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem}, got {quoted(text[:40])}")
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


TRACE_COMMANDS: dict[str, Command] = {
    "trace": (
        "a traced message's journey across the mesh, step by step (docs/journeys.md; needs admin)", VIEW,
        _trace_args, lambda a: JourneySteps(ids=[a.message_id], node=a.node or "*"),
        lambda r, names, a: format_journey(a.message_id, r)),
    "traces": (
        "find traced messages by queue, header, body text or time, on every node (docs/journeys.md; needs admin)",
        VIEW, traces_args, traces_request, lambda r, names, a: format_traces(r)),
    "trace-next": (
        "trace what producers send to a destination from now on, on every node (docs/journeys.md; needs admin)",
        ACTION, _trace_next_args,
        lambda a: TraceNext(node=a.node or ALL, destination=a.destination, count=a.count, every=a.every,
                            for_s=a.for_s, vhost=a.vhost),
        lambda r, names, a: fmt.format_done(r, names)),
    "trace-on": (
        "trace a destination on every node of the mesh, now and after restarts, until a set end "
        "(a definition; docs/journeys.md; needs admin)", ACTION, _trace_on_args, _trace_on,
        lambda r, names, a: fmt.format_done([r], names)),
    "trace-off": (
        "stop tracing a destination that trace-on traces, on every node (needs admin)", ACTION,
        _destination_arg, lambda a: DeleteDefinition(kind=TRACE, name=a.destination, vhost=a.vhost),
        lambda r, names, a: fmt.format_done([r], names)),
}
