"""What the worker sends to browsers: the mesh's rows as JSON-ready dicts. One
function builds them for the first message of a connection and for every update,
so a page never sees two shapes of the same thing. They take a frame (computed
here, or shared by the worker: console.mesh.shared)."""

from __future__ import annotations

import msgspec

MESH = "mesh"  # groups: overview, nodes and links
QUEUES = "mesh.queues"  # the queue rows (totals per queue)
EVENTS = "mesh.events"  # every event as it happens
GROUPS = {"mesh": MESH, "queues": QUEUES, "events": EVENTS}


def mesh_state(frame) -> dict:
    return {
        "type": "mesh",
        "overview": msgspec.to_builtins(frame.overview),
        "nodes": msgspec.to_builtins(frame.nodes),
        "links": [{k: v for k, v in link.items() if k != "ends"} for link in msgspec.to_builtins(frame.links)],
    }


def queue_state(frame) -> dict:
    """Every queue's totals; where the messages are (``nodes``) only for the queues that
    are moving between nodes now — a mesh may hold a hundred thousand partial queues."""
    moving = [row for row in frame.queues if row.rates.forward or row.rates.redistribute]
    where = {row.key: msgspec.to_builtins(row.nodes) for row in frame.with_where_of(moving)}
    rows = [{
        "name": row.name, "vhost": row.vhost, "messages": row.messages, "depth": row.depth, "in_flight": row.in_flight,
        "forwarding": row.forwarding, "in_doubt": row.in_doubt, "consumers": row.consumers,
        "node_count": row.node_count, "rates": msgspec.to_builtins(row.rates), "nodes": where.get(row.key, []),
    } for row in frame.queues]
    return {"type": "queues", "queues": rows}
