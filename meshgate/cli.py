"""The ``meshgate`` command."""

from __future__ import annotations

import argparse
import gc
import getpass
import logging
import sys
from typing import TYPE_CHECKING

from gateway import __version__
from meshgate.admin_cli import COMMANDS as ADMIN_COMMANDS
from meshgate.admin_cli import BadArguments
from meshgate.admin_cli import add_commands as add_admin_commands
from meshgate.admin_cli import run as run_admin_command
from meshgate.node_login import add_node_arguments, node_client
from model.mesh import address_text

if TYPE_CHECKING:
    from management.client import ManagementClient

_GC_YOUNG_THRESHOLD = 20_000  # container allocations (net) between young-generation collections


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="meshgate", description="Meshgate message-broker mesh")
    parser.add_argument("--version", action="version", version=f"meshgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    broker = commands.add_parser("broker", help="run a broker node")
    broker.add_argument("--config", help="node configuration (TOML); see docs/configuration.md")
    broker.add_argument("--name", help="node name (default: the host name)")
    broker.add_argument("--stomp", metavar="HOST:PORT", help="STOMP listener (default 127.0.0.1:61613)")
    broker.add_argument("--amqp", metavar="HOST:PORT", help="AMQP 0-9-1 listener (default: none; [amqp] bind)")
    broker.add_argument("--data", metavar="DIR", help="data directory (default ./data/<name>)")
    broker.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="override a configuration key, e.g. --set broker.memory_limit=64MiB")
    broker.add_argument("--log-level", default="INFO")

    local = commands.add_parser("local-mesh", help="run a few linked nodes on this machine (to try the mesh)")
    local.add_argument("--nodes", type=int, default=3)
    local.add_argument("--base-port", type=int, default=61613,
                       help="STOMP port of the first node; node i listens on base+10*i, links on +3")
    local.add_argument("--data", metavar="DIR", help="data directory (default ./data/local-mesh)")
    local.add_argument("--redis", metavar="URL", help="Redis for the nodes' metrics (default: start a redis-server "
                                                      "of its own on a free port; none: no metrics)")
    local.add_argument("--console-port", type=int, help=f"the web console's port (default {8161}, else a free one)")
    local.add_argument("--no-console", action="store_true", help="do not start the web console")
    local.add_argument("--no-pipeline", action="store_true", help="do not start the metrics pipeline (Spark)")
    local.add_argument("--tls", action="store_true",
                       help="run the mesh links, a STOMP and an AMQP port per node and the console's requests over "
                            "TLS, with a throw-away CA made under the data directory")

    pipeline = commands.add_parser("pipeline", help="roll the nodes' metrics streams up on Spark (docs/pipeline.md)")
    pipeline.add_argument("--redis", metavar="URL", default="redis://127.0.0.1:6379/0",
                          help="the Redis the nodes publish to (their [metrics] redis_url)")
    pipeline.add_argument("--prefix", default="meshgate", help="the nodes' [metrics] stream_prefix")
    pipeline.add_argument("--master", default="local[2]",
                          help="Spark master: local[N], spark://HOST:PORT, k8s://…, yarn")
    pipeline.add_argument("--checkpoint", metavar="DIR", default="data/pipeline/checkpoint",
                          help="the streaming checkpoint (on a cluster: storage every node reaches)")
    pipeline.add_argument("--trigger", type=float, default=1.0, metavar="SECONDS", help="micro-batch interval")
    pipeline.add_argument("--watermark", type=float, default=120.0, metavar="SECONDS",
                          help="how late an entry may arrive and still count in its window")
    pipeline.add_argument("--from", dest="starting", default="earliest",
                          help="where a new pipeline starts reading: earliest, latest or an entry id")
    pipeline.add_argument("--max-entries", type=int, default=200_000,
                          help="entries per micro-batch, about (estimated from the streams' lengths and id times)")
    pipeline.add_argument("--once", action="store_true", help="apply what the streams hold now, then stop")
    pipeline.add_argument("--export", metavar="DIR", help="batch: write the streams' history to Parquet and stop")
    pipeline.add_argument("--log-level", default="INFO")

    passwd = commands.add_parser("passwd", help="hash a password for [security.users]")
    passwd.add_argument("--stdin", action="store_true", help="read the password from standard input")

    witness = commands.add_parser("witness", help="the witness of replicated pairs (docs/ha.md)")
    witness.add_argument("--bind", metavar="HOST:PORT", default="127.0.0.1:61700")
    witness.add_argument("--password-env", metavar="VAR", default="MESHGATE_HA_PASSWORD",
                         help="environment variable holding the pairs' ha.password (default MESHGATE_HA_PASSWORD)")
    witness.add_argument("--state", metavar="FILE", help="keep the epochs it saw in this file across restarts")
    witness.add_argument("--certificate", metavar="FILE", help="speak only TLS, presenting this PEM certificate "
                                                               "(with --private-key and --ca-certificate)")
    witness.add_argument("--private-key", metavar="FILE", help="the PEM private key of --certificate")
    witness.add_argument("--ca-certificate", metavar="FILE",
                         help="members must present a certificate this CA signed")
    witness.add_argument("--log-level", default="INFO")

    ha = commands.add_parser("ha", help="a replicated pair: status, failback (docs/ha.md)")
    ha.add_argument("action", choices=["status", "failback"])
    add_node_arguments(ha, "the serving member")
    ha.add_argument("--json", action="store_true")
    ha.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                    help="failback: how long to wait for the handover (default 60)")

    add_admin_commands(commands)

    args = parser.parse_args(argv)
    if args.command == "passwd":
        return _passwd(args)
    if args.command in ADMIN_COMMANDS:
        return run_admin_command(args)
    if args.command == "pipeline":
        return _pipeline(args)
    if args.command == "witness":
        return _witness(args)
    if args.command == "ha":
        return _ha(args)
    if args.command == "local-mesh":
        from pathlib import Path

        from meshgate.local_mesh import default_data, run

        return run(args.nodes, args.base_port, Path(args.data) if args.data else default_data(), args.redis,
                   args.console_port, not args.no_console, not args.no_pipeline, args.tls)
    return _broker(args)


def _witness(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from meshgate.config.schema import ConfigError, parse_address
    from meshgate.witness import run

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    password = os.environ.get(args.password_env, "")
    if not password:
        print(f"meshgate witness: set the pairs' ha.password in ${args.password_env}", file=sys.stderr)
        return 2
    try:
        bind = parse_address(args.bind, "--bind")
    except ConfigError as error:
        print(f"meshgate witness: {error}", file=sys.stderr)
        return 2
    files = (args.certificate, args.private_key, args.ca_certificate)
    tls = None
    if any(files):
        from gateway.tls import TlsError, TlsMaterial
        from meshgate.witness import TLS_OPTIONS

        if not all(files):
            print(f"meshgate witness: give {TLS_OPTIONS} together (TLS), or none of them", file=sys.stderr)
            return 2
        try:
            tls = TlsMaterial(*files, ca_name="the witness's CA")
        except TlsError as error:
            print(f"meshgate witness: {error}", file=sys.stderr)
            return 2
    return run(bind, password, Path(args.state) if args.state else None, tls)


def _ha(args: argparse.Namespace) -> int:
    import json

    import msgspec

    from management.client import ManagementClientError
    from model.requests import Summary

    try:
        node = node_client(args, timeout=args.timeout if args.action == "failback" else 15.0)
    except BadArguments as error:
        print(f"meshgate ha {args.action}: {error}", file=sys.stderr)
        return 2
    if args.action == "failback":
        return _failback(node, args)
    try:
        with node as client:
            reply = client.ask(Summary())
    except ManagementClientError as error:
        print(f"meshgate ha status: {error}", file=sys.stderr)
        return 1
    node = reply.result.node
    fields = {"name": node.name, "id": node.id, "mode": node.ha_mode, "role": node.ha_role or node.ha_state,
              "epoch": node.epoch, "replication": node.replication_state, "sync": node.replication_sync,
              "backup": node.replication_backup, "lag_bytes": node.replication_lag,
              "caught_up": node.replication_state == "in-sync"}
    if args.json:
        print(json.dumps(msgspec.to_builtins(fields)))
    else:
        for key, value in fields.items():
            print(f"{key:12} {value}")
    return 0


def _failback(node: ManagementClient, args: argparse.Namespace) -> int:
    """``meshgate ha failback``: the serving member hands the node over to its in-sync
    backup and rejoins as that one's backup (docs/ha.md#failback)."""
    import json

    from management.client import ManagementClientError, RequestFailed
    from model.requests import HaFailback

    try:
        with node as client:
            done = client.call(HaFailback())
    except (ManagementClientError, RequestFailed) as error:
        print(f"meshgate ha failback: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"ok": True, "node": done.node, "epoch": done.count, "detail": done.detail}))
    else:
        print(f"failback done: {done.detail}")
        print(f"new epoch {done.count}; the other member serves now (meshgate ha status there); clients with "
              "failover URLs reconnect to it")
    return 0


def _passwd(args: argparse.Namespace) -> int:
    from gateway.auth import hash_password

    password = sys.stdin.readline().rstrip("\n") if args.stdin else getpass.getpass("password: ")
    if not password:
        print("meshgate passwd: empty password", file=sys.stderr)
        return 2
    print(hash_password(password))
    return 0


def _pipeline(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("meshgate pipeline: needs pyspark and pyarrow: pip install 'meshgate[pipeline]' (and Java 17+)",
              file=sys.stderr)
        return 2
    if args.export:
        from pipeline.export import export
        from pipeline.spark import session

        spark = session(args.master, app="meshgate-export")
        written = export(spark, args.redis, args.prefix, args.export,
                         starting=args.starting)
        print(f"meshgate pipeline: wrote {written['queues']} queue rows and {written['events']} event rows "
              f"to {args.export}")
        spark.stop()
        return 0
    from pipeline.job import JobOptions, PipelineFailed, run

    try:
        return run(JobOptions(redis_url=args.redis, prefix=args.prefix, master=args.master,
                              checkpoint=args.checkpoint, trigger_s=args.trigger, starting=args.starting,
                              watermark_s=args.watermark, max_entries=args.max_entries, available_now=args.once))
    except PipelineFailed as error:
        print(f"meshgate pipeline: failed: {error}", file=sys.stderr)
        return 1


def _broker(args: argparse.Namespace) -> int:
    from meshgate.config import ConfigError, load_config, parse_override

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        overrides = dict(parse_override(item) for item in args.set)
        if args.name:
            overrides["name"] = args.name
        if args.stomp:
            overrides["stomp.bind"] = args.stomp
        if args.amqp:
            overrides["amqp.bind"] = args.amqp
        if args.data:
            overrides["data_dir"] = args.data
        config = load_config(args.config, overrides)
    except ConfigError as error:
        print(f"meshgate: configuration error: {error}", file=sys.stderr)
        return 2

    from twisted.internet import epollreactor

    epollreactor.install()
    from twisted.internet import reactor

    from meshgate.node import Node, NodeStartError

    node = Node(config, reactor)
    outcome = {"status": 0}

    def serving(node: Node) -> None:
        for scheme, host, port in node.addresses():
            print(f"meshgate node {config.name} ({node.identity['id']}) listening on {scheme}://{host}:{port}",
                  flush=True)
        if node.http_port is not None:
            address = node.http_port.getHost()
            print(f"meshgate node {config.name}: /healthz, /readyz and /metrics on "
                  f"http://{address_text(address.host, address.port)}", flush=True)

    def started(node: Node) -> None:
        reactor.addSystemEventTrigger("before", "shutdown", node.stop)
        tune_gc()
        serving(node)
        _, host, port = node.addresses()[0]
        print(f"connect with any STOMP client, e.g. python -c \"import stomp; c = stomp.Connection([('{host}', "
              f"{port})]); c.connect(wait=True)\"", flush=True)

    def failed(failure) -> None:
        if failure.check(NodeStartError):
            print(f"meshgate: {failure.value}", file=sys.stderr)
        else:
            print(f"meshgate: cannot start: {failure.getErrorMessage()}", file=sys.stderr)
        outcome["status"] = 1
        reactor.stop()

    def begin() -> None:
        node.on_restarted = serving  # after a failback this process serves again once it takes over
        node.start().addCallbacks(started, failed)

    reactor.callWhenRunning(begin)
    reactor.run()
    if node.fatal:
        print(f"meshgate: {node.fatal}", file=sys.stderr)
        return 1
    return outcome["status"]


def tune_gc() -> None:
    """Messages are freed by reference counting; the cycle collector only costs.
    With the defaults it ran every ~700 net allocations and re-scanned every
    queued message and in-flight forward on each full pass (a tenth of a
    forwarding node's CPU). What exists once the node is up (code, recovered
    messages) is frozen out of its scans; young objects are scanned less often."""
    gc.freeze()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, 20, 20)


if __name__ == "__main__":  # last: main() needs every function above
    sys.exit(main())
