"""The stuck-message doctor's reasoning (docs/doctor.md): ``diagnose`` turns every
node's facts (model.diagnosis.NodeFactSheet, the ``node_facts`` answer) into
findings, each with its evidence, an explanation naming the configuration key
behind it, and a remedy: the ``meshgate`` command and the management request that
does it.

A pure function of its inputs (no clock, no I/O), so each kind and cause is tested
on hand-made facts; the node side (management/doctor_node.py) gathers the facts."""

from __future__ import annotations

import shlex
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, fields

from management.doctor_common import age, as_json, duration, new_finding, quoted, vhost_option
from management.doctor_consumers import stalled_findings
from management.doctor_producers import producers_paused
from management.doctor_queues import dead_letter_findings, durable_findings
from model.diagnosis import (
    SEVERITIES,
    DiagnosisReport,
    Finding,
    NodeFactSheet,
    PeerFacts,
    QueueFacts,
    Remedy,
    Severity,
    UnansweredNode,
)
from model.names import DEFAULT_VHOST
from model.requests import CloseConnection, Forget, Move, Redistribute


@dataclass(frozen=True)
class Thresholds:
    """How old something must be before it is a finding (seconds)."""

    waiting_s: float = 60.0  # a backlog with no local consumer, while consumers wait elsewhere
    in_doubt_s: float = 60.0  # messages held for an absent peer
    unacked_s: float = 300.0  # a consumer's oldest unacked delivery
    paused_s: float = 60.0  # a producer's connection not read (flow control)
    durable_gone_s: float = 3600.0  # a durable subscription's subscriber gone, with messages kept for it
    stalled_s: float = 60.0  # a backlog whose consumers all take no more (prefetch full, socket backed up)

    @classmethod
    def of(cls, table: object) -> Thresholds:
        """The thresholds among ``table``'s attributes (the ``[doctor]`` table, which has more keys)."""
        return cls(**{threshold.name: getattr(table, threshold.name) for threshold in fields(cls)})


DEFAULT_THRESHOLDS = Thresholds()  # as [doctor]'s defaults (meshgate/config/doctor.py)


def diagnose(sheets: Sequence[NodeFactSheet], thresholds: Thresholds = Thresholds(),
             unanswered: Sequence[UnansweredNode] = ()) -> list[Finding]:
    """Every finding the facts show, most urgent first (then by node and subject)."""
    mesh = _MeshGraph(sheets)
    findings: list[Finding] = []
    for missing in unanswered:
        findings.append(_unanswered(missing))
    for sheet in sheets:
        findings.extend(_stranded_backlogs(sheet, mesh, thresholds))
        findings.extend(_peer_findings(sheet, thresholds))
        findings.extend(_unacked(sheet, thresholds))
        findings.extend(producers_paused(sheet, thresholds.paused_s))
        findings.extend(dead_letter_findings(sheet))
        findings.extend(durable_findings(sheet, thresholds.durable_gone_s))
        findings.extend(stalled_findings(sheet, thresholds.stalled_s))
    rank = {severity: i for i, severity in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (rank[f.severity], f.node_name, f.kind, f.subject))
    return findings


# -- the mesh as the facts show it ------------------------------------------------------------


class _MeshGraph:
    """Who is linked with whom (links up, as either end reports them), who consumes which
    queue, and each node's settings: what finding A reasons over."""

    def __init__(self, sheets: Sequence[NodeFactSheet]) -> None:
        self.sheets = {sheet.node: sheet for sheet in sheets}
        self.names = {sheet.node: sheet.name for sheet in sheets}
        self.neighbours: dict[str, set[str]] = {}
        for sheet in sheets:
            for peer in sheet.peers:
                self.names.setdefault(peer.peer, peer.peer_name)
                if peer.state == "up":
                    self.neighbours.setdefault(sheet.node, set()).add(peer.peer)
                    self.neighbours.setdefault(peer.peer, set()).add(sheet.node)

    def name(self, node: str) -> str:
        return self.names.get(node, node[:8])

    def consumers_of(self, vhost: str, queue: str) -> dict[str, int]:
        return {sheet.node: q.consumers for sheet in self.sheets.values() for q in sheet.queues
                if q.vhost == vhost and q.name == queue and q.consumers}

    def path(self, start: str, goal: str) -> list[str] | None:
        """A shortest path over links up (breadth first; ties by node id, so it is the same each run)."""
        before: dict[str, str | None] = {start: None}
        todo = deque([start])
        while todo:
            node = todo.popleft()
            if node == goal:
                path = [node]
                while (previous := before[path[-1]]) is not None:
                    path.append(previous)
                return path[::-1]
            for neighbour in sorted(self.neighbours.get(node, ())):
                if neighbour not in before:
                    before[neighbour] = node
                    todo.append(neighbour)
        return None


# -- A. stranded backlog --------------------------------------------------------------------


def _stranded_backlogs(sheet: NodeFactSheet, mesh: _MeshGraph, thresholds: Thresholds) -> list[Finding]:
    if sheet.mesh is None:
        return []  # a node alone: there is nowhere else for its messages to go
    findings = []
    for queue in sheet.queues:
        if queue.vhost != DEFAULT_VHOST:
            continue  # the mesh carries the default vhost's queues only
        if not queue.depth or queue.consumers or (queue.oldest_age_ms or 0) < thresholds.waiting_s * 1000:
            continue
        elsewhere = {node: n for node, n in mesh.consumers_of(queue.vhost, queue.name).items() if node != sheet.node}
        if not elsewhere:
            continue  # nobody consumes it anywhere: waiting is all it can do
        if queue.forwarding and queue.remote_dispatch:
            continue  # it is on its way to the consumers now: a backlog draining, not stranded
        findings.append(_stranded(sheet, queue, elsewhere, mesh))
    return findings


def _stranded(sheet: NodeFactSheet, queue: QueueFacts, elsewhere: dict[str, int], mesh: _MeshGraph) -> Finding:
    settings = sheet.mesh
    assert settings is not None
    here, destination = sheet.node, "/queue/" + queue.name
    paths = {node: mesh.path(here, node) for node in elsewhere}
    reachable = sorted((len(path) - 1, node) for node, path in paths.items() if path is not None)
    target = reachable[0][1] if reachable else sorted(elsewhere)[0]
    path = paths[target]
    next_hop = path[1] if path is not None and len(path) > 1 else None
    where = ", ".join(f"{mesh.name(node)} ({count})" for node, count in sorted(elsewhere.items()))
    evidence = (f"{queue.depth} message(s) wait on {sheet.name}, the oldest for {age(queue.oldest_age_ms)}, "
                f"with no consumer there; consumers on {where}")
    if path is not None:
        evidence += f"; shortest path {' → '.join(mesh.name(node) for node in path)}"
    heard = sorted({demand.node for demand in queue.remote_demand})
    evidence += (f"; {sheet.name} hears of consumers on {', '.join(mesh.name(n) for n in heard)}" if heard else
                 f"; {sheet.name} hears of no consumer elsewhere")

    def finding(explanation: str, keys: list[str], remedy: Remedy | None,
                severity: Severity = "warning") -> Finding:
        return new_finding("stranded_backlog", severity, sheet, queue.vhost, queue.name,
                        f"{destination}: {queue.depth} message(s) stranded on {sheet.name} while "
                        f"{mesh.name(target)} has consumers", evidence, explanation, keys, remedy)

    move = _move_remedy(sheet, queue, next_hop, mesh) if next_hop is not None else None
    # The causes in the order docs/doctor.md gives: the first that holds explains it.
    for node in [here, *(path or [target])[1:]]:
        other = mesh.sheets.get(node)
        if other is not None and other.mesh is not None and not _carries(other.mesh.addresses, destination):
            # No move helps: the node that filters it neither forwards it nor passes the demand on.
            return finding(
                f"mesh.addresses on {mesh.name(node)} ({quoted(other.mesh.addresses)}) excludes {destination}: "
                + ("this node never forwards it" if node == here else
                   f"{mesh.name(node)} neither passes it on nor tells of the consumers beyond")
                + ". Change the filter there if the mesh is to carry it.", ["mesh.addresses"], None)
    mode = settings.message_load_balancing
    if mode == "OFF":
        return finding('mesh.message_load_balancing = "OFF" on ' f"{sheet.name}: it never forwards queue "
                       "messages, so its backlog stays for local consumers only. A move hands it over regardless.",
                       ["mesh.message_load_balancing"], move)
    if mode == "STRICT":
        return finding('mesh.message_load_balancing = "STRICT" on ' f"{sheet.name}: new messages are spread "
                       "over the consumers' nodes as they are sent, but a backlog never follows consumers "
                       "elsewhere.", ["mesh.message_load_balancing"], move)
    if path is None:
        down = [peer for peer in sheet.peers if peer.state == "down"]
        links = "; ".join(f"the link with {peer.peer_name} is down for {duration(peer.for_s)}" for peer in down)
        gave_up = settings.reconnect_attempts >= 0
        return finding(
            f"No path of links up leads from {sheet.name} to {mesh.name(target)}"
            + (f": {links}" if links else "") + "."
            + (f" mesh.reconnect_attempts = {settings.reconnect_attempts}: this node may have stopped redialling."
               if gave_up and down else " Bring the link back; the backlog follows by itself."),
            ["mesh.reconnect_attempts"] if gave_up and down else [], None, "critical")
    assert next_hop is not None
    link = next((peer for peer in sheet.peers if peer.peer == next_hop), None)
    if not settings.duplex and link is not None and not link.dialled:
        return finding(f"mesh.duplex = false on {sheet.name}, and {mesh.name(next_hop)} dialled the link between "
                       "them: traffic goes only from the dialler, so nothing goes from here to there.",
                       ["mesh.duplex"], None)
    if target not in heard:
        too_small = _max_hops_too_small(path, mesh)
        if too_small:
            hops = len(path) - 1
            nodes = ", ".join(f"{mesh.name(node)} (max_hops = {value})" for node, value in too_small)
            return finding(
                f"{mesh.name(target)} is {hops} hops away, but mesh.max_hops on {nodes} stops its consumers' "
                f"demand from being passed on towards {sheet.name}, so {sheet.name} never hears of them. Move the "
                f"backlog to {mesh.name(next_hop)} (which forwards it on), and raise mesh.max_hops to {hops} or "
                "more there.", ["mesh.max_hops"], move)
    if link is not None and link.busy_for_s is not None:
        return finding(f"{mesh.name(next_hop)} said its store is full {duration(link.busy_for_s)} ago: nothing is "
                       "forwarded to it until it has room (its store.limit or store.max_disk_usage).",
                       ["store.limit", "store.max_disk_usage"], None)
    if heard and not queue.remote_dispatch:
        delay = queue.redistribution_delay_ms
        key = queue.redistribution_key
        mode_text = (' with mesh.message_load_balancing = "OFF_WITH_REDISTRIBUTION" (a backlog moves only by '
                     "redistribution)") if mode == "OFF_WITH_REDISTRIBUTION" else ""
        # Ending the hold lets the backlog follow the consumers by the mesh's own means.
        release = _redistribute_remedy(sheet, queue)
        if delay < 0:
            return finding(f"{key} = -1 for {destination} on {sheet.name}{mode_text}: once its last local consumer "
                           "left, its backlog is kept here for good, never redistributed. Redistributing releases "
                           "it now.", [key, "mesh.message_load_balancing"] if mode_text else [key], release,
                           "critical")
        state = "is running" if queue.hold_pending else "has not released it"
        return finding(f"{key} = {delay} for {destination} on {sheet.name}{mode_text}: its last local consumer "
                       f"left and the redistribution delay {state}; the backlog waits here until then, or until "
                       "it is redistributed now.", [key, "mesh.message_load_balancing"] if mode_text else [key],
                       release)
    return finding(f"{sheet.name} hears of the consumers and may forward to them, yet the backlog stays: the "
                   "consumers' selectors may match none of it, the link's window may be full, or the messages "
                   f"crossed {mesh.name(next_hop)} already (docs/doctor.md). A move hands it over.", [], move, "info")


def _max_hops_too_small(path: list[str], mesh: _MeshGraph) -> list[tuple[str, int]]:
    """The nodes on ``path`` (from the backlog to the consumers) whose mesh.max_hops stops the
    consumers' demand: the node k hops from the consumers holds a demand record of path length
    k and passes it on only when k < its max_hops (mesh.demand.Demand._advertise)."""
    culprits = []
    distance = len(path) - 1
    for k in range(1, distance):
        node = path[distance - k]
        sheet = mesh.sheets.get(node)
        if sheet is not None and sheet.mesh is not None and sheet.mesh.max_hops <= k:
            culprits.append((node, sheet.mesh.max_hops))
    return culprits


def _move_remedy(sheet: NodeFactSheet, queue: QueueFacts, to_node: str, mesh: _MeshGraph) -> Remedy:
    request = Move(node=sheet.node, queue=queue.name, to_node=to_node, vhost=queue.vhost)
    vhost = "" if queue.vhost == DEFAULT_VHOST else f" --vhost {queue.vhost}"
    return Remedy(label=f"move the backlog to {mesh.name(to_node)}",
                  command=f"meshgate move {queue.name} --node {sheet.name} --to-node {mesh.name(to_node)}{vhost}",
                  request=as_json(request))


def _redistribute_remedy(sheet: NodeFactSheet, queue: QueueFacts) -> Remedy:
    return Remedy(label="end the redistribution delay: the backlog follows the consumers now",
                  command=f"meshgate redistribute {queue.name} --node {sheet.name}{vhost_option(queue.vhost)}",
                  request=as_json(Redistribute(node=sheet.node, queue=queue.name, vhost=queue.vhost)))


def _carries(addresses: list[str], destination: str) -> bool:
    """As meshgate.config.mesh.MeshConfig.carries, from the reported ``mesh.addresses``."""
    includes = tuple(a for a in addresses if not a.startswith("!"))
    excludes = tuple(a[1:] for a in addresses if a.startswith("!"))
    if includes and not destination.startswith(includes):
        return False
    return not (excludes and destination.startswith(excludes))


# -- B. in doubt too long; kept for a departed node ------------------------------------------


def _peer_findings(sheet: NodeFactSheet, thresholds: Thresholds) -> list[Finding]:
    findings = []
    settings = sheet.mesh
    timeout_ms = settings.in_doubt_timeout_ms if settings is not None else 0
    retention_s = settings.peer_retention_s if settings is not None else 0
    for peer in sheet.peers:
        # Departures.forget takes a node neither linked nor heard of (through any node).
        forgettable = peer.state == "down" and peer.heard_ago_s is None
        forget = _forget_remedy(peer) if forgettable else None
        if peer.in_doubt and peer.in_doubt_for_s is not None and peer.in_doubt_for_s >= thresholds.in_doubt_s:
            released_in = timeout_ms / 1000.0 - peer.in_doubt_for_s
            evidence = (f"{sheet.name} holds {peer.in_doubt} message(s) out of its queues for "
                        f"{duration(peer.in_doubt_for_s)}, until {peer.peer_name} says whether it has them; "
                        f"the link is {peer.state}"
                        + (f" for {duration(peer.for_s)}" if peer.state == "down" else ""))
            explanation = (f"They went to {peer.peer_name} as its link went: it may have them, so they wait for its "
                           f"answer or for mesh.in_doubt_timeout_ms = {timeout_ms}"
                           + (f" (released in about {duration(released_in)})." if released_in > 0 else ".")
                           + (f" {peer.peer_name} is not heard of: if it is gone for good, forgetting it releases "
                              "them now." if forget else
                              " Bring the node back, or wait."))
            findings.append(new_finding("in_doubt_waiting", "warning", sheet, DEFAULT_VHOST, peer.peer,
                                     f"{peer.in_doubt} message(s) held for {peer.peer_name} for "
                                     f"{duration(peer.in_doubt_for_s)}", evidence, explanation,
                                     ["mesh.in_doubt_timeout_ms"], forget))
        kept = peer.backlog or peer.markers
        if peer.state == "down" and kept and (peer.departed or peer.for_s >= thresholds.in_doubt_s):
            what = ", ".join(part for part in (f"{peer.backlog} topic message(s)" if peer.backlog else "",
                                               f"{peer.markers} duplicate marker(s)" if peer.markers else "") if part)
            heard = not forgettable
            evidence = (f"{sheet.name} keeps {what} for {peer.peer_name}, whose link is down for "
                        f"{duration(peer.for_s)}" + (f"; the mesh heard of it {duration(peer.heard_ago_s or 0)} ago"
                                                      if heard else "; the mesh no longer hears of it"))
            retention = ("mesh.peer_retention_s = 0: only meshgate forget lets it go" if retention_s == 0 else
                         f"mesh.peer_retention_s = {retention_s}: kept until it has not been heard of that long")
            explanation = (f"What is kept for a node that went waits for its return ({retention}). "
                           + ("It is still heard of through other nodes, so forget would be refused: bring its "
                              "link back." if heard else
                              "If it is gone for good, forget it: what was kept for it is dropped."))
            findings.append(new_finding("kept_for_departed", "info" if heard else "warning", sheet, DEFAULT_VHOST,
                                     peer.peer, f"{what} kept for {peer.peer_name}, away for {duration(peer.for_s)}",
                                     evidence, explanation, ["mesh.peer_retention_s"],
                                     forget))
    return findings


def _forget_remedy(peer: PeerFacts) -> Remedy:
    return Remedy(label=f"forget {peer.peer_name} (it is gone for good)", command=f"meshgate forget {peer.peer}",
                  request=as_json(Forget(forget=peer.peer)), confirm=True)


# -- C. consumers holding unacked deliveries --------------------------------------------------


def _unacked(sheet: NodeFactSheet, thresholds: Thresholds) -> list[Finding]:
    by_connection: dict[str, list] = {}
    for consumer in sheet.consumers:
        if consumer.unacked and consumer.unacked_for_s is not None and consumer.unacked_for_s >= thresholds.unacked_s:
            by_connection.setdefault(consumer.connection, []).append(consumer)
    findings = []
    for connection, consumers in sorted(by_connection.items()):
        oldest = max(consumer.unacked_for_s for consumer in consumers)
        count = sum(consumer.unacked for consumer in consumers)
        queues = sorted({consumer.queue for consumer in consumers})
        vhost = consumers[0].vhost
        sampled = f" (sampled every {duration(sheet.sample_s)})" if sheet.sample_s else ""
        evidence = (f"connection {connection} on {sheet.name} holds {count} unacked deliveries of "
                    f"{', '.join('/queue/' + q for q in queues)}; the oldest unacked for {duration(oldest)} at least"
                    + sampled)
        explanation = ("The client took these messages and neither acknowledged nor returned them: no other "
                       "consumer may have them while it holds them. Its prefetch (STOMP activemq.prefetchSize, AMQP "
                       "basic.qos) lets it hold this many. Closing the connection returns them, redelivered.")
        remedy = Remedy(label=f"close connection {connection}", command=f"meshgate close {connection} --node "
                        f"{sheet.name}", request=as_json(CloseConnection(node=sheet.node, connection=connection,
                                                                       reason="closed by the doctor's remedy")),
                        confirm=True)
        findings.append(new_finding("unacked_old", "warning", sheet, vhost, connection,
                                 f"connection {connection} holds {count} unacked deliveries for {duration(oldest)}",
                                 evidence, explanation, [], remedy))
    return findings


# -- nodes that did not answer -----------------------------------------------------------------


def _unanswered(missing: UnansweredNode) -> Finding:
    return Finding(id=f"node_unanswered/{missing.node[:8]}/{DEFAULT_VHOST}/{missing.node}", kind="node_unanswered",
                   severity="warning", node=missing.node, node_name=missing.name, subject=missing.node,
                   summary=f"node {missing.name} did not answer: the findings leave out what it holds",
                   evidence=missing.reason,
                   explanation="The asked node could not reach it over the mesh links in time; what waits there, "
                               "and what others wait for from it, is unknown to this diagnosis.")


# -- printing (meshgate doctor) ----------------------------------------------------------------


def format_diagnosis(report: DiagnosisReport) -> str:
    """The findings grouped by severity, each with its evidence, explanation and remedy."""
    checked = len(report.nodes)
    lines = [f"{len(report.findings)} finding(s) over {checked} node(s)"
             + (f"; {len(report.unanswered)} did not answer" if report.unanswered else "")]
    if not report.findings:
        lines.append("nothing stuck: no backlog stranded, no old doubt, no old unacked delivery, no producer paused, "
                     "no consumers stalled, no dead letters piling up, no durable subscription abandoned")
    for severity in SEVERITIES:
        findings = [finding for finding in report.findings if finding.severity == severity]
        if not findings:
            continue
        lines += ["", f"{severity.upper()} ({len(findings)})"]
        for finding in findings:
            lines.append(f"  [{finding.id}] {finding.summary}")
            lines.append(f"    evidence: {finding.evidence}")
            lines.append(f"    why: {finding.explanation}")
            if finding.remedy is not None:
                confirm = "  (drops or disconnects something: be sure)" if finding.remedy.confirm else ""
                lines.append(f"    fix: {finding.remedy.command}{confirm}")
                if finding.remedy.request is not None:  # apply_remedy can do it
                    yes = " --yes" if finding.remedy.confirm else ""
                    lines.append(f"     or: meshgate doctor --fix {shlex.quote(finding.id)}{yes}")
    return "\n".join(lines)
