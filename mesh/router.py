"""Requests to any node of the mesh, carried over the links.

A request travels along the shortest path of links the topology knows (its
``route``: origin first, target last); each node on the way passes it on, the
target hands it to the handler the management layer registered and sends the
answer back along the same route. The mesh knows nothing of what is asked: a
request and its answer are JSON values. A node on the way that is no longer
linked with the next one answers ``{"unreachable": why}`` instead."""

from __future__ import annotations

import itertools
import logging
import uuid
from typing import TYPE_CHECKING, Any, Callable

from twisted.internet import defer

from mesh.codec import FrameType

if TYPE_CHECKING:
    from mesh.link import LinkProtocol
    from mesh.node import MeshNode

log = logging.getLogger(__name__)

Handler = Callable[[Any, str], "defer.Deferred | Any"]  # (request, origin node id) -> answer


class Unreachable(Exception):
    """No answer from the node: no path to it, a link on the way went, or it was too slow."""


class Router:
    def __init__(self, mesh: MeshNode) -> None:
        self.mesh = mesh
        self.handler: Handler | None = None
        self._ids = itertools.count(1)
        self._boot = uuid.uuid4().hex[:8]  # a late answer to a request from before a restart matches nothing
        self._pending: dict[str, tuple[defer.Deferred, object]] = {}

    def request(self, target: str, body: Any, timeout: float = 5.0) -> defer.Deferred:
        """Ask ``target``; fires with its answer, or fails with Unreachable."""
        route = self.mesh.topology.route(target)
        if route is None:
            return defer.fail(Unreachable(f"no path of links to node {target} is known"))
        request_id = f"{self.mesh.node_id}:{self._boot}:{next(self._ids)}"
        d = defer.Deferred()
        timer = self.mesh.reactor.callLater(timeout, self._timed_out, request_id, target, timeout)
        self._pending[request_id] = (d, timer)
        self._forward(FrameType.REQUEST, {"id": request_id, "route": route, "body": body}, route[1])
        return d

    def _timed_out(self, request_id: str, target: str, timeout: float) -> None:
        pending = self._pending.pop(request_id, None)
        if pending is not None:
            pending[0].errback(Unreachable(f"node {target} did not answer within {timeout:g} s"))

    def _forward(self, kind: int, frame: dict, next_hop: str) -> bool:
        peer = self.mesh.peers.get(next_hop)
        if peer is None:
            return False
        peer.link.send_control(kind, frame)
        return True

    def request_received(self, link: LinkProtocol, frame: dict) -> None:
        route = frame.get("route") or []
        if self.mesh.node_id not in route:
            return
        here = route.index(self.mesh.node_id)
        if here + 1 < len(route):
            if not self._forward(FrameType.REQUEST, frame, route[here + 1]):
                self._answer(frame, here, {"unreachable": f"node {self.mesh.name} is not linked with the next "
                                                          f"node on the way, {route[here + 1]}"})
            return
        if self.handler is None:
            self._answer(frame, here, {"unreachable": f"node {self.mesh.name} answers no requests"})
            return
        d = defer.maybeDeferred(self.handler, frame.get("body"), route[0])
        d.addCallback(lambda answer: self._answer(frame, here, {"answer": answer}))
        d.addErrback(self._failed, frame, here)

    def _failed(self, failure, frame: dict, here: int) -> None:
        log.error("management request failed on this node: %s", failure.getTraceback())
        self._answer(frame, here, {"unreachable": f"node {self.mesh.name} failed: {failure.getErrorMessage()}"})

    def _answer(self, frame: dict, here: int, body: dict) -> None:
        reply = {"id": frame["id"], "route": frame["route"], **body}
        if here == 0:
            self.reply_received(None, reply)
        elif not self._forward(FrameType.REPLY, reply, frame["route"][here - 1]):
            log.info("mesh: the answer to request %s cannot go back: the link went", frame["id"])

    def reply_received(self, link: LinkProtocol | None, frame: dict) -> None:
        route = frame.get("route") or []
        if self.mesh.node_id not in route:
            return
        here = route.index(self.mesh.node_id)
        if here > 0:
            self._forward(FrameType.REPLY, frame, route[here - 1])
            return
        pending = self._pending.pop(frame.get("id", ""), None)
        if pending is None:
            return  # it came after the timeout
        d, timer = pending
        if timer.active():
            timer.cancel()
        if "answer" in frame:
            d.callback(frame["answer"])
        else:
            d.errback(Unreachable(frame.get("unreachable", "no answer")))

    def fail_all(self, reason: str) -> None:
        """The node stops: nobody will answer what is pending."""
        for request_id in list(self._pending):
            d, timer = self._pending.pop(request_id)
            if timer.active():
                timer.cancel()
            d.errback(Unreachable(reason))
