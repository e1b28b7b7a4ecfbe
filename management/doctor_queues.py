"""The doctor's findings about what piles up in queues nobody looks at
(docs/doctor.md): ``dlq_growing`` (a dead-letter or expiry queue that grows),
``expiring`` (a queue whose messages expire before anyone takes them) and
``durable_abandoned`` (a durable subscription whose subscriber is gone, with
messages kept for it). Growth is judged over the sampler's window
(management/doctor_history.py)."""

from __future__ import annotations

from management.doctor_common import as_json, duration, new_finding, vhost_option
from model.diagnosis import DeadLetterFacts, DurableFacts, Finding, NodeFactSheet, Remedy
from model.requests import Browse, DeleteDefinition


def dead_letter_findings(sheet: NodeFactSheet) -> list[Finding]:
    findings = []
    facts = sheet.dead_letters
    for target in facts:
        if target.is_target and target.depth_growth > 0:
            findings.append(_dlq_growing(sheet, target, facts))
    for source in facts:
        if source.expired:
            findings.append(_expiring(sheet, source))
    return findings


def _dlq_growing(sheet: NodeFactSheet, target: DeadLetterFacts, facts: list[DeadLetterFacts]) -> Finding:
    sources = [f for f in facts if f.vhost == target.vhost and f.name != target.name and (
        (f.dead_letter_queue == target.name and f.dead_lettered) or (f.expiry_queue == target.name and f.expired))]
    where = "; ".join(_source(f, target.name) for f in sources)
    evidence = (f"/queue/{target.name} on {sheet.name} holds {target.depth} message(s), {target.depth_growth} more "
                f"than {duration(target.over_s)} ago" + (f"; from {where}" if where else ""))
    keys: list[str] = []
    for source in sources:
        if source.dead_letter_queue == target.name and source.dead_lettered:
            keys.append(source.max_delivery_attempts_key)
        if source.expiry_queue == target.name and source.expired and source.message_ttl_ms is not None:
            keys.append(f"message_ttl_ms of queue {source.name} (meshgate define-queue)")
    keys = sorted(set(keys))
    purge = f"meshgate purge {target.name} --node {sheet.name}{vhost_option(target.vhost)}"
    explanation = ("Messages that could not be delivered (refused more often than max_delivery_attempts allows) or "
                   "that expired are moved here, and nobody consumes them: they pile up until someone looks. Browse "
                   "them to see why they failed (their headers say where they came from); fix the consumer or the "
                   f"sender, then move them back by hand or drop them ({purge}: it drops them, be sure).")
    remedy = Remedy(label=f"browse /queue/{target.name}",
                    command=f"meshgate browse {target.name} --node {sheet.name}{vhost_option(target.vhost)}",
                    request=as_json(Browse(node=sheet.node, queue=target.name, vhost=target.vhost)))
    return new_finding("dlq_growing", "warning", sheet, target.vhost, target.name,
                       f"/queue/{target.name} grew by {target.depth_growth} in {duration(target.over_s)}",
                       evidence, explanation, keys, remedy)


def _source(fact: DeadLetterFacts, target: str) -> str:
    parts = []
    if fact.dead_letter_queue == target and fact.dead_lettered:
        parts.append(f"{fact.dead_lettered} dead-lettered after {fact.max_delivery_attempts} delivery attempts")
    if fact.expiry_queue == target and fact.expired:
        parts.append(f"{fact.expired} expired")
    return f"/queue/{fact.name} ({', '.join(parts)})"


def _expiring(sheet: NodeFactSheet, fact: DeadLetterFacts) -> Finding:
    kept = bool(fact.expiry_queue)
    ttl = (f"its message_ttl_ms = {fact.message_ttl_ms} (for messages sent without an expiry)"
           if fact.message_ttl_ms is not None else
           "the expiry their senders gave them (STOMP expires, AMQP expiration)")
    evidence = (f"{fact.expired} message(s) of /queue/{fact.name} on {sheet.name} expired in the last "
                f"{duration(fact.over_s)}; " + (f"they went to /queue/{fact.expiry_queue}" if kept else
                                                "they were dropped (no expiry queue)")
                + f"; {fact.depth} wait there now")
    explanation = (f"Messages outlive {ttl} before anyone takes them: the consumers are too few or too slow, or the "
                   "expiry too short. "
                   + (f"They are kept in /queue/{fact.expiry_queue}." if kept else
                      "They are lost: set an expiry queue (broker.expiry_queue, or meshgate define-queue "
                      f"{fact.name} --expiry-queue QUEUE) to keep them."))
    keys = ([f"message_ttl_ms of queue {fact.name} (meshgate define-queue)"] if fact.message_ttl_ms is not None
            else []) + ([] if kept else ["broker.expiry_queue"])
    remedy = None
    if kept:
        remedy = Remedy(label=f"browse /queue/{fact.expiry_queue}",
                        command=f"meshgate browse {fact.expiry_queue} --node {sheet.name}{vhost_option(fact.vhost)}",
                        request=as_json(Browse(node=sheet.node, queue=fact.expiry_queue, vhost=fact.vhost)))
    return new_finding("expiring", "info" if kept else "warning", sheet, fact.vhost, fact.name,
                       f"{fact.expired} message(s) of /queue/{fact.name} expired in {duration(fact.over_s)}",
                       evidence, explanation, keys, remedy)


def durable_findings(sheet: NodeFactSheet, gone_s: float) -> list[Finding]:
    findings = []
    for durable in sheet.durables:
        if durable.subscribed_elsewhere or not durable.depth:
            continue  # its subscriber is on another node (the messages follow it), or nothing waits
        if durable.detached_for_s is None or durable.detached_for_s < gone_s:
            continue
        findings.append(_abandoned(sheet, durable))
    return findings


def _abandoned(sheet: NodeFactSheet, durable: DurableFacts) -> Finding:
    gone = duration(durable.detached_for_s or 0.0)
    evidence = (f"durable subscription {durable.name} to {durable.topic} on {sheet.name} has had no subscriber for "
                f"{gone} at least, and keeps {durable.depth} message(s) for it")
    explanation = ("A durable subscription keeps every message of its topic until its subscriber comes back, "
                   "however long that takes: if it is not coming back, what is kept only grows. Delete the "
                   "subscription (on every node, with what waits for it) if nobody will resume it; a subscriber "
                   "that connects meanwhile makes the deletion be refused.")
    remedy = Remedy(label=f"delete durable subscription {durable.name}",
                    command=f"meshgate undefine durable {durable.name}{vhost_option(durable.vhost)}",
                    request=as_json(DeleteDefinition(kind="durable", name=durable.name, vhost=durable.vhost)),
                    confirm=True)
    return new_finding("durable_abandoned", "warning", sheet, durable.vhost, durable.name,
                       f"durable subscription {durable.name}: no subscriber for {gone}, {durable.depth} message(s) "
                       "kept", evidence, explanation, [], remedy)
