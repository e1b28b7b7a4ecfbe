"""Management requests about message journeys (docs/journeys.md): reading a message's
records, finding traced messages, and tracing a destination without a header, on the nodes asked for a while or
on every node by a definition. Part of model.requests' AnyRequest."""

from __future__ import annotations

from typing import Annotated

import msgspec

from model.definitions import MAX_TRACE_S
from model.journeys import MAX_FIELD
from model.names import DEFAULT_VHOST
from model.request_base import ALL, Request

# Message ids one journey_steps request names at most.
MAX_JOURNEY_IDS = 100
# Journeys one journey_search answers at most (each node's and the merged answer).
MAX_HITS = 200
LATEST_EPOCH = 1e11  # seconds: the year 5138, later than any record's time
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_FIELD)]
Epoch = Annotated[float, msgspec.Meta(ge=0, le=LATEST_EPOCH)]


class JourneySteps(Request, kw_only=True, tag="journey_steps"):
    """The journey records the node keeps of these messages (``node: "*"``: every node's),
    in the order each node made them. A root id (as a producer's message got it) gives
    every copy of the message; a copy's id (``ID.1``) that copy's alone. Admin: the
    records name users, connections and destinations."""

    ids: Annotated[list[Text],
                   msgspec.Meta(min_length=1, max_length=MAX_JOURNEY_IDS)]


class TraceNext(Request, kw_only=True, tag="trace_next"):
    """Trace what producers send to ``destination`` (``/queue/NAME`` or ``/topic/NAME``) from
    now on, on the node asked (``node: "*"``: every node): every ``every``-th message (1:
    each; 100: a 1 % sample), at most ``count`` of them on each node (None: no limit), for
    ``for_s`` seconds at most. ``count`` 0 stops it. Admin."""

    destination: Text
    count: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] | None = None
    every: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 1
    for_s: Annotated[float, msgspec.Meta(gt=0, le=MAX_TRACE_S)] = 600.0
    vhost: str = DEFAULT_VHOST


class DefineTrace(Request, kw_only=True, tag="define_trace"):
    """Trace ``destination`` (``/queue/NAME`` or ``/topic/NAME``) on every node of the mesh,
    one message in ``round(1 / rate)``, until ``until`` (epoch seconds) or for ``for_s``
    seconds: exactly one of the two, at most 7 days ahead. A definition of kind "trace",
    made by the asked node; ``delete_definition`` (kind "trace") stops it. Admin."""

    destination: Text
    rate: Annotated[float, msgspec.Meta(gt=0, le=1)] = 1.0
    until: float | None = None
    for_s: Annotated[float, msgspec.Meta(gt=0, le=MAX_TRACE_S)] | None = None
    vhost: str = DEFAULT_VHOST


class JourneySearch(Request, kw_only=True, tag="journey_search"):
    """The traced messages whose journeys match every filter given, asked of every node by
    default and merged: one hit per journey, newest first, ``limit`` at most. ``queue``: sent
    to it or put in it (of ``vhost``; any vhost when None); ``header``: ``NAME=VALUE``, a
    header the message was received with, whole; ``body``: in the first ``[journeys]
    body_preview`` bytes of its body; ``since``/``until``: epoch seconds of its first record
    on a node. Admin: hits name destinations, and a search reads headers and bodies."""

    node: str | None = ALL
    queue: Text | None = None
    vhost: Text | None = None
    header: Annotated[str, msgspec.Meta(min_length=2, max_length=2 * MAX_FIELD + 1)] | None = None
    body: Text | None = None
    since: Epoch | None = None
    until: Epoch | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_HITS)] = 50

    def __post_init__(self) -> None:
        problem = None if self.header is None else header_filter_problem(self.header)
        if problem:
            raise ValueError(problem)
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError("since is after until")

    def header_pair(self) -> tuple[str, str] | None:
        """``header`` as (name, value)."""
        if self.header is None:
            return None
        name, _, value = self.header.partition("=")
        return name, value


def header_filter_problem(header: str) -> str | None:
    """Why ``header`` is no ``NAME=VALUE`` filter of journey_search (None: it is one); the
    request, the API and the CLI check it alike."""
    name, equals, value = header.partition("=")
    if not (name and equals) or len(name) > MAX_FIELD or len(value) > MAX_FIELD:
        return f"a header is NAME=VALUE, each at most {MAX_FIELD} characters"
    return None
