"""The type-check gate (run by scripts/test.sh): mypy over the files pyproject.toml's [tool.mypy] names.

The core packages must have no error at all. Every other file may have errors, but their total may
not grow over the count recorded in scripts/typecheck-record.txt; when it shrinks, record the lower
count (`python scripts/typecheck.py --record`) so that it cannot grow back.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "scripts" / "typecheck-record.txt"
CORE = ("model", "gateway", "mesh", "management", "metrics")
RECORD_HEADER = """\
# mypy errors outside the core packages, per file, written by `python scripts/typecheck.py --record`.
# scripts/typecheck.py fails when the total grows; when it shrinks, record it again.
"""


class Error(NamedTuple):
    file: str
    line: int
    message: str
    code: str | None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}  [{self.code}]"


def run_mypy() -> list[Error]:
    """mypy's errors (not its notes), from its JSON output."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--output", "json"], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode not in (0, 1):  # 2: a crash, a bad option or an error that stops the whole check
        sys.exit(f"typecheck: mypy failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [Error(r["file"], r["line"], r["message"], r["code"]) for r in reports if r["severity"] == "error"]


def in_core(path: str) -> bool:
    return path.split("/", 1)[0] in CORE


def read_record() -> Counter[str]:
    counts: Counter[str] = Counter()
    if not RECORD.exists():
        sys.exit(f"typecheck: no {RECORD.relative_to(ROOT)}: write it with `python scripts/typecheck.py --record`")
    for line in RECORD.read_text().splitlines():
        if line and not line.startswith("#"):
            count, path = line.split(maxsplit=1)
            counts[path] = int(count)
    return counts


def write_record(counts: Counter[str]) -> None:
    lines = [f"{count} {path}" for path, count in sorted(counts.items())]
    RECORD.write_text(RECORD_HEADER + f"# total: {counts.total()}\n" + "".join(line + "\n" for line in lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", action="store_true", help="write the current counts to the record file")
    args = parser.parse_args()

    errors = run_mypy()
    core = [error for error in errors if in_core(error.file)]
    rest = Counter(error.file for error in errors if not in_core(error.file))

    if args.record:
        write_record(rest)
        print(f"typecheck: recorded {rest.total()} errors outside {' '.join(CORE)} in {RECORD.relative_to(ROOT)}")
        return 0

    failed = False
    if core:
        print("\n".join(map(str, core)))
        print(f"typecheck: {len(core)} mypy errors in {' '.join(CORE)}, which must have none")
        failed = True

    recorded = read_record()
    if rest.total() > recorded.total():
        grown = sorted(path for path in rest if rest[path] > recorded[path])
        for error in errors:
            if error.file in grown:
                print(error)
        print(f"typecheck: {rest.total()} mypy errors outside {' '.join(CORE)}, more than the {recorded.total()} "
              f"recorded in {RECORD.relative_to(ROOT)}; files with more errors than recorded:")
        for path in grown:
            print(f"  {path}: {rest[path]} (recorded {recorded[path]})")
        failed = True
    elif rest.total() < recorded.total():
        print(f"typecheck: {rest.total()} mypy errors outside {' '.join(CORE)}, fewer than the {recorded.total()} "
              f"recorded: please lower the record with `python scripts/typecheck.py --record` and commit it")
    if not failed:
        print(f"typecheck: no mypy errors in {' '.join(CORE)}; {rest.total()} elsewhere (recorded: {recorded.total()})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
