"""How a command reaches a node: the address (``--stomp``, plaintext or TLS), the
login, and the TLS files; shared by the admin commands, ``meshgate ha`` and
``meshgate vhost``. The login is ``--login`` or ``$MESHGATE_LOGIN``; the passcode
``--passcode`` (readable by any local user in the process list), ``--passcode-file
FILE`` or ``$MESHGATE_PASSCODE``, in that order."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from management.client import PLAIN_SCHEME, ManagementClient, ManagementClientError, TlsFiles, parse_address
from meshgate.vhost_permissions_cli import BadArguments

# The credential of the commands that ask a node, kept off their command line (node_credentials).
LOGIN_ENV, PASSCODE_ENV = "MESHGATE_LOGIN", "MESHGATE_PASSCODE"


def add_node_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """--stomp, the credential and the TLS options of a command that asks a node."""
    parser.add_argument("--stomp", metavar="[stomp+ssl://]HOST:PORT", default="127.0.0.1:61613",
                        help=what + " (stomp+ssl://: its port speaks TLS)")
    parser.add_argument("--login", help=f"the user to log in as (default: ${LOGIN_ENV})")
    parser.add_argument("--passcode", help="the user's password; visible to every local user in the process "
                                           f"list: prefer --passcode-file or ${PASSCODE_ENV}")
    parser.add_argument("--passcode-file", metavar="FILE",
                        help="read the password from the first line of FILE (without --passcode and "
                             f"--passcode-file: ${PASSCODE_ENV})")
    tls = parser.add_argument_group("TLS", "for a node whose STOMP port speaks TLS ([stomp.tls])")
    tls.add_argument("--tls", action="store_true", help="HOST:PORT speaks TLS (the same as stomp+ssl://HOST:PORT)")
    tls.add_argument("--ca", metavar="FILE", help="the CA certificate that signed the node's "
                                                  "(default: the system's trust store)")
    tls.add_argument("--cert", metavar="FILE", help="this client's certificate, for a node that requires one")
    tls.add_argument("--key", metavar="FILE", help="the private key of --cert")
    tls.add_argument("--no-verify-hostname", action="store_true",
                     help="accept a node certificate that does not name HOST")


def node_client(args: argparse.Namespace, timeout: float = 15.0) -> ManagementClient:
    """The client for the node that ``add_node_arguments``' options name; BadArguments if they do not add up."""
    try:
        host, port, tls = parse_address(args.stomp)
    except ValueError as error:
        raise BadArguments(f"--stomp: {error}") from None
    if args.tls and args.stomp.startswith(PLAIN_SCHEME):
        raise BadArguments(f"--tls and --stomp {args.stomp} disagree: stomp:// is plaintext")
    tls = tls or args.tls
    files = TlsFiles(args.ca, args.cert, args.key, not args.no_verify_hostname)
    if not tls and files != TlsFiles():
        raise BadArguments("--ca, --cert, --key and --no-verify-hostname are for a node that speaks TLS: "
                           "use --stomp stomp+ssl://HOST:PORT (or --tls)")
    for option, path in (("--ca", args.ca), ("--cert", args.cert), ("--key", args.key)):
        if path is not None and not Path(path).is_file():
            raise BadArguments(f"{option}: no such file: {path}")
    if (args.cert is None) != (args.key is None):
        raise BadArguments("--cert needs --key, and --key needs --cert")
    try:
        context = files.context() if tls else None
    except ManagementClientError as error:
        raise BadArguments(str(error)) from None
    login, passcode = node_credentials(args)
    return ManagementClient(host, port, login, passcode, timeout, context)


def node_credentials(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The login and passcode of ``add_node_arguments``' options, for every command that asks a node.

    The login: ``--login``, else ``$MESHGATE_LOGIN``. The passcode: ``--passcode`` (which
    any local user can read in the process list), else the first line of ``--passcode-file``
    (its line ending stripped), else ``$MESHGATE_PASSCODE``. An empty variable counts as
    unset; a passcode file that cannot be read, or whose first line is empty, is a BadArguments."""
    login = args.login if args.login is not None else os.environ.get(LOGIN_ENV) or None
    if args.passcode is not None:
        return login, args.passcode
    if args.passcode_file is not None:
        try:
            with open(args.passcode_file, encoding="utf-8") as file:
                passcode = file.readline().removesuffix("\n").removesuffix("\r")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            raise BadArguments(f"--passcode-file: cannot read {args.passcode_file}: {reason}") from None
        if not passcode:
            raise BadArguments(f"--passcode-file: the first line of {args.passcode_file} is empty")
        return login, passcode
    return login, os.environ.get(PASSCODE_ENV) or None
