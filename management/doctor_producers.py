"""The doctor's ``producers_paused`` finding (docs/doctor.md): client connections the
node does not read because a limit is reached (flow control), which limit, and what
to free or raise. No remedy is automatic: what frees room is the operator's call."""

from __future__ import annotations

from management.doctor_common import duration, new_finding
from model.diagnosis import Finding, NodeFactSheet, ProducerFacts, QueueFacts

# How many of the deepest queues a finding names as what to drain.
DEEPEST_SHOWN = 3

# Per limit key: what reaching it means, and what frees it.
_ADVICE = {
    "broker.memory_limit": ("the node's memory is full: its queues hold as much as broker.memory_limit allows",
                            "Drain (or purge) its deepest queues, add consumers, or raise broker.memory_limit."),
    "store.limit": ("the store holds store.limit bytes of persistent messages",
                    "Drain (or purge) its deepest queues so the store can shrink, or raise store.limit."),
    "store.max_disk_usage": ("the disk the store is on is fuller than store.max_disk_usage",
                             "Free disk space, or drain its deepest queues; store.max_disk_usage is the threshold."),
    "max_messages": ("the vhost holds its max_messages on this node",
                     "Drain (or purge) the vhost's deepest queues, or raise its max_messages "
                     "(meshgate vhost limits, or [[vhosts.host]] max_messages in the node's configuration)."),
}


def producers_paused(sheet: NodeFactSheet, paused_s: float) -> list[Finding]:
    """One finding per connection not read for ``paused_s`` or longer."""
    findings = []
    for producer in sorted(sheet.producers, key=lambda p: p.connection):
        if producer.paused_for_s < paused_s:
            continue  # a short pause is flow control doing its job
        findings.append(_paused(sheet, producer))
    return findings


def _paused(sheet: NodeFactSheet, producer: ProducerFacts) -> Finding:
    key = producer.limit_key
    meaning, remedy = _ADVICE.get(key, (f"{key} is reached", f"Free what {key} limits, or raise it."))
    # The memory and the store are the node's, shared by its vhosts; max_messages is one vhost's.
    queues = [q for q in sheet.queues if q.depth and (key != "max_messages" or q.vhost == producer.vhost)]
    deepest = sorted(queues, key=lambda q: (-q.depth, q.vhost, q.name))[:DEEPEST_SHOWN]
    evidence = (f"connection {producer.connection} ({producer.protocol or 'client'}, vhost {producer.vhost}) on "
                f"{sheet.name} has not been read for {duration(producer.paused_for_s)}"
                + (f"; {producer.limit_state}" if producer.limit_state else "")
                + (f"; deepest queues: {_queues(deepest)}" if deepest else ""))
    explanation = (f"Flow control: {meaning}, so the node stops reading producers until there is room again; "
                   f"their sends wait (an AMQP client hears connection.blocked). {remedy}")
    return new_finding("producers_paused", "warning", sheet, producer.vhost, producer.connection,
                       f"connection {producer.connection} paused for {duration(producer.paused_for_s)}: {key} "
                       "reached", evidence, explanation, [key], None)


def _queues(queues: list[QueueFacts]) -> str:
    return ", ".join(f"/queue/{q.name}{'' if q.vhost == '/' else ' in ' + q.vhost} ({q.depth})" for q in queues)
