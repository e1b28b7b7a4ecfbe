"""A rolling upgrade: a node of this release and a node of the last release of link
protocol 4 (its source from git, run from a temporary directory) link, and the default
vhost's messages cross both ways; the upgraded node names the older one in its log. A
message of another vhost is not handed to the older node (docs/vhosts-mesh-design.md)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from e2e_support import older_release, unique
from mesh_support import QUIET, mesh_fixture  # noqa: F401
from vhost_support import TEAM_A, VHOSTS, clients_fixture  # noqa: F401  (the fixture)

LAST_OF_PROTOCOL_4 = "1b392138f24bf9eaf2dd11e54e100f0296d0e1e7"  # main before the mesh carried vhosts


@pytest.fixture(name="protocol_4_source", scope="module")
def protocol_4_source_fixture(tmp_path_factory) -> Path:
    """The source of the last release of link protocol 4, from this repository's history."""
    return older_release(tmp_path_factory, LAST_OF_PROTOCOL_4)


def test_a_node_of_protocol_4_and_one_of_this_release_share_the_default_vhost(mesh, clients, protocol_4_source):
    new, old = mesh(2, extra="\n" + VHOSTS, start=False)
    old.proc.env = {**os.environ, "PYTHONPATH": str(protocol_4_source)}
    new.start()
    old.start()
    new.wait_linked(old)
    old.wait_linked(new)
    # Only a HELLO without "speaks" says 4: the older node runs the older code.
    new.wait_log(rf"mesh: {old.name} speaks link protocol 4 \(an older release\); this node speaks 5")
    queue, back = "/queue/" + unique("orders"), "/queue/" + unique("replies")
    far_default, near_default = clients.stomp_on(old.proc, "/"), clients.stomp_on(new.proc, "/")
    far_team_a = clients.stomp_on(old.proc, TEAM_A)
    far_default.subscribe(queue)
    near_default.subscribe(back)
    far_team_a.subscribe(queue)
    clients.stomp_on(new.proc, TEAM_A).send(queue, "team-a stays", receipt=True)
    clients.stomp_on(new.proc, "/").send(queue, "to the old node", receipt=True)
    clients.stomp_on(old.proc, "/").send(back, "to the new node", receipt=True)
    far_default.listener.wait_for_body("to the old node")
    near_default.listener.wait_for_body("to the new node")
    time.sleep(QUIET)  # nothing of team-a may arrive on the old node meanwhile
    assert far_team_a.listener.bodies() == []
    near_team_a = clients.stomp_on(new.proc, TEAM_A)
    near_team_a.subscribe(queue)
    assert near_team_a.listener.wait_for_body("team-a stays")


def _older(node, source: Path) -> None:
    node.proc.env = {**os.environ, "PYTHONPATH": str(source)}


def test_a_vhosts_messages_cross_between_upgraded_nodes_and_never_to_an_older_one(mesh, clients, protocol_4_source):
    a, old, c = mesh(3, extra="\n" + VHOSTS, start=False)  # every node linked with every other
    _older(old, protocol_4_source)
    for node in (a, old, c):
        node.start()
    for node, other in ((a, old), (a, c), (old, c)):
        node.wait_linked(other)
    queue = "/queue/" + unique("orders")
    at_old, at_c = clients.stomp_on(old.proc, TEAM_A), clients.stomp_on(c.proc, TEAM_A)
    at_old.subscribe(queue)
    at_c.subscribe(queue)
    sender = clients.stomp_on(a.proc, TEAM_A)
    for n in range(10):
        sender.send(queue, f"t{n}", receipt=True)
    at_c.listener.wait_until(lambda: len(at_c.listener.bodies()) == 10, "team-a's messages at the upgraded node")
    assert at_c.listener.bodies() == [f"t{n}" for n in range(10)] and at_old.listener.bodies() == []
    assert "LinkError" not in old.stderr() and "malformed" not in old.stderr()


def test_a_vhosts_demand_does_not_pass_through_an_older_node(mesh, clients, protocol_4_source):
    a, old, c = mesh(3, topology="chain", max_hops=2, extra="\n" + VHOSTS, start=False)  # a - old - c
    _older(old, protocol_4_source)
    for node in (a, old, c):
        node.start()
    old.wait_linked(a)
    old.wait_linked(c)
    queue = "/queue/" + unique("orders")
    far_team_a, far_default = clients.stomp_on(c.proc, TEAM_A), clients.stomp_on(c.proc, "/")
    far_team_a.subscribe(queue)
    far_default.subscribe(queue)
    clients.stomp_on(a.proc, TEAM_A).send(queue, "team-a stays on a", receipt=True)
    wait_until_crossed = clients.stomp_on(a.proc, "/")
    # "/" crosses a - old - c (its demand went through the older node); team-a's never did.
    for attempt in range(50):
        wait_until_crossed.send(queue, f"default {attempt}", receipt=True)
        if far_default.listener.bodies():
            break
        time.sleep(0.1)
    assert far_default.listener.bodies()
    time.sleep(QUIET)
    assert far_team_a.listener.bodies() == []
    near = clients.stomp_on(a.proc, TEAM_A)
    near.subscribe(queue)
    assert near.listener.wait_for_body("team-a stays on a")
