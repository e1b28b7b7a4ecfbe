"""Management requests about message journeys (docs/journeys.md): reading a message's
records, and tracing a destination without a header, on the nodes asked for a while or
on every node by a definition. Part of model.requests' AnyRequest."""

from __future__ import annotations

from typing import Annotated

import msgspec

from model.definitions import MAX_TRACE_S
from model.journeys import MAX_FIELD
from model.names import DEFAULT_VHOST
from model.request_base import Request

# Message ids one journey_steps request names at most.
MAX_JOURNEY_IDS = 100


class JourneySteps(Request, kw_only=True, tag="journey_steps"):
    """The journey records the node keeps of these messages (``node: "*"``: every node's),
    in the order each node made them. A root id (as a producer's message got it) gives
    every copy of the message; a copy's id (``ID.1``) that copy's alone. Admin: the
    records name users, connections and destinations."""

    ids: Annotated[list[Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_FIELD)]],
                   msgspec.Meta(min_length=1, max_length=MAX_JOURNEY_IDS)]


class TraceNext(Request, kw_only=True, tag="trace_next"):
    """Trace what producers send to ``destination`` (``/queue/NAME`` or ``/topic/NAME``) from
    now on, on the node asked (``node: "*"``: every node): every ``every``-th message (1:
    each; 100: a 1 % sample), at most ``count`` of them on each node (None: no limit), for
    ``for_s`` seconds at most. ``count`` 0 stops it. Admin."""

    destination: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_FIELD)]
    count: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] | None = None
    every: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 1
    for_s: Annotated[float, msgspec.Meta(gt=0, le=MAX_TRACE_S)] = 600.0
    vhost: str = DEFAULT_VHOST


class DefineTrace(Request, kw_only=True, tag="define_trace"):
    """Trace ``destination`` (``/queue/NAME`` or ``/topic/NAME``) on every node of the mesh,
    one message in ``round(1 / rate)``, until ``until`` (epoch seconds) or for ``for_s``
    seconds: exactly one of the two, at most 7 days ahead. A definition of kind "trace",
    made by the asked node; ``delete_definition`` (kind "trace") stops it. Admin."""

    destination: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_FIELD)]
    rate: Annotated[float, msgspec.Meta(gt=0, le=1)] = 1.0
    until: float | None = None
    for_s: Annotated[float, msgspec.Meta(gt=0, le=MAX_TRACE_S)] | None = None
    vhost: str = DEFAULT_VHOST
