"""One message's journey across the mesh, from the records every node keeps of it
(model.journeys.JourneyStep, gathered by ``journey_steps``): put in causal order and
printed as a timeline (``meshgate trace``).

Nodes' clocks differ, so wall time alone cannot order steps of different nodes. The
order kept is the one that is certain: a node's own steps by their ``seq``, and a
message taken from a link (``link_received``) after the ``forwarded`` step that sent
it (the same peers, the same ``visit``). Between steps those two rules leave free,
wall time decides. A forward whose other end recorded nothing (a node of an older
release, or with journeys off) leaves a gap, shown as such."""

from __future__ import annotations

from collections import defaultdict

from model.journeys import JourneyStep

_ARRIVALS = ("link_received", "duplicate_dropped")


def timeline(steps: list[JourneyStep]) -> list[JourneyStep]:
    """``steps`` (of one message, from any number of nodes) in causal order."""
    by_node: dict[str, list[JourneyStep]] = defaultdict(list)
    for step in steps:
        by_node[step.node].append(step)
    heads = {node: sorted(own, key=lambda s: s.seq) for node, own in by_node.items()}
    sent: set[tuple[str, str, int]] = set()  # (from node, to node, visit) of the forwards placed so far
    ordered: list[JourneyStep] = []
    while heads:
        ready = [own[0] for own in heads.values() if own[0].step not in _ARRIVALS
                 or (own[0].peer, own[0].node, own[0].visit) in sent]
        # None ready: an arrival whose forward no node recorded; it goes by its time then.
        step = min(ready or [own[0] for own in heads.values()], key=lambda s: s.time)
        if step.step == "forwarded" and step.peer is not None:
            sent.add((step.node, step.peer, step.visit))
        ordered.append(step)
        own = heads[step.node]
        own.pop(0)
        if not own:
            del heads[step.node]
    return ordered


def format_journey(message_id: str, steps: list[JourneyStep]) -> str:
    """The timeline as lines: time since the first step, node, step and what it concerns."""
    if not steps:
        return (f"no node has records of message {message_id}: it was not traced, its records aged out, "
                "or the nodes that had it record no journeys ([journeys] enabled = false)")
    ordered = timeline(steps)
    names = {step.node: step.node_name for step in ordered}
    start = ordered[0].time
    nodes = len(names)
    lines = [f"message {message_id}: {len(ordered)} steps on {nodes} node{'s' if nodes != 1 else ''}, "
             f"{(ordered[-1].time - start) * 1000:.1f} ms (times are each node's clock)"]
    width = max(len(name) for name in names.values())
    recorded = {(s.peer, s.node, s.visit) for s in ordered if s.step in _ARRIVALS}
    for step in ordered:
        what = _describe(step, names)
        lines.append(f"  {(step.time - start) * 1000:+10.3f} ms  {step.node_name:<{width}}  {step.step:<17} {what}"
                     .rstrip())
        if step.step == "forwarded" and step.peer is not None and (step.node, step.peer, step.visit) not in recorded:
            peer = names.get(step.peer, step.peer[:8])
            lines.append(f"  {'':>13}  {'':<{width}}  (no record from {peer}: an older release, or journeys off "
                         "there; its part of the journey is not known)")
    return "\n".join(lines)


def _describe(step: JourneyStep, names: dict[str, str]) -> str:
    peer = None if step.peer is None else names.get(step.peer, step.peer[:8])
    kind = step.step
    if kind == "received":
        who = ", ".join(part for part in (step.user, step.remote) if part)
        source = f"{step.protocol} {step.connection}" if step.protocol else (step.connection or "this node")
        origin = f" (from {step.from_id})" if step.from_id else ""
        return f"from {source}{f' ({who})' if who else ''} to {step.destination}" \
               f"{', persistent' if step.persistent else ''}{origin}"
    if kind in ("queued", "stored"):
        return f"in {step.queue}"
    if kind == "forwarded":
        return f"to {peer} ({step.reason})"
    if kind in _ARRIVALS:
        return f"from {peer}{' (redistribution)' if step.reason else ''}"
    if kind == "peer_stored":
        return f"{peer} has it: this node's copy is done"
    if kind == "delivered":
        again = ", redelivered" if step.redelivered else ""
        return f"to {step.consumer} on {step.protocol or ''} {step.connection} ({step.ack_mode}{again}, " \
               f"delivery {step.deliveries})"
    if kind == "acked":
        return f"in {step.queue}" + (f", {step.latency_ms:.1f} ms after it was received" if step.latency_ms else "")
    if kind == "dead_lettered":
        return f"from {step.queue} to {step.destination} ({step.reason})" + (
            f", now {step.next_id}" if step.next_id else "")
    if kind in ("requeued", "dropped"):
        return f"in {step.queue} ({step.reason})"
    if kind == "moved":
        return f"from {step.queue} to {step.destination}"
    return f"in {step.queue}" if step.queue else ""
