"""What the worker sends to browsers: the mesh's rows as JSON-ready dicts. One
function builds them for the first message of a connection and for every update,
so a page never sees two shapes of the same thing."""

from __future__ import annotations

import msgspec

from console.mesh.view import MeshView

MESH = "mesh"  # groups: overview, nodes and links
QUEUES = "mesh.queues"  # the queue rows (totals per queue)
EVENTS = "mesh.events"  # every event as it happens
GROUPS = {"mesh": MESH, "queues": QUEUES, "events": EVENTS}


def mesh_state(view: MeshView) -> dict:
    return {
        "type": "mesh",
        "overview": msgspec.to_builtins(view.overview()),
        "nodes": msgspec.to_builtins(view.nodes()),
        "links": [{k: v for k, v in link.items() if k != "ends"} for link in msgspec.to_builtins(view.links())],
    }


def queue_state(view: MeshView) -> dict:
    frame = view.frame
    rows = []
    for row in frame.queues:
        rows.append({
            "name": row.name, "messages": row.messages, "depth": row.depth, "in_flight": row.in_flight,
            "forwarding": row.forwarding, "in_doubt": row.in_doubt, "consumers": row.consumers,
            "node_count": row.node_count, "rates": msgspec.to_builtins(row.rates),
            "nodes": frame.queue_nodes(row.name),
        })
    return {"type": "queues", "queues": rows}
