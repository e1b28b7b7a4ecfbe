"""The options, requests and output of ``meshgate doctor`` (docs/doctor.md), ``trace``
and ``trace-next`` (docs/journeys.md); meshgate/admin_cli.py lists them with the other
commands."""

from __future__ import annotations

import argparse
from typing import Any

from management import format as fmt
from management.doctor import format_diagnosis
from meshgate.vhost_permissions_cli import BadArguments
from model.names import quoted
from model.requests import ApplyRemedy, BrowsePage, Diagnosis, Request

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_THRESHOLD_S = 366 * 24 * 3600  # as model.requests_doctor.Seconds


def _duration(text: str) -> float:
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


def doctor_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--older-than", type=_duration, metavar="DURATION",
                        help="how old anything must be to be a finding (sets the three below; e.g. 5m)")
    parser.add_argument("--waiting", type=_duration, metavar="DURATION",
                        help="a backlog with no local consumer, while consumers wait elsewhere (default: the "
                             "node's [doctor] waiting_s, 60s)")
    parser.add_argument("--in-doubt", type=_duration, metavar="DURATION",
                        help="messages held for an absent node (default: [doctor] in_doubt_s, 60s)")
    parser.add_argument("--unacked", type=_duration, metavar="DURATION",
                        help="a consumer's oldest unacked delivery (default: [doctor] unacked_s, 5m)")
    parser.add_argument("--fix", metavar="FINDING_ID",
                        help="do the remedy of this finding (its id, in brackets) now, as its fix: command would "
                             "(needs admin; audited as that command, from the doctor)")
    parser.add_argument("--yes", action="store_true",
                        help="with --fix: confirm a remedy that drops or disconnects something")


def doctor_request(args: argparse.Namespace) -> Request:
    if args.fix is not None:
        return ApplyRemedy(finding=args.fix, confirm=args.yes)
    if args.yes:
        raise BadArguments("--yes confirms a --fix: give the finding's id with --fix")
    return Diagnosis(older_than_s=args.older_than, waiting_s=args.waiting, in_doubt_s=args.in_doubt,
                     unacked_s=args.unacked)


def format_doctor(result: Any, names: dict[str, str], args: argparse.Namespace) -> str:
    if args.fix is None:
        return format_diagnosis(result)
    # The remedy's own result: what its action (a move, a forget, a browse, …) answers.
    if isinstance(result, list) and result and isinstance(result[0], BrowsePage):
        return fmt.format_browse(result, names)
    return fmt.format_done(result if isinstance(result, list) else [result], names)


def trace_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message_id", metavar="MESSAGE_ID",
                        help="the message's id (its message-id header; ID.N: that copy alone)")


def trace_next_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("destination", metavar="DESTINATION", help="/queue/NAME or /topic/NAME")
    parser.add_argument("--count", type=int, metavar="N", help="trace N messages at most on each node (0: stop)")
    parser.add_argument("--every", type=int, default=1, metavar="K",
                        help="one message in K (default 1: each; 100 is a 1%% sample)")
    parser.add_argument("--for", dest="for_s", type=_duration, default=600.0, metavar="DURATION",
                        help="for this long at most (default 10m, at most 7d)")
