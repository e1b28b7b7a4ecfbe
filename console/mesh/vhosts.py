"""The vhosts as the console shows them, from the nodes' ``vhost_list`` answers:
one row per vhost, summed over the nodes, with each node's part."""

from __future__ import annotations

from model.names import DEFAULT_VHOST
from model.requests import VhostRow


def others(rows: list[VhostRow]) -> list[str]:
    """The vhosts besides ``/`` the nodes have (not merely messages stored for one), by name."""
    return sorted({row.name for row in rows if row.name != DEFAULT_VHOST and row.origin != "stored"})


def vhost_rows(rows: list[VhostRow], names: dict[str, str]) -> list[dict]:
    """One row per vhost: what it holds summed over the nodes that answered, and per node."""
    by_name: dict[str, list[VhostRow]] = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    result = []
    for name, parts in by_name.items():
        nodes = sorted(({"node": p.node, "node_name": names.get(p.node, p.node[:8]), "origin": p.origin,
                         "queues": p.queues, "messages": p.messages, "connections": p.connections} for p in parts),
                       key=lambda part: str(part["node_name"]))
        result.append({"name": name, "origin": ", ".join(sorted({p.origin for p in parts})),
                       "queues": sum(p.queues for p in parts), "messages": sum(p.messages for p in parts),
                       "connections": sum(p.connections for p in parts), "node_count": len(parts), "nodes": nodes})
    return result
