"""The ``meshgate`` commands that ask a running node (``nodes``, ``queues``,
``purge``, …): one management request each, through any node of the mesh.

Views cover the whole mesh unless ``--node`` names one node; actions apply to the
node asked unless ``--node`` names another (or ``--all``, every node). Exit
status: 0 done, 1 refused or failed, 2 bad arguments, 3 done but some nodes did
not answer (their warnings go to standard error), 4 ``doctor`` found something
critical. A name that breaks the one rule for
names (model/names.py) is a bad argument: nothing is asked.

Commands about queues and definitions take ``--vhost NAME`` (default ``/``);
``meshgate vhost add|limits|delete|list`` makes, limits, deletes and lists vhosts.

How a command reaches a node (address, login, TLS): meshgate/node_login.py."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

import msgspec

from management import format as fmt
from management.client import ManagementClient, ManagementClientError, RequestFailed
from meshgate import doctor_cli
from meshgate.cli_args import ACTION, VIEW, Command
from meshgate.node_login import add_node_arguments, node_client
from meshgate.trace_cli import TRACE_COMMANDS
from meshgate.vhost_permissions_cli import BadArguments, permission_options, permissions_request
from model.definitions import QueueSettings, VhostSpec
from model.diagnosis import DiagnosisReport
from model.events import KINDS
from model.names import DEFAULT_VHOST, InvalidName, check_name, check_vhost_name, quoted
from model.requests import (
    ALL,
    Browse,
    CloseConnection,
    Connections,
    DefineQueue,
    Definitions,
    DeleteDefinition,
    DeleteQueue,
    Events,
    Forget,
    Links,
    Move,
    Nodes,
    Purge,
    Queues,
    Redistribute,
    ReloadTls,
    Request,
    ScaleDownNode,
    Send,
    Subscriptions,
    TlsReload,
    VhostAdd,
    VhostDelete,
    VhostList,
    VhostSetLimits,
)


def _name(what: str, allow_empty: bool = False) -> Callable[[str], str]:
    """An argparse type: a name by the one rule for names (``allow_empty``: or "")."""
    def checked(text: str) -> str:
        if allow_empty and text == "":
            return text
        try:
            return check_name(text, what)
        except InvalidName as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return checked


_DESTINATION_KINDS = {"/queue/": "queue name", "/topic/": "topic"}


def _destination(text: str) -> str:
    """/queue/NAME or /topic/NAME with NAME by the rule for names (another destination by
    the rule as a whole; the node says whether it takes it)."""
    prefix = next((prefix for prefix in _DESTINATION_KINDS if text.startswith(prefix)), "")
    _name(_DESTINATION_KINDS.get(prefix, "destination"))(text[len(prefix):])
    return text


def _vhost_name(text: str) -> str:
    try:
        return check_vhost_name(text)
    except InvalidName as error:
        raise argparse.ArgumentTypeError(str(error)) from None


MAX_LIMIT = 2**31 - 1  # as model.definitions.VhostLimitValue


def _limit(text: str) -> int:
    """A vhost limit: a count from 0 (0 refuses everything)."""
    if not text.isdigit() or int(text) > MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"expected a count from 0 to {MAX_LIMIT}, got {quoted(text[:40])}")
    return int(text)


def _limit_or_none(text: str) -> int | None:
    """A vhost limit, or "none": no limit."""
    return None if text.lower() == "none" else _limit(text)


def _limit_options(parser: argparse.ArgumentParser, value: Callable[[str], int | None], default: object) -> None:
    what = "N or none" if value is _limit_or_none else "N"
    for option, help_text in (("--max-connections", "client connections to it at once, per node"),
                              ("--max-queues", "queues in it, per node"),
                              ("--max-messages", "messages it holds before its producers wait, per node")):
        parser.add_argument(option, type=value, default=default, metavar=what, help=help_text)


def _header(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {quoted(text)}")
    _name("header name")(key)
    if not value.isprintable():
        raise argparse.ArgumentTypeError(f"the value of header {quoted(key)} holds a control character")
    return key, value


def _no_args(parser: argparse.ArgumentParser) -> None:
    pass


def _queue_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("queue", type=_name("queue name"), help="the queue's name, without /queue/")


COMMANDS: dict[str, Command] = {
    "nodes": ("every node of the mesh, asked afresh: state, links, partial queues", VIEW, _no_args,
              lambda a: Nodes(), lambda r, names, a: fmt.format_nodes(r)),
    "stat": ("queue depths and consumers on the node asked (--cluster: summed over the mesh)", VIEW,
             lambda p: p.add_argument("--cluster", action="store_true", help="every node's partial queues, summed"),
             lambda a: Queues(node=ALL if a.cluster else a.node, vhost=a.vhost),
             lambda r, names, a: fmt.format_cluster_stat(r, names) if a.cluster else fmt.format_stat(r)),
    "queues": ("partial queues with their counters (every node unless --node)", VIEW,
               lambda p: p.add_argument("name", nargs="?", type=_name("queue name"), help="only this queue"),
               lambda a: Queues(node=a.node or ALL, name=a.name, vhost=a.vhost),
               lambda r, names, a: fmt.format_queues(r, names)),
    "links": ("mesh links, up and down, as each node sees them", VIEW, _no_args,
              lambda a: Links(node=a.node or ALL), lambda r, names, a: fmt.format_links(r, names)),
    "subscriptions": ("topic subscriptions, durable and not", VIEW, _no_args,
                      lambda a: Subscriptions(node=a.node or ALL),
                      lambda r, names, a: fmt.format_subscriptions(r, names)),
    "connections": ("client connections", VIEW, _no_args,
                    lambda a: Connections(node=a.node or ALL), lambda r, names, a: fmt.format_connections(r, names)),
    "events": ("what happened lately: links, redistribution, dead letters, admin actions…", VIEW,
               lambda p: (p.add_argument("--kind", action="append", default=[], choices=KINDS,
                                         help="only events of this kind (repeatable)"),
                          p.add_argument("--since", type=float, default=3600.0, metavar="SECONDS",
                                         help="only the last SECONDS (default 3600)"),
                          p.add_argument("--limit", type=int, default=100, help="newest this-many per node")),
               lambda a: Events(node=a.node or ALL, since=time.time() - a.since, kinds=a.kind, limit=a.limit),
               lambda r, names, a: fmt.format_events(r, names)),
    "browse": ("show waiting messages without taking them (needs admin)", ACTION,
               lambda p: (_queue_arg(p), p.add_argument("--offset", type=int, default=0),
                          p.add_argument("--limit", type=int, default=20),
                          p.add_argument("--preview", type=int, default=200, help="body bytes shown per message")),
               lambda a: Browse(node=a.node, queue=a.queue, offset=a.offset, limit=a.limit, preview=a.preview,
                                vhost=a.vhost),
               lambda r, names, a: fmt.format_browse(r, names)),
    "purge": ("drop a queue's waiting messages (needs admin)", ACTION, _queue_arg,
              lambda a: Purge(node=a.node, queue=a.queue, vhost=a.vhost),
              lambda r, names, a: fmt.format_done(r, names)),
    "delete": ("delete a queue and its waiting messages (needs admin)", ACTION, _queue_arg,
               lambda a: DeleteQueue(node=a.node, queue=a.queue, vhost=a.vhost),
               lambda r, names, a: fmt.format_done(r, names)),
    "move": ("move waiting messages to another queue, or to a linked node (needs admin)", ACTION,
             lambda p: (_queue_arg(p), p.add_argument("--to-queue", type=_name("queue name")),
                        p.add_argument("--to-node"),
                        p.add_argument("--count", type=int, help="at most this many (default: all)")),
             lambda a: Move(node=a.node, queue=a.queue, to_queue=a.to_queue, to_node=a.to_node, count=a.count,
                            vhost=a.vhost),
             lambda r, names, a: fmt.format_done(r, names)),
    "redistribute": ("end the redistribution delay holding a queue's backlog on a node: it follows consumers "
                     "elsewhere now (needs admin)", ACTION, _queue_arg,
                     lambda a: Redistribute(node=a.node, queue=a.queue, vhost=a.vhost),
                     lambda r, names, a: fmt.format_done(r, names)),
    "send": ("send a test message (needs admin)", ACTION,
             lambda p: (p.add_argument("destination", type=_destination, help="/queue/NAME or /topic/NAME"),
                        p.add_argument("body"),
                        p.add_argument("--header", type=_header, action="append", default=[], metavar="NAME=VALUE"),
                        p.add_argument("--persistent", action="store_true")),
             lambda a: Send(node=a.node, destination=a.destination, body=a.body, headers=dict(a.header),
                            persistent=a.persistent, vhost=a.vhost),
             lambda r, names, a: fmt.format_done(r, names)),
    "close": ("close a client connection (needs admin)", ACTION,
              lambda p: (p.add_argument("connection", help="its id, as meshgate connections lists it"),
                         p.add_argument("--reason", default="closed by an administrator")),
              lambda a: CloseConnection(node=a.node or ALL, connection=a.connection, reason=a.reason),
              lambda r, names, a: fmt.format_done(r, names)),
    "forget": ("tell the mesh a crashed node is gone for good (needs admin)", ACTION,
               lambda p: p.add_argument("node_id", help="the id of the node to forget (meshgate nodes shows it)"),
               lambda a: Forget(forget=a.node_id), lambda r, names, a: fmt.format_done([r], names)),
    "scale-down": ("hand a node's messages to another node, then stop it (needs admin)", ACTION, _no_args,
                   lambda a: ScaleDownNode(node=a.node), lambda r, names, a: fmt.format_done(r, names)),
}
COMMANDS.update({
    "definitions": ("queue settings and durable subscriptions, the same on every node", VIEW, _no_args,
                    lambda a: Definitions(node=a.node, vhost=a.vhost),
                    lambda r, names, a: fmt.format_definitions(r, names)),
    "define-queue": ("set a queue's settings on every node of the mesh (needs admin)", ACTION,
                     lambda p: (_queue_arg(p),
                                p.add_argument("--max-delivery-attempts", type=int, metavar="N"),
                                p.add_argument("--dead-letter-queue", metavar="QUEUE",
                                               type=_name("dead-letter queue name")),
                                p.add_argument("--expiry-queue", metavar="QUEUE", type=_name("expiry queue name", True),
                                               help='where expired messages go ("" discards them)'),
                                p.add_argument("--message-ttl-ms", type=int, metavar="MS",
                                               help="expiry for messages sent without one"),
                                p.add_argument("--max-length", type=int, metavar="N",
                                               help="messages waiting per node at most; the oldest go")),
                     lambda a: DefineQueue(queue=a.queue, vhost=a.vhost, settings=QueueSettings(
                         max_delivery_attempts=a.max_delivery_attempts, dead_letter_queue=a.dead_letter_queue,
                         expiry_queue=a.expiry_queue, message_ttl_ms=a.message_ttl_ms, max_length=a.max_length)),
                     lambda r, names, a: fmt.format_done([r], names)),
    "undefine": ("delete a queue's settings, a durable subscription or a trace on every node (needs admin)", ACTION,
                 lambda p: (p.add_argument("kind", choices=["queue", "durable", "trace"]),
                            p.add_argument("name", type=_name("name"),
                                           help="the queue's name, client-id.subscription-name, or a traced "
                                                "/queue/NAME or /topic/NAME")),
                 lambda a: DeleteDefinition(kind=a.kind, name=a.name, vhost=a.vhost),
                 lambda r, names, a: fmt.format_done([r], names)),
    "vhost": ("make, limit, delete or list vhosts, and their permissions: vhost add NAME [--max-connections N ...], "
              "vhost limits NAME [--max-connections N|none ...], vhost delete NAME [--force], vhost list, "
              "vhost permissions NAME [--user U|--group G --configure RE --write RE --read RE | --clear]", ACTION,
              lambda p: _vhost_commands(p), lambda a: _vhost_request(a),
              lambda r, names, a: _format_vhost(r, names, a)),
})
# Commands about one vhost's queues or definitions: --vhost NAME (default /).
IN_A_VHOST = ("stat", "queues", "browse", "purge", "delete", "move", "redistribute", "send", "definitions",
              "define-queue", "undefine", "trace-next", "trace-on", "trace-off", "traces")
COMMANDS["topology"] = ("the same as nodes",) + COMMANDS["nodes"][1:]
COMMANDS["reload-tls"] = (
    "re-read the node's certificate, key and CA files, as SIGHUP does (needs admin)", ACTION, _no_args,
    lambda a: ReloadTls(node=a.node), lambda r, names, a: _format_reloads(r, names))


COMMANDS["doctor"] = (
    "find stuck messages over the whole mesh, say why and how to fix it; --fix ID does a finding's remedy "
    "(docs/doctor.md)", VIEW, doctor_cli.doctor_args, doctor_cli.doctor_request, doctor_cli.format_doctor)
COMMANDS.update(TRACE_COMMANDS)

# Commands whose answer can be alarming: exit status 4 when it is (a critical finding).
ALARMING: dict[str, Callable[[Any], bool]] = {
    "doctor": lambda report: isinstance(report, DiagnosisReport)  # (not a --fix's result)
    and any(finding.severity == "critical" for finding in report.findings),
}
# Commands done in part: exit status 1 when the result says so (a listener kept its old certificate).
PARTLY_DONE: dict[str, Callable[[Any], bool]] = {
    "reload-tls": lambda result: not all(reload.all_reloaded for reload in result),
}


def _vhost_commands(parser: argparse.ArgumentParser) -> None:
    """vhost add|limits|delete|list, each with the options of a command that asks a node."""
    operations = parser.add_subparsers(dest="vhost_command", required=True, metavar="{add,limits,delete,list}")
    add = operations.add_parser("add", help="make a vhost on every node of the mesh (needs admin)")
    add.add_argument("name", type=_vhost_name)
    _limit_options(add, _limit, None)
    limits = operations.add_parser("limits", help="change the limits of a vhost made by vhost add, on every node "
                                                  "(needs admin); a limit not given is kept, none removes it")
    limits.add_argument("name", type=_vhost_name)
    _limit_options(limits, _limit_or_none, msgspec.UNSET)
    delete = operations.add_parser("delete", help="delete a vhost on every node (needs admin); refused while it "
                                                  "holds messages unless --force")
    delete.add_argument("name", type=_vhost_name)
    delete.add_argument("--force", action="store_true", help="delete it with its messages, disconnecting its clients")
    listing = operations.add_parser("list", help="the vhosts with their queues, messages, connections and limits "
                                                 "per node")
    listing.add_argument("--node", help="a node's name or id (default: every node)")
    permissions = operations.add_parser(
        "permissions", help="list a vhost's permissions per node; with --user or --group, set them on every node "
                            "(all three patterns, as rabbitmqctl set_permissions) or --clear them (needs admin). "
                            "The first permission set turns vhost permissions on: users without an entry for a "
                            "vhost can no longer open it, '/' included")
    permission_options(permissions)
    for operation in (add, limits, delete, listing, permissions):
        add_node_arguments(operation, "the node to ask")
        operation.add_argument("--json", action="store_true", help="print the reply as JSON")


def _vhost_request(args: argparse.Namespace) -> Request:
    if args.vhost_command == "add":
        return VhostAdd(name=args.name, spec=VhostSpec(max_connections=args.max_connections,
                                                       max_queues=args.max_queues, max_messages=args.max_messages))
    if args.vhost_command == "limits":
        return VhostSetLimits(name=args.name, max_connections=args.max_connections, max_queues=args.max_queues,
                              max_messages=args.max_messages)
    if args.vhost_command == "delete":
        return VhostDelete(name=args.name, force=args.force)
    if args.vhost_command == "permissions":
        return permissions_request(args)
    return VhostList(node=args.node or ALL)


def _format_vhost(result: Any, names: dict[str, str], args: argparse.Namespace) -> str:
    if args.vhost_command == "list":
        return fmt.format_vhosts(result, names)
    if args.vhost_command == "permissions" and isinstance(result, list):
        return fmt.format_permissions(result, names)
    return fmt.format_done([result], names)


def _format_reloads(reloads: list[TlsReload], names: dict[str, str]) -> str:
    """One line per node and listener: reloaded (the certificate now in use) or kept (why)."""
    lines = []
    for reload in reloads:
        node = names.get(reload.node, reload.node)
        if not reload.listeners:
            lines.append(f"{node}: no TLS listener or dialler")
        for outcome in reload.listeners:
            if outcome.reloaded:
                lines.append(f"{node} {outcome.listener}: reloaded: {outcome.subject}, expires "
                             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(outcome.not_after))}")
            else:
                lines.append(f"{node} {outcome.listener}: kept its old certificate: {outcome.reason}")
    return "\n".join(lines)


def add_commands(commands) -> None:
    for name, (help_text, kind, extra, _, _) in COMMANDS.items():
        parser = commands.add_parser(name, help=help_text)
        extra(parser)
        if name == "vhost":
            continue  # each of its operations has the options (_vhost_commands)
        if name in IN_A_VHOST:
            parser.add_argument("--vhost", type=_vhost_name, default=DEFAULT_VHOST, metavar="NAME",
                                help="the vhost of the queues (default /)")
        add_node_arguments(parser, "the node to ask")
        if name not in ("nodes", "topology", "forget", "define-queue", "undefine", "doctor", "trace-on", "trace-off"):
            # (An empty group would break argparse's usage line, and with it every error message.)
            where = parser.add_mutually_exclusive_group()
            where.add_argument("--node", help="a node's name or id: where this applies"
                                              + (" (default: every node)" if kind == VIEW else
                                                 " (default: the node asked)"))
            if kind == ACTION and name not in ("close", "scale-down"):
                where.add_argument("--all", action="store_true", help="on every node of the mesh")
        parser.add_argument("--json", action="store_true", help="print the reply as JSON")


def run(args: argparse.Namespace) -> int:
    help_text, kind, _, make_request, render = COMMANDS[args.command]
    args.node = ALL if getattr(args, "all", False) else getattr(args, "node", None)
    try:
        node = node_client(args)
        request = make_request(args)  # BadArguments: options that do not add up
    except BadArguments as error:
        print(f"meshgate {args.command}: {error}", file=sys.stderr)
        return 2
    try:
        with node as client:
            reply = client.ask(request)
            names = _names(client) if reply.ok and not args.json else {}
    except ManagementClientError as error:
        print(f"meshgate {args.command}: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(msgspec.to_builtins(reply), indent=2, sort_keys=True))
    if not reply.ok:
        where = f" (node {reply.error.node})" if reply.error.node else ""
        print(f"meshgate {args.command}: {reply.error.message}{where}", file=sys.stderr)
        return 1
    if not args.json:
        print(render(reply.result, names, args))
    for failure in reply.failures:
        print(f"meshgate {args.command}: warning: node {names.get(failure.node, failure.node)} did not answer: "
              f"{failure.message}", file=sys.stderr)
    partly_done = PARTLY_DONE.get(args.command)
    if partly_done is not None and partly_done(reply.result):
        return 1
    alarming = ALARMING.get(args.command)
    if alarming is not None and alarming(reply.result):
        return 4
    return 3 if reply.failures else 0


def _names(client: ManagementClient) -> dict[str, str]:
    """Node names by id, for printing (from the asked node's view, gossip included)."""
    try:
        view = client.call(Nodes(fresh=False))
    except (ManagementClientError, RequestFailed):  # names are a nicety: ids do when they cannot be had
        return {}
    return {summary.node.id: summary.node.name for summary in view.nodes}
