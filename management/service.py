"""Answers management requests sent over the messaging protocol itself, as
ActiveMQ's statistics plugin does: SEND to /queue/meshgate.management with a
``meshgate-request`` header and a ``reply-to``; the JSON answer goes there.

Requests that change something need the ``admin`` permission on the management
address, checked against the sender's authenticated session."""

from __future__ import annotations

import json
from typing import Callable

from gateway.broker.broker import TEMP, Broker
from gateway.broker.message import QUEUE, TOPIC, Message

ADDRESS = "meshgate.management"


class ManagementService:
    def __init__(self, broker: Broker, node_id: str, name: str, mesh_view: Callable[[], dict] | None,
                 forget_node: Callable[[str], str | None] | None = None, authorizer=None) -> None:
        self.broker = broker
        self.node_id = node_id
        self.name = name
        self.mesh_view = mesh_view
        self.forget_node = forget_node
        self.authorizer = authorizer
        broker.register_service(ADDRESS, self.handle)

    def handle(self, message: Message, session) -> None:
        reply_to = message.headers.get("reply-to")
        target = _destination(reply_to) if reply_to else None
        if target is None:
            return  # nowhere to answer; nothing is queued either
        request = message.headers.get("meshgate-request", "topology")
        answers = {"topology": self.topology, "stat": self.local_stat, "forget": self.forget}
        answer = answers.get(request)
        if answer is None:
            body = {"error": f"unknown request {request!r}; use one of {sorted(answers)}"}
        elif request == "forget" and not self._admin(session):
            body = {"error": f"forget needs the admin permission on /queue/{ADDRESS}"}
        else:
            body = answer(message.headers) if request == "forget" else answer()
        headers = {"content-type": "application/json"}
        if "correlation-id" in message.headers:
            headers["correlation-id"] = message.headers["correlation-id"]
        self.broker.send(target[0], target[1], headers, json.dumps(body).encode())

    def _admin(self, session) -> bool:
        if session is None:
            return False
        if self.authorizer is None or not self.authorizer.enabled:
            return True
        return self.authorizer.allowed(session.principal, "admin", "/queue/" + ADDRESS)

    def local_stat(self) -> dict:
        return {
            "node": {"id": self.node_id, "name": self.name},
            "queues": {name: {"depth": len(q), "consumers": len(q.consumers), "inflight": q.inflight,
                              "in_doubt": q.in_doubt}
                       for name, q in self.broker.queues.items()},
        }

    def forget(self, headers: dict[str, str]) -> dict:
        node_id = headers.get("meshgate-node", "")
        if self.forget_node is None:
            return {"error": "this node is not in a mesh"}
        if not node_id:
            return {"error": "forget needs a meshgate-node header: the id of the node to forget"}
        refusal = self.forget_node(node_id)
        return {"error": refusal} if refusal else {"forgotten": node_id}

    def topology(self) -> dict:
        if self.mesh_view is None:
            stat = self.local_stat()
            queues = {name: [q["depth"], q["consumers"], q["inflight"], q["in_doubt"]]
                      for name, q in stat["queues"].items()}
            nodes = {self.node_id: {"name": self.name, "links": [], "queues": queues}}
        else:
            nodes = self.mesh_view()
        return {"self": self.node_id, "nodes": nodes}


def _destination(text: str) -> tuple[str, str] | None:
    for prefix, kind in (("/queue/", QUEUE), ("/topic/", TOPIC), ("/remote-temp-queue/", TEMP)):
        if text.startswith(prefix) and len(text) > len(prefix):
            return kind, text[len(prefix):]
    return None
