"""How the ``meshgate`` commands print management answers: plain tables."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import msgspec

from model.definitions import Definition, TraceSpec, VhostSpec
from model.events import AdminAction, Event
from model.latency import percentile_ms
from model.mesh import ClusterView, Connection, Link, Node, PartialQueue, TopicSubscription
from model.names import DEFAULT_VHOST, quoted
from model.requests import BrowsePage, Done, PermissionRow, VhostRow


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], right: set[int] | None = None) -> str:
    """Columns as wide as their widest cell; numbers right-aligned."""
    texts = [[_cell(value) for value in row] for row in rows]
    right = right if right is not None else {i for i, column in enumerate(zip(*texts, strict=False))
                                             if all(_numeric(value) for value in column)}
    widths = [max([len(h), *(len(row[i]) for row in texts)]) for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers), *texts]:
        cells = [value.rjust(widths[i]) if i in right else value.ljust(widths[i]) for i, value in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _numeric(text: str) -> bool:
    return text.replace(".", "", 1).replace("-", "", 1).isdigit() or text == "-"


def ago(seconds: float) -> str:
    if seconds < 1:
        return "now"
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def since(epoch: float, now: float | None = None) -> str:
    return ago((now or time.time()) - epoch)


# -- nodes ----------------------------------------------------------------------------------


def format_nodes(view: ClusterView) -> str:
    names = {summary.node.id: summary.node.name for summary in view.nodes}
    reporter = names.get(view.reporter, view.reporter[:8])
    up = sum(1 for summary in view.nodes if summary.node.state != "down")
    lines = [f"{len(view.nodes)} node(s), {up} up, as seen from {reporter}"]
    for summary in view.nodes:
        node = summary.node
        fresh = "answered now" if summary.answered else f"last heard {ago(summary.age)}"
        if node.state == "down":
            fresh = f"down, last heard {since(node.last_seen, view.taken_at)}"
        links = ", ".join(sorted(names.get(peer, peer[:8]) for peer in summary.links)) or "-"
        lines.append(f"  {node.name} ({node.id}) {node.state}; stomp {node.addresses.stomp or '?'}; "
                     f"links: {links}; {fresh}{format_ha(node)}")
        for queue in sorted(summary.queues, key=lambda q: (q.vhost != DEFAULT_VHOST, q.vhost, q.name)):
            where = "" if queue.vhost == DEFAULT_VHOST else f" (vhost {quoted(queue.vhost)})"
            counts = format_counts(queue.depth, queue.in_flight, queue.in_doubt)
            lines.append(f"    /queue/{queue.name}{where}: {counts}, {queue.consumers} consumer(s)")
    return "\n".join(lines)


def format_ha(node: Node) -> str:
    """``; shared-store epoch 3, standby pid 42 on h2`` (nothing for a node without HA)."""
    if node.ha_mode == "none":
        return ""
    waiting = ", ".join(f"pid {s.pid} on {s.host}" for s in node.standbys)
    return f"; {node.ha_mode} epoch {node.epoch}, " + (f"standby {waiting}" if waiting else "no standby")


def format_counts(depth: int, in_flight: int, in_doubt: int) -> str:
    text = f"{depth} queued, {in_flight} in flight"
    # Only after a link loss or restart: held until a peer says whether it has them.
    return text + f", {in_doubt} in doubt" if in_doubt else text


# -- queues ---------------------------------------------------------------------------------


def format_stat(queues: list[PartialQueue]) -> str:
    """One node's queues, a line each."""
    return "\n".join(f"/queue/{q.name}: {format_counts(q.depth, q.in_flight + q.forwarding, q.in_doubt)}, "
                     f"{q.consumers} consumer(s)" for q in sorted(queues, key=lambda q: q.name))


def format_cluster_stat(queues: list[PartialQueue], names: dict[str, str]) -> str:
    """Each queue summed over the mesh, then its partial queue on each node."""
    by_queue: dict[str, list[PartialQueue]] = {}
    for queue in queues:
        by_queue.setdefault(queue.name, []).append(queue)
    rows = []
    for name in sorted(by_queue):
        parts = by_queue[name]
        rows.append(["/queue/" + name, sum(_held(q) for q in parts), sum(q.consumers for q in parts)])
        for part in sorted(parts, key=lambda q: names.get(q.node, q.node)):
            rows.append(["  " + names.get(part.node, part.node[:8]), _held(part), part.consumers])
    return table(["queue", "messages", "consumers"], rows, right={1, 2})


def _held(queue: PartialQueue) -> int:
    return queue.depth + queue.in_flight + queue.forwarding + queue.in_doubt


def format_queues(queues: list[PartialQueue], names: dict[str, str]) -> str:
    rows = []
    for q in sorted(queues, key=lambda q: (q.name, names.get(q.node, q.node))):
        p50, p99 = percentile_ms(q.latency, 0.5), percentile_ms(q.latency, 0.99)
        latency = f"{p50:.3g}/{p99:.3g}" if p50 is not None else "-"
        remote = sum(d.consumers for d in q.remote_demand)
        rows.append(["/queue/" + q.name, names.get(q.node, q.node[:8]), q.depth, q.in_flight, q.forwarding,
                     q.in_doubt, q.consumers, remote, q.enqueued, q.acked, q.forwarded_out, q.forwarded_in,
                     q.redistributed_out, q.redistributed_in, latency])
    return table(["queue", "node", "depth", "in-flight", "forwarding", "in-doubt", "consumers", "remote", "enqueued",
                  "acked", "fwd-out", "fwd-in", "redist-out", "redist-in", "p50/p99 ms"], rows,
                 right=set(range(2, 15)))


# -- links, subscriptions, connections --------------------------------------------------------


def format_links(links: list[Link], names: dict[str, str]) -> str:
    rows = [[names.get(link.node, link.node[:8]), link.peer_name, link.state, link.direction, since(link.since),
             link.in_flight, link.backlog, link.in_doubt, link.forwarded_out, link.forwarded_in] for link in links]
    return table(["node", "peer", "state", "direction", "since", "in-flight", "backlog", "in-doubt", "out", "in"],
                 rows, right={5, 6, 7, 8, 9})


def format_subscriptions(subscriptions: list[TopicSubscription], names: dict[str, str]) -> str:
    rows = [[names.get(s.node, s.node[:8]), s.name, s.destination, "durable" if s.durable else "-",
             "active" if s.active else "away", s.depth, s.in_flight, s.selector] for s in subscriptions]
    return table(["node", "subscription", "destination", "durable", "state", "depth", "in-flight", "selector"], rows,
                 right={5, 6})


def format_connections(connections: list[Connection], names: dict[str, str]) -> str:
    rows = [[c.id, names.get(c.node, c.node[:8]), c.remote, c.user, f"{c.protocol} {c.version}", since(c.since),
             c.channels or "-", c.subscriptions, c.unacked] for c in connections]
    return table(["connection", "node", "remote", "user", "protocol", "since", "channels", "subscriptions",
                  "unacked"], rows, right={6, 7, 8})


def format_definitions(records: list[Definition], names: dict[str, str]) -> str:
    """Mesh-wide definitions; deleted ones are listed until they expire (mesh.peer_retention_s)."""
    if not records:
        return ("no definitions: queue settings (meshgate define-queue), durable subscriptions and traced "
                "destinations (meshgate trace-on) appear here")
    rows = []
    for r in records:
        if r.deleted:
            what = "deleted"
        elif r.durable is not None:
            what = f"/topic/{r.durable.topic}" + (f" where {r.durable.selector}" if r.durable.selector else "")
        elif r.exchange is not None:
            what = r.exchange.type + ("" if r.exchange.durable else ", not durable")
        elif r.vhost is not None:
            what = r.vhost.description or "vhost"
        elif r.permission is not None:
            p = r.permission
            what = (f"{'user ' + p.user if p.user is not None else 'group ' + (p.group or '')} in {p.vhost}: "
                    f"configure {p.configure!r} write {p.write!r} read {p.read!r}")
        elif r.trace is not None:
            what = _trace(r.trace)
        elif r.binding is not None:
            b = r.binding
            what = f"{b.source or '(default)'} -> {b.destination_kind} {b.destination}" + (
                f" on {b.routing_key!r}" if b.routing_key else "")
        else:
            what = ", ".join(f"{k}={v}" for k, v in sorted(msgspec.to_builtins(r.queue).items())) or "defaults"
        # A binding's and a permission's name is what the definition column says.
        name = "" if r.binding is not None or r.kind == "permission" else r.name
        rows.append([r.kind, name, what, r.version, names.get(r.origin, r.origin[:8]), since(r.changed_at)])
    return table(["kind", "name", "definition", "version", "changed on", "changed"], rows, right={3})


def _trace(spec: TraceSpec) -> str:
    """A trace definition: how many it traces, until when (ended: it traces no more), by whom."""
    which = "every message" if spec.every == 1 else f"one in {spec.every} (rate {spec.rate:g})"
    until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(spec.until))
    ended = ", ended" if spec.until <= time.time() else ""
    return f"traced: {which} until {until}{ended}" + (f", by {spec.by}" if spec.by else "")


def format_vhosts(rows: list[VhostRow], names: dict[str, str]) -> str:
    """One row per vhost and node with its limits there; with several nodes, a mesh-wide
    total per vhost."""
    by_name: dict[str, list[VhostRow]] = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    lines = []
    for name, rows_of in sorted(by_name.items()):
        for row in sorted(rows_of, key=lambda r: names.get(r.node, r.node)):
            lines.append([name, row.origin, names.get(row.node, row.node[:8]), row.queues, row.messages,
                          row.connections, format_limits(row)])
        if len(rows_of) > 1:
            lines.append([name, "", "(all)", sum(r.queues for r in rows_of), sum(r.messages for r in rows_of),
                          sum(r.connections for r in rows_of), ""])
    return table(["vhost", "from", "node", "queues", "messages", "connections", "limits"], lines, right={3, 4, 5})


def format_permissions(rows: list[PermissionRow], names: dict[str, str]) -> str:
    """One row per permission and node, with where it comes from; a command's entry the
    node's configuration overrides is marked so, and so is a node that checks none."""
    if not rows:
        return ("no vhost permissions: every user may open every vhost (meshgate vhost permissions NAME --user U "
                "--configure RE --write RE --read RE sets some, and turns them on)")
    lines = []
    for row in sorted(rows, key=lambda r: (r.vhost, r.user or "", r.group or "", names.get(r.node, r.node))):
        source = row.source + ("" if row.in_force else " (ignored: the configuration's stands)") + (
            "" if row.map_active else " (not checked: the node has no users)")
        lines.append([row.vhost, f"user {row.user}" if row.user is not None else f"group {row.group}",
                      row.configure or '""', row.write or '""', row.read or '""', source,
                      names.get(row.node, row.node[:8])])
    return table(["vhost", "who", "configure", "write", "read", "from", "node"], lines)


def format_limits(limits: VhostRow | VhostSpec) -> str:
    """A vhost's limits as ``max_connections=5 max_queues=10``, "-" for none."""
    shown = [f"{field}={value}" for field in ("max_connections", "max_queues", "max_messages")
             if (value := getattr(limits, field)) is not None]
    return " ".join(shown) or "-"


# -- events, browsing, actions ----------------------------------------------------------------


def format_events(events: list[Event], names: dict[str, str]) -> str:
    lines = []
    for event in events:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.time))
        detail = " ".join(f"{field}={getattr(event, field)}" for field in event.__struct_fields__
                          if field not in ("time", "node"))
        if isinstance(event, AdminAction):
            detail = f"{event.user} {event.action} {event.target}: {'done' if event.ok else 'refused'}, {event.result}"
        lines.append(f"{stamp}  {names.get(event.node, event.node[:8]):<10} {event.__struct_config__.tag:<22} "
                     f"{detail}")
    return "\n".join(lines) if lines else "no events"


def format_browse(pages: list[BrowsePage], names: dict[str, str]) -> str:
    lines = []
    for page in pages:
        shown = f"{page.offset + 1}-{page.offset + len(page.messages)}" if page.messages else "none"
        lines.append(f"/queue/{page.queue} on {names.get(page.node, page.node[:8])}: {page.total} message(s), "
                     f"showing {shown}")
        for message in page.messages:
            flags = ", ".join(f for f, on in (("persistent", message.persistent),
                                             ("redelivered", message.redelivered)) if on)
            lines.append(f"  {message.id}  priority {message.priority}, {message.size} bytes"
                         + (f", {flags}" if flags else ""))
            for key, value in sorted(message.headers.items()):
                lines.append(f"    {key}: {value}")
            lines.append("    " + repr(message.body) + (" …" if message.truncated else ""))
    return "\n".join(lines)


def format_done(done: list[Done], names: dict[str, str]) -> str:
    verbs = {"purge": "purged", "delete_queue": "deleted", "move": "moved", "redistribute": "released", "send": "sent",
             "close_connection": "closed", "scale_down": "scaling down", "forget": "forgot",
             "define_queue": "defined", "delete_definition": "deleted the definition of"}
    lines = []
    for item in done:
        what = verbs.get(item.action, item.action)
        counted = item.action in ("purge", "delete_queue", "move", "redistribute")
        count = f" {item.count} message(s) of" if counted else ""
        detail = f" {item.detail}" if item.detail else ""
        lines.append(f"{names.get(item.node, item.node[:8])}: {what}{count} {item.target}{detail}")
    return "\n".join(lines)
