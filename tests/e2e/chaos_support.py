"""What the chaos tests share (``test_e2e_chaos.py``, ``test_e2e_chaos_pairs.py``):
the duration (``MESHGATE_CHAOS_SECONDS``, 15 s by default as in CI), the seeded random
generator (``MESHGATE_CHAOS_SEED``; the seed is printed so a failure can be replayed)
and the per-node count of messages still held for an address."""

from __future__ import annotations

import os
import random

from e2e_support import manage_result

from model.requests import Queues

CHAOS_SECONDS = float(os.environ.get("MESHGATE_CHAOS_SECONDS", "15"))


def chaos_rng() -> random.Random:
    """A generator seeded from ``MESHGATE_CHAOS_SEED`` (a fresh random seed if unset);
    the seed is printed: rerun with ``MESHGATE_CHAOS_SEED=<seed>`` to replay the chaos."""
    seed = os.environ.get("MESHGATE_CHAOS_SEED") or str(random.SystemRandom().randrange(10**9))
    print(f"chaos seed: MESHGATE_CHAOS_SEED={seed}")
    return random.Random(seed)


def queue_depths(nodes, address: str) -> dict[str, int]:
    """Messages each node (``.name``, ``.stomp`` port) holds for ``address``: waiting, delivered
    and unacked, being forwarded, in doubt."""
    depths = {}
    for node in nodes:
        queues = manage_result(node.stomp, Queues(name=address))
        depths[node.name] = sum(q.depth + q.in_flight + q.forwarding + q.in_doubt for q in queues)
    return depths
