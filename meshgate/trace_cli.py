"""The ``meshgate`` commands about message journeys (docs/journeys.md): ``trace`` reads
one message's journey; ``trace-next`` traces the next messages on the nodes asked, for
a while; ``trace-on`` and ``trace-off`` switch tracing of a destination on and off on
every node of the mesh, by a definition that ends by itself."""

from __future__ import annotations

import argparse
import datetime

from management import format as fmt
from management.journey_view import format_journey
from meshgate.cli_args import ACTION, VIEW, Command, duration
from model.definitions import TRACE
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


def _moment(text: str) -> float:
    """Epoch seconds from an ISO 8601 time; without a UTC offset, a UTC time."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a time such as 2026-11-28T18:00 or 2026-11-28T18:00+01:00, "
                                         f"got {quoted(text[:40])}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _trace_on_args(parser: argparse.ArgumentParser) -> None:
    _destination_arg(parser)
    parser.add_argument("--rate", type=_rate, default=1.0, metavar="R",
                        help="the share traced: one message in round(1/R) (default 1: each; 0.01 is a 1%% sample)")
    end = parser.add_mutually_exclusive_group()
    end.add_argument("--for", dest="for_s", type=duration, metavar="DURATION",
                     help="for this long (default 10m, at most 7d)")
    end.add_argument("--until", type=_moment, metavar="TIME", help="until then (ISO 8601; UTC unless it says)")


def _trace_on(args: argparse.Namespace) -> DefineTrace:
    for_s = args.for_s if args.for_s is not None or args.until is not None else 600.0
    return DefineTrace(destination=args.destination, rate=args.rate, for_s=for_s, until=args.until,
                       vhost=args.vhost)


TRACE_COMMANDS: dict[str, Command] = {
    "trace": (
        "a traced message's journey across the mesh, step by step (docs/journeys.md; needs admin)", VIEW,
        _trace_args, lambda a: JourneySteps(ids=[a.message_id], node=a.node or "*"),
        lambda r, names, a: format_journey(a.message_id, r)),
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
