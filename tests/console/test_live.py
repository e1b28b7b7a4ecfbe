"""Live updates: the worker (``manage.py meshwatch``, a real process) tails the nodes'
streams and the WebSocket consumer hands its updates to a signed-in browser; tested
with Channels' WebsocketCommunicator (a real session's cookie, the console's whole ASGI
application: tests/console/live_support.py) against the real mesh and Redis. Origins,
sign-out and bad messages: test_live_guard.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
from asgiref.sync import sync_to_async
from e2e_support import unique

from tests.console.live_support import connected, next_of, socket

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def worker(mesh, settings):
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.console.settings", MESHGATE_REDIS_URL=mesh.redis.url,
               PYTHONPATH=ROOT)
    process = subprocess.Popen([sys.executable, "-m", "django", "meshwatch", "--tick", "0.2"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = process.stdout.readline()
    assert "tailing" in first, first
    yield process
    process.terminate()
    process.wait(10)


async def test_a_signed_out_browser_is_turned_away(mesh):
    ok, code = await socket(client=None).connect()  # the console's own page, no session
    assert not ok and code == 4401


async def test_subscribing_gives_the_state_at_once_and_bad_requests_an_error(mesh, users):
    communicator = await connected(users["viewer"][0])
    await communicator.send_json_to({"subscribe": ["everything"]})
    error = await communicator.receive_json_from(timeout=5)
    assert error["type"] == "error" and "subscribe" in error["message"]
    await communicator.send_json_to({"subscribe": ["mesh"]})
    state = await communicator.receive_json_from(timeout=5)
    assert state["type"] == "mesh" and {row["name"] for row in state["nodes"]} == {"A", "B", "C"}
    assert state["overview"]["nodes_up"] == 3 and len(state["links"]) == 3
    await communicator.disconnect()


async def test_queue_counts_change_live_as_messages_come(mesh, users, worker):
    queue = unique("live")
    communicator = await connected(users["viewer"][0], "queues")
    client = await sync_to_async(mesh.b.client)()
    for i in range(3):
        await sync_to_async(client.send)("/queue/" + queue, f"m{i}", headers={"persistent": "true"}, receipt=True)

    def has_three(message):
        return any(row["name"] == queue and row["messages"] == 3 and row["node_count"] == 1
                   for row in message["queues"])

    await next_of(communicator, "queues", has_three)
    await communicator.disconnect()


async def test_a_killed_node_turns_down_and_events_arrive(mesh, users, worker):
    communicator = await connected(users["viewer"][0], "mesh", "events")
    await next_of(communicator, "mesh", lambda m: m["overview"]["nodes_up"] == 3)
    await sync_to_async(mesh.c.kill9)()
    seen: list = []
    try:
        started = time.monotonic()
        down = await next_of(communicator, "mesh",
                             lambda m: any(r["name"] == "C" and r["state"] == "down" for r in m["nodes"]), seen=seen)
        assert time.monotonic() - started < 10  # the discovery refresh timeout's order of magnitude
        assert down["overview"]["nodes_down"] == 1
        assert any(link["state"] == "down" for link in down["links"])

        def lost_c(message):
            return message.get("type") == "event" and message["event"]["kind"] == "link_down" \
                and message["event"]["peer_name"] == "C"

        if not any(lost_c(message) for message in seen):
            await next_of(communicator, "event", lost_c)
    finally:
        await sync_to_async(mesh.c.start)()
    await next_of(communicator, "mesh", lambda m: m["overview"]["nodes_up"] == 3, timeout=30)
    await communicator.disconnect()


async def test_web_processes_read_the_frame_the_worker_shares(mesh, users, worker):
    """The API answers from the frame the worker computed (one process decodes the
    snapshots, not every web process), with the same rows it would compute itself."""
    from rest_framework.test import APIClient

    from console.mesh.shared import SharedFrame
    from console.mesh.sources import mesh_view

    queue = unique("shared")
    client = await sync_to_async(mesh.a.client)()
    for i in range(4):
        await sync_to_async(client.send)("/queue/" + queue, f"s{i}", headers={"persistent": "true"}, receipt=True)

    def shared_row():
        frame = mesh_view().frame
        row = frame.queue_index.get(queue) if isinstance(frame, SharedFrame) else None
        return row if row is not None and row.messages == 4 else None

    deadline = time.monotonic() + 15
    while not await sync_to_async(shared_row)():
        assert time.monotonic() < deadline, "the worker's frame never held the queue"
        await asyncio.sleep(0.1)
    api = APIClient(HTTP_HOST="127.0.0.1")
    api.credentials(HTTP_AUTHORIZATION="Token " + users["viewer"][1])
    page = (await sync_to_async(api.get)("/api/v1/queues", {"name": queue})).json()
    (item,) = page["items"]
    assert item["messages"] == 4 and [part["node_name"] for part in item["nodes"]] == ["A"]
    detail = (await sync_to_async(api.get)(f"/api/v1/queues/{queue}")).json()
    assert detail["nodes"][0]["partial"]["depth"] == 4  # the parts come from the worker's hash
