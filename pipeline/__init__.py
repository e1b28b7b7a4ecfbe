"""The metrics pipeline: Spark reads the nodes' Redis streams (``source``), rolls
them up per window (``transform`` on Spark, ``rollup`` on the driver) and writes
the rollups back to Redis for the console (``job``), or the history to Parquet
(``export``). Needs the ``pipeline`` extra (pyspark, pyarrow) and Java 17+."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: a batch makes millions of small objects
    and no cycles, and the collector, which runs every few hundred allocations and
    walks what survived them, cost up to half of the batch's Python time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
