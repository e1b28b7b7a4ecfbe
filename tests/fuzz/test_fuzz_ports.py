"""Each port of a real node under its wire-level fuzzer (bench/fuzz, docs/fuzzing.md)
for a short run: no unhandled exception in the node's log, no hang (every control
round trip answered in time, every connection closed after the fuzzer's FIN), the
node alive at the end. The long run (a million inputs a port) is the same code:
``python -m bench.fuzz --port all --inputs 1000000``.

``MESHGATE_FUZZ_SECONDS`` (default 45) is the run per port, ``MESHGATE_FUZZ_SEED``
(default 1) its seed: a failure names the file holding the failing input, which
``python -m bench.fuzz --replay FILE`` sends again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.fuzz import TARGETS, fuzz_port

SECONDS = float(os.environ.get("MESHGATE_FUZZ_SECONDS", "45"))
SEED = int(os.environ.get("MESHGATE_FUZZ_SEED", "1"))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(SECONDS + 120)]


def failures(paths: list[str]) -> str:
    """What the failure files say: why, and the end of the node's log then."""
    parts = []
    for path in [p for p in paths if p][:3]:
        record = json.loads(Path(path).read_text())
        parts.append(f"--- {path}: {record['reason']}\n{record['log'][-3000:]}")
    return "\n".join(parts)


@pytest.mark.parametrize("port", list(TARGETS))
def test_the_port_survives_its_fuzzer(port, tmp_path):
    result = fuzz_port(port, tmp_path / "node", SEED, SECONDS, out=tmp_path / "failures")
    report = f"{result.summary()}\n{failures(result.failures)}"
    assert result.unhandled == 0, report
    assert result.hangs == 0 and result.stuck == 0, report
    assert not result.node_died, report
    assert result.controls >= 1 and result.inputs > 0, report
