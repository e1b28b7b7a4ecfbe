"""The doctor's findings about consumers that take no more while messages wait
(docs/doctor.md): ``prefetch_bound`` (each holds as many unacked deliveries as its
prefetch allows) and ``slow_consumers`` (each one's socket is backed up: the client
reads slower than the node sends). Neither has a remedy the node can apply: the
prefetch is the client's setting, and more consumers are the operator's."""

from __future__ import annotations

from management.doctor_common import duration, new_finding
from model.diagnosis import Finding, NodeFactSheet, StalledFacts

# How many of the consumers' connections the evidence names.
CONNECTIONS_SHOWN = 5


def stalled_findings(sheet: NodeFactSheet, stalled_s: float) -> list[Finding]:
    kinds = {"prefetch": _prefetch_bound, "unwritable": _slow}
    return [kinds[stall.cause](sheet, stall) for stall in sheet.stalled
            if stall.cause in kinds and stall.for_s >= stalled_s and stall.depth]  # a cause unknown here: left out


def _evidence(sheet: NodeFactSheet, stall: StalledFacts, what: str) -> str:
    shown = stall.connections[:CONNECTIONS_SHOWN]
    more = len(stall.connections) - len(shown)
    return (f"/queue/{stall.name} on {sheet.name} holds {stall.depth} waiting message(s); its {stall.consumers} "
            f"consumer(s) {what} in every sample for {duration(stall.for_s)} at least (connections "
            f"{', '.join(shown)}{f' and {more} more' if more > 0 else ''})")


def _prefetch_bound(sheet: NodeFactSheet, stall: StalledFacts) -> Finding:
    evidence = _evidence(sheet, stall, f"hold {stall.unacked} unacked deliveries, each as many as its prefetch "
                                       f"(up to {stall.prefetch}) allows,")
    explanation = ("A consumer is sent no more than its prefetch of unacknowledged deliveries: these hold theirs and "
                   "do not acknowledge fast enough, so the rest waits. A larger prefetch (STOMP "
                   "activemq.prefetchSize, AMQP basic.qos; broker.default_prefetch when the client sets none), "
                   "faster acknowledgements, or more consumers let it move; a consumer that never acknowledges "
                   "shows as unacked_old.")
    return new_finding("prefetch_bound", "warning", sheet, stall.vhost, stall.name,
                       f"/queue/{stall.name}: {stall.depth} message(s) wait while its consumers' prefetch is full",
                       evidence, explanation, ["broker.default_prefetch"], None)


def _slow(sheet: NodeFactSheet, stall: StalledFacts) -> Finding:
    evidence = _evidence(sheet, stall, "could not be written to (their sockets backed up)")
    explanation = ("The consumers' clients read slower than the node sends: the node stops sending to a connection "
                   "whose socket is backed up, so the rest waits. Add consumers, or find what slows these clients "
                   "(the network, or a client busy elsewhere).")
    return new_finding("slow_consumers", "warning", sheet, stall.vhost, stall.name,
                       f"/queue/{stall.name}: {stall.depth} message(s) wait while its consumers read too slowly",
                       evidence, explanation, [], None)
