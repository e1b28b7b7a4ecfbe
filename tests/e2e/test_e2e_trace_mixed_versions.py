"""A rolling upgrade with trace definitions (docs/journeys.md, "Tracing a destination for
a while"): a node of the release before the ``trace`` kind (its source from git) links
with a node of this release that traces a destination. The older node logs the trace
record as not understood and ignores it, and keeps everything else the links carry: a
queue definition made after it, and messages both ways; the newer node traces what it
is sent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from e2e_support import manage_result, older_release, unique
from mesh_support import mesh_fixture, wait_until  # noqa: F401

from model.definitions import QueueSettings
from model.requests import DefineQueue, DefineTrace, Definitions, JourneySteps

BEFORE_TRACE_DEFINITIONS = "f86bd89"  # main before the trace kind (same link protocol)


@pytest.fixture(name="older_source", scope="module")
def older_source_fixture(tmp_path_factory) -> Path:
    return older_release(tmp_path_factory, BEFORE_TRACE_DEFINITIONS)


def test_an_older_node_ignores_a_trace_definition_and_keeps_the_rest(mesh, older_source):
    new, old = mesh(2, start=False, sets=["journeys.enabled=true"])
    old.proc.env = {**os.environ, "PYTHONPATH": str(older_source)}
    new.start()
    old.start()
    new.wait_linked(old)
    old.wait_linked(new)
    traced, settled = "/queue/" + unique("traced"), unique("settled")
    manage_result(new.stomp, DefineTrace(destination=traced, for_s=600))
    manage_result(new.stomp, DefineQueue(queue=settled, settings=QueueSettings(max_length=5)))

    def queues_defined_on_old() -> set[str]:
        return {r.name for r in manage_result(old.stomp, Definitions(node=old.name)) if r.kind == "queue"}

    wait_until(lambda: settled in queues_defined_on_old(), "the older node holds the later queue definition")
    old.wait_log(r"mesh: a definition from \S+ not understood")
    assert "Traceback" not in old.stderr() and "LinkError" not in old.stderr()

    consumer = old.client()
    consumer.subscribe(traced)
    new.client().send(traced, "from the new node", receipt=True)
    message_id = consumer.listener.wait_for(1)[0].headers["message-id"]
    steps = manage_result(new.stomp, JourneySteps(ids=[message_id], node=new.name))
    assert [s.step for s in steps][:1] == ["received"]  # traced by the definition, on the newer node
