"""The options, request and output of ``meshgate doctor`` (docs/doctor.md), and of its
``--fix``; meshgate/admin_cli.py lists it with the other commands."""

from __future__ import annotations

import argparse
from typing import Any

from management import format as fmt
from management.doctor import format_diagnosis
from meshgate.cli_args import duration
from meshgate.vhost_permissions_cli import BadArguments
from model.requests import ApplyRemedy, BrowsePage, Diagnosis, Request


def doctor_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--older-than", type=duration, metavar="DURATION",
                        help="how old anything must be to be a finding (sets the three below; e.g. 5m)")
    parser.add_argument("--waiting", type=duration, metavar="DURATION",
                        help="a backlog with no local consumer, while consumers wait elsewhere (default: the "
                             "node's [doctor] waiting_s, 60s)")
    parser.add_argument("--in-doubt", type=duration, metavar="DURATION",
                        help="messages held for an absent node (default: [doctor] in_doubt_s, 60s)")
    parser.add_argument("--unacked", type=duration, metavar="DURATION",
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
