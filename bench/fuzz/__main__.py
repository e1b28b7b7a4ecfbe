"""Fuzz a real node's ports (docs/fuzzing.md).

    .venv/bin/python -m bench.fuzz --port stomp --seconds 60 --seed 1
    .venv/bin/python -m bench.fuzz --port all --inputs 1000000 --seed 1 --out fuzz-out
    .venv/bin/python -m bench.fuzz --replay fuzz-out/fuzz-amqp-seed1-case123.json

Each port gets a fresh node (a ``meshgate broker`` on 127.0.0.1 in a temporary
directory, stopped at the end). Exit status 1 if any port had an unhandled
exception, a hang, a stuck connection or a dead node."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench.fuzz import TARGETS, fuzz_port, replay_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", choices=[*TARGETS, "all"], default="all", help="which port to fuzz")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long per port (default 60)")
    parser.add_argument("--inputs", type=int, default=0, help="stop a port after this many inputs (0: no limit)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("fuzz-out"), help="where failing inputs are written")
    parser.add_argument("--workdir", type=Path, help="the nodes' directories (default: a temporary one)")
    parser.add_argument("--checkout", type=Path, help="run the node from this source tree (e.g. an older commit's)")
    parser.add_argument("--replay", type=Path, help="send a failure file's inputs to a fresh node and report")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    parser.add_argument("-v", "--verbose", action="store_true", help="a progress line every 10 s")
    args = parser.parse_args(argv)
    if args.inputs and args.seconds == parser.get_default("seconds"):
        args.seconds = 24 * 3600.0  # --inputs alone: run until the count
    with tempfile.TemporaryDirectory(prefix="meshgate-fuzz-") as scratch:
        workdir = args.workdir or Path(scratch)
        if args.replay:
            results = [replay_file(args.replay, workdir, args.checkout)]
        else:
            ports = list(TARGETS) if args.port == "all" else [args.port]
            results = []
            for port in ports:
                results.append(fuzz_port(port, workdir / port, args.seed, args.seconds, args.inputs, args.out,
                                         verbose=args.verbose, checkout=args.checkout))
                print(results[-1].summary(), flush=True)
        if args.replay:
            print(results[0].summary())
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=1))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
