"""Small durable-file helpers shared by the journal and the node's data dir."""

from __future__ import annotations

import json
import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a new or renamed file) survive a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomically(path: Path, data: object) -> None:
    """Replace ``path`` with ``data`` as JSON: after a crash it holds either the old
    or the new document, never a torn one, and the rename itself is durable."""
    tmp = path.with_suffix(".tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk: the old document stays, and no half-written one lies about
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)
