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
from typing import Any, Callable

from msgspec import UNSET
from twisted.internet import defer
from twisted.python.failure import Failure

from mesh.peers import PeerTable
from mesh.settings import Clock
from mesh.topology import Topology
from mesh.wire import REPLY, REQUEST, FrameTable, FrameType, LinkSender, Reply, Request

log = logging.getLogger(__name__)

Handler = Callable[[Any, str], "defer.Deferred | Any"]  # (request, origin node id) -> answer


class Unreachable(Exception):
    """No answer from the node: no path to it, a link on the way went, or it was too slow."""


class Router:
    def __init__(self, node_id: str, name: str, peers: PeerTable, topology: Topology, clock: Clock,
                 frames: FrameTable) -> None:
        self.node_id = node_id
        self.name = name
        self.linked = peers.linked
        self.topology = topology
        self.clock = clock
        self.handler: Handler | None = None
        self._ids = itertools.count(1)
        self._boot = uuid.uuid4().hex[:8]  # a late answer to a request from before a restart matches nothing
        self._pending: dict[str, tuple[defer.Deferred, Any]] = {}
        frames.on(FrameType.REQUEST, REQUEST, self.request_received)
        frames.on(FrameType.REPLY, REPLY, self.reply_received)

    def request(self, target: str, body: Any, timeout: float = 5.0) -> defer.Deferred:
        """Ask ``target``; fires with its answer, or fails with Unreachable."""
        route = self.topology.route(target)
        if route is None:
            return defer.fail(Unreachable(f"no path of links to node {target} is known"))
        request_id = f"{self.node_id}:{self._boot}:{next(self._ids)}"
        d: defer.Deferred = defer.Deferred()
        timer = self.clock.callLater(timeout, self._timed_out, request_id, target, timeout)
        self._pending[request_id] = (d, timer)
        self._forward(FrameType.REQUEST, Request(request_id, route, body), route[1])
        return d

    def _timed_out(self, request_id: str, target: str, timeout: float) -> None:
        pending = self._pending.pop(request_id, None)
        if pending is not None:
            pending[0].errback(Unreachable(f"node {target} did not answer within {timeout:g} s"))

    def _forward(self, kind: FrameType, frame: Request | Reply, next_hop: str) -> bool:
        peer = self.linked.get(next_hop)
        if peer is None:
            return False
        peer.link.send_control(kind, frame)
        return True

    def request_received(self, link: LinkSender, request: Request) -> None:
        route = request.route
        if self.node_id not in route:
            return
        here = route.index(self.node_id)
        if here + 1 < len(route):
            if not self._forward(FrameType.REQUEST, request, route[here + 1]):
                self._answer(request, here, Reply(request.id, route, unreachable=(
                    f"node {self.name} is not linked with the next node on the way, {route[here + 1]}")))
            return
        if self.handler is None:
            self._answer(request, here, Reply(request.id, route, unreachable=f"node {self.name} answers no requests"))
            return
        d = defer.maybeDeferred(self.handler, request.body, route[0])
        d.addCallback(lambda answer: self._answer(request, here, Reply(request.id, route, answer=answer)))
        d.addErrback(self._failed, request, here)

    def _failed(self, failure: Failure, request: Request, here: int) -> None:
        log.error("management request failed on this node: %s", failure.getTraceback())
        self._answer(request, here, Reply(request.id, request.route,
                                          unreachable=f"node {self.name} failed: {failure.getErrorMessage()}"))

    def _answer(self, request: Request, here: int, reply: Reply) -> None:
        if here == 0:
            self._settle(reply)
        elif not self._forward(FrameType.REPLY, reply, request.route[here - 1]):
            log.info("mesh: the answer to request %s cannot go back: the link went", request.id)

    def reply_received(self, link: LinkSender, reply: Reply) -> None:
        route = reply.route
        if self.node_id not in route:
            return
        here = route.index(self.node_id)
        if here > 0:
            self._forward(FrameType.REPLY, reply, route[here - 1])
            return
        self._settle(reply)

    def _settle(self, reply: Reply) -> None:
        pending = self._pending.pop(reply.id, None)
        if pending is None:
            return  # it came after the timeout
        d, timer = pending
        if timer.active():
            timer.cancel()
        if reply.answer is not UNSET:
            d.callback(reply.answer)
        else:
            d.errback(Unreachable(reply.unreachable or "no answer"))

    def fail_all(self, reason: str) -> None:
        """The node stops: nobody will answer what is pending."""
        for request_id in list(self._pending):
            d, timer = self._pending.pop(request_id)
            if timer.active():
                timer.cancel()
            d.errback(Unreachable(reason))
