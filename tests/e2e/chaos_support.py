"""What the chaos tests share (``test_e2e_chaos.py``, ``test_e2e_chaos_pairs.py``):
the duration (``MESHGATE_CHAOS_SECONDS``, 15 s by default as in CI), the seeded random
generator (``MESHGATE_CHAOS_SEED``; the seed is printed so a failure can be replayed),
the per-node count of messages still held for an address, and the wait at the end
for every receipted message to be consumed and none to be left."""

from __future__ import annotations

import os
import random

from e2e_support import manage_result
from mesh_support import wait_until

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


def wait_all_consumed(receipted: set[str], deliveries: list[tuple], nodes, address: str, *, consumed_within: float,
                      emptied_within: float) -> None:
    """Wait until every ``receipted`` body is among the ``deliveries`` (each one's second field is
    the body), then until no node holds anything for ``address``."""
    consumed = lambda: {d[1] for d in deliveries}  # noqa: E731
    wait_until(lambda: receipted <= consumed(), "every receipted message consumed", timeout=consumed_within,
               describe=lambda: f"missing {len(receipted - consumed())} of {len(receipted)}: "
                                f"{sorted(receipted - consumed())[:10]}; depths {queue_depths(nodes, address)}")
    wait_until(lambda: sum(queue_depths(nodes, address).values()) == 0, "no message left on any node",
               timeout=emptied_within, describe=lambda: str(queue_depths(nodes, address)))
