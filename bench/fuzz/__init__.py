"""Wire-level fuzzers for a node's ports: STOMP, AMQP 0-9-1, STOMP over WebSocket and
the mesh link (docs/fuzzing.md). ``python -m bench.fuzz --help`` runs them;
``fuzz_port`` is what tests/fuzz/test_fuzz_ports.py calls."""

from __future__ import annotations

import json
from pathlib import Path

from bench.fuzz.amqp import AmqpTarget
from bench.fuzz.mesh import MeshTarget
from bench.fuzz.node import FuzzNode
from bench.fuzz.runner import Result, Runner, Target, replay
from bench.fuzz.stomp import StompTarget
from bench.fuzz.websocket import WebSocketTarget

TARGETS: dict[str, type[Target]] = {
    "stomp": StompTarget, "amqp": AmqpTarget, "websocket": WebSocketTarget, "mesh": MeshTarget,
}


def fuzz_port(port: str, workdir: Path, seed: int, seconds: float, max_inputs: int = 0,
              out: Path = Path("fuzz-out"), verbose: bool = False, checkout: Path | None = None) -> Result:
    """Fuzz one port of a fresh node for ``seconds`` (or ``max_inputs``); the node
    is stopped at the end, whatever happened. ``checkout``: run that source tree's
    node instead of the installed one."""
    node = FuzzNode(workdir, checkout=checkout).start()
    try:
        result = Runner(TARGETS[port](node), seed, out, verbose).run(seconds, max_inputs)
    finally:
        status = node.stop()
    if status not in (0, None) and not result.node_died:
        result.notes.append(f"the node exited with status {status} on SIGTERM")
        result.node_died = True
    return result


def replay_file(path: Path, workdir: Path, checkout: Path | None = None) -> Result:
    port = json.loads(Path(path).read_text())["port"]
    node = FuzzNode(workdir / "replay", checkout=checkout).start()
    try:
        return replay(TARGETS[port](node), path)
    finally:
        node.stop()
