"""Tracing without a header (docs/journeys.md): ``trace_next`` arms this node's tracer
for a while, ``define_trace`` makes a definition of kind "trace" that every node's
broker applies (gateway.broker.definitions.DefiningMixin.arm_trace). One handler per
action, mixed into management.actions.LocalActions."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

from model.definitions import MAX_TRACE_S, TraceSpec, traced_destination
from model.names import DEFAULT_VHOST
from model.requests import DefineTrace, Done, ManagementError

if TYPE_CHECKING:
    from gateway.broker.broker import Broker


class TraceActions:
    """What LocalActions gives these handlers (declared for the type checker)."""

    node_id: str
    broker_of: Callable[[str], Broker]

    def _destination(self, destination: str) -> tuple[str, str]:
        try:
            return traced_destination(destination)
        except ValueError as error:
            raise ManagementError("bad_request", str(error), self.node_id) from None

    def trace_next(self, destination: str, every: int, count: int | None, seconds: float,
                   vhost: str = DEFAULT_VHOST) -> Done:
        """Trace what producers send to ``destination`` here: the vhost's tracer is armed;
        ``count`` 0 stops it."""
        kind, name = self._destination(destination)
        broker = self.broker_of(vhost)
        if broker.tracer is None:
            raise ManagementError("conflict", "this node records no journeys ([journeys] enabled = false)",
                                  self.node_id)
        broker.trace_next(kind, name, every, count, seconds)
        if count == 0:
            return Done(node=self.node_id, action="trace_next", target=destination, detail="tracing stopped")
        return Done(node=self.node_id, action="trace_next", target=destination, count=count or 0,
                    detail=f"tracing {_which(every)}" + (f", {count} at most" if count else "")
                    + f", for {seconds:g} s")

    def define_trace(self, request: DefineTrace, by: str) -> Done:
        """Trace ``request.destination`` on every node until its end time (a definition).
        A node with journeys off keeps and passes it on, tracing nothing: said so when
        it is this one."""
        self._destination(request.destination)
        broker = self.broker_of(request.vhost)
        now = broker.seconds()
        if (request.until is None) == (request.for_s is None):
            raise ManagementError("bad_request", "define_trace needs exactly one of until and for_s", self.node_id)
        until = now + request.for_s if request.for_s is not None else request.until
        if not (until is not None and math.isfinite(until) and now < until <= now + MAX_TRACE_S):
            raise ManagementError("bad_request", f"a trace ends in the future, {MAX_TRACE_S // 86400} days from now "
                                                 "at most", self.node_id)
        spec = TraceSpec(rate=request.rate, until=until, by=by[:200])
        record = broker.define_trace(request.destination, spec)
        off = "" if broker.tracer is not None else " (journeys are off on this node: it traces nothing)"
        return Done(node=self.node_id, action="define_trace", target=request.destination,
                    detail=f"tracing {_which(spec.every)} for {until - now:.0f} s, version {record.version}, "
                           f"for every node{off}")


def _which(every: int) -> str:
    return "every message" if every == 1 else f"one message in {every}"
