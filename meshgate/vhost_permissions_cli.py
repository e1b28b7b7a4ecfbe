"""``meshgate vhost permissions``: RabbitMQ's set_permissions, clear_permissions and
list_permissions for the whole mesh (docs/vhosts.md, "Permissions by command"). The
options are checked as the node checks them (names by the one rule, patterns as the
node compiles them), and those that do not add up exit with status 2, asking nothing."""

from __future__ import annotations

import argparse
import re
from typing import Callable

from model.definitions import MAX_PATTERN_LENGTH, PermissionSpec, compile_permission_pattern
from model.names import InvalidName, check_name, quoted
from model.requests import ALL, Request, VhostPermissionsClear, VhostPermissionsList, VhostPermissionsSet

__all__ = ["BadArguments", "permission_options", "permissions_request"]


class BadArguments(Exception):
    """The address, the TLS options or a command's options cannot be used as given (exit status 2)."""


def _checked(what: str) -> Callable[[str], str]:
    """An argparse type: a name by the one rule for names."""
    def checked(text: str) -> str:
        try:
            return check_name(text, what)
        except InvalidName as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return checked


def _pattern(text: str) -> str:
    """A configure/write/read pattern: a regular expression the node compiles alike."""
    if len(text) > MAX_PATTERN_LENGTH:
        raise argparse.ArgumentTypeError(f"a pattern is at most {MAX_PATTERN_LENGTH} characters")
    try:
        compile_permission_pattern(text)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"not a valid regular expression {quoted(text)}: {error}") from None
    return text


def permission_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", type=_checked("vhost name"), help="the vhost")
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--user", type=_checked("user name"), help="the user whose permissions are set or cleared")
    who.add_argument("--group", type=_checked("group name"), help="the group whose permissions are set or cleared")
    for option, what in (("--configure", "queues and exchanges it may declare and delete"),
                         ("--write", "exchanges it may publish to, queues it may bind"),
                         ("--read", "queues it may consume from, exchanges it may bind from")):
        parser.add_argument(option, type=_pattern, metavar="RE", help=f"a regular expression: {what} "
                                                                      '("" nothing, ".*" everything)')
    parser.add_argument("--clear", action="store_true", help="delete the user's (or group's) permissions there")
    parser.add_argument("--node", help="listing: a node's name or id (default: every node)")


def permissions_request(args: argparse.Namespace) -> Request:
    """List (a vhost alone), set (--user/--group and all three patterns) or clear
    (--user/--group and --clear); BadArguments when the options do not add up."""
    patterns = (args.configure, args.write, args.read)
    given = [option for option, value in zip(("--configure", "--write", "--read"), patterns, strict=True)
             if value is not None]
    if args.user is None and args.group is None:
        if given or args.clear:
            raise BadArguments(f"{' '.join(given) or '--clear'} needs --user or --group")
        return VhostPermissionsList(vhost=args.name, node=args.node or ALL)
    if args.clear:
        if given:
            raise BadArguments(f"--clear takes no pattern ({', '.join(given)} given)")
        return VhostPermissionsClear(vhost=args.name, user=args.user, group=args.group)
    if len(given) != 3:
        raise BadArguments('give --configure, --write and --read, as rabbitmqctl set_permissions takes all three '
                           '("" grants nothing, ".*" everything), or --clear')
    try:
        spec = PermissionSpec(vhost=args.name, user=args.user, group=args.group, configure=args.configure,
                              write=args.write, read=args.read)
    except ValueError as error:  # checked by the options already; the model has the last word
        raise BadArguments(str(error)) from None
    return VhostPermissionsSet(permission=spec)
