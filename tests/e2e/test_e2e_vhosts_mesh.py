"""Only the default vhost is meshed in this release (docs/vhosts.md): a message of
another vhost stays on the node it was sent to, even with a consumer of the same vhost
and queue on a linked node, while "/" messages cross the same link as before."""

from __future__ import annotations

import time

from e2e_support import unique
from mesh_support import QUIET, mesh_fixture  # noqa: F401
from vhost_support import TEAM_A, VHOSTS, clients_fixture  # noqa: F401  (the fixture)


def test_a_non_default_vhosts_messages_stay_on_their_node(mesh, clients):
    a, b = mesh(2, extra="\n" + VHOSTS)
    queue, topic = "/queue/" + unique("orders"), "/topic/" + unique("news")
    far_team_a = clients.stomp_on(b.proc, TEAM_A)
    far_team_a.subscribe(queue)
    far_team_a.subscribe(topic)
    far_default = clients.stomp_on(b.proc, "/")
    far_default.subscribe(queue)
    near_team_a, near_default = clients.stomp_on(a.proc, TEAM_A), clients.stomp_on(a.proc, "/")
    for n in range(5):
        near_team_a.send(queue, f"a{n}", receipt=True)
        near_team_a.send(topic, f"news{n}", receipt=True)
    near_default.send(queue, "default crosses", receipt=True)  # the link works: "/" goes to B's consumer
    far_default.listener.wait_for_body("default crosses")
    time.sleep(QUIET)  # nothing of team-a may arrive on B meanwhile
    assert far_team_a.listener.bodies() == []
    assert far_default.listener.bodies() == ["default crosses"]
    near = clients.stomp_on(a.proc, TEAM_A)
    near.subscribe(queue)
    near.send(queue, "fence", receipt=True)
    assert near.listener.wait_for_body("fence") and near.listener.bodies() == [f"a{n}" for n in range(5)] + ["fence"]
