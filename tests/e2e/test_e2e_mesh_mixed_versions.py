"""A rolling upgrade: a node of this release and a node of the last release of link
protocol 4 (its source from git, run from a temporary directory) link, and the default
vhost's messages cross both ways; the upgraded node names the older one in its log. A
message of another vhost is not handed to the older node (docs/vhosts-mesh-design.md)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import unique
from mesh_support import QUIET, mesh_fixture  # noqa: F401
from vhost_support import TEAM_A, VHOSTS, clients_fixture  # noqa: F401  (the fixture)

REPO = Path(__file__).resolve().parents[2]
LAST_OF_PROTOCOL_4 = "1b392138f24bf9eaf2dd11e54e100f0296d0e1e7"  # main before the mesh carried vhosts


@pytest.fixture(name="protocol_4_source", scope="module")
def protocol_4_source_fixture(tmp_path_factory) -> Iterator[Path]:
    """The source of the last release of link protocol 4, from this repository's history."""
    if shutil.which("git") is None:
        pytest.skip("git is needed for the source of the older release")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", LAST_OF_PROTOCOL_4], capture_output=True)
    if archive.returncode:
        pytest.skip(f"commit {LAST_OF_PROTOCOL_4[:12]} is not in this checkout's history")
    target = tmp_path_factory.mktemp("protocol-4")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    yield target


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
