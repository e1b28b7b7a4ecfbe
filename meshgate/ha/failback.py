"""Failback: the serving member of a replicated pair hands the node over to its
in-sync backup (``meshgate ha failback``, docs/ha.md#failback)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet import defer, task

if TYPE_CHECKING:
    from meshgate.replication import ReplicationSource
    from meshgate.witness import WitnessReporter

# The node's messages, under the logger operators (and docs/ha.md) know them by.
log = logging.getLogger("meshgate.node")

DRAIN_POLL_S = 0.01


@defer.inlineCallbacks
def hand_over(source: ReplicationSource, reporter: WitnessReporter | None, pause_clients: Callable[[bool], None],
              reactor: Any, *, node_id: str, epoch: int, takeover_s: float, drain_timeout_s: float):
    """Hand the node over to the in-sync backup.

    1. Refuse unless a backup is connected and in sync (nothing changes then).
    2. Stop taking client work: the client listeners stop accepting and every client
       connection stops being read (what it sends waits in its socket).
    3. Wait until the journal is flushed, synced here and acknowledged by the backup
       (lag 0): everything receipted so far is on both.
    4. Tell the witness this epoch hands over (``release``), after the last heartbeat.
    5. ``TAKEOVER`` over the replication link: the backup claims the next epoch from the
       witness and starts serving as a takeover does; it answers ``TAKEN`` first.
    6. From then on nothing written here counts as durable (no RECEIPT or STORED for it);
       the caller closes the clients (their failover URLs take them to the other
       member), stops the node and starts it again as the other member's backup.

    If 3–5 fail, clients are read again and this process serves on. Fires with the
    ``(epoch, backup address)`` pair; fails with HandoverRefused."""
    from meshgate.replication import HandoverRefused
    from meshgate.witness import WitnessUnreachable

    if source.backup is None or source.state != "in-sync":
        raise HandoverRefused(f"no backup in sync: replication is {source.state}, lag {source.lag()} bytes; "
                              "a failback needs a connected backup in sync (meshgate ha status)")
    store = source.store
    backup = source.backup.peer
    log.warning("failback: requested; no new client work is taken while the backup %s catches the last writes",
                backup)
    pause_clients(True)
    released = False
    try:
        waited = 0.0
        while True:
            if source.backup is None or source.state != "in-sync":
                raise HandoverRefused(f"the backup is no longer in sync (replication is {source.state})")
            if store.synced_locally() and source.lag() == 0:
                break
            if waited >= drain_timeout_s:
                raise HandoverRefused(f"the backup did not acknowledge everything within {drain_timeout_s:g} s "
                                      f"(lag {source.lag()} bytes)")
            yield task.deferLater(reactor, DRAIN_POLL_S, lambda: None)
            waited += DRAIN_POLL_S
        if reporter is not None:
            reporter.stop()
            while reporter.busy:
                yield task.deferLater(reactor, DRAIN_POLL_S, lambda: None)
            try:
                answer = yield reporter.client.ask("release", node_id=node_id, epoch=epoch)
            except WitnessUnreachable as problem:
                raise HandoverRefused(f"the witness cannot be reached ({problem})") from None
            if not answer.get("released"):
                raise HandoverRefused(f"the witness knows epoch {answer.get('epoch')} of this node, not this "
                                      f"process's {epoch}")
            released = True
        try:
            new_epoch = yield source.hand_over(timeout_s=max(5.0, 2 * takeover_s))
        except HandoverRefused:
            # The link may have dropped after the backup took over: the witness knows.
            new_epoch = (yield _taken_over_meanwhile(reporter, node_id, epoch)) if released else 0
            if not new_epoch:
                raise
            log.warning("failback: no answer from the backup, but the witness has seen epoch %d: it took over",
                        new_epoch)
            source.handed_over = True
            store.hand_over()
    except Exception as problem:
        if source.handed_over:  # the answer came, but this side failed after: it must not serve
            raise
        if reporter is not None:
            if released:
                log.warning("failback: refused after the witness was told; heartbeats resume")
            reporter.start()
        pause_clients(False)
        log.warning("failback: not done (%s); serving on", problem)
        raise
    log.warning("failback: the backup %s took over at epoch %d; closing the clients and rejoining as its "
                "backup", backup, new_epoch)
    return new_epoch, backup


@defer.inlineCallbacks
def _taken_over_meanwhile(reporter: WitnessReporter | None, node_id: str, epoch: int):
    """The epoch the witness knows of this node if above this process's, else 0."""
    from meshgate.witness import WitnessUnreachable

    assert reporter is not None  # only asked once the witness released this epoch
    try:
        known = (yield reporter.client.ask("status", node_id=node_id, epoch=epoch)).get("epoch")
    except WitnessUnreachable:
        return 0
    return known if isinstance(known, int) and known > epoch else 0
