"""A replicated pair in a mesh with no witness (docs/ha.md, "Takeover and quorum"):
the backup's quorum is the mesh's other nodes, its ``[mesh] static`` peers, asked
over short-lived connections to their mesh listeners. Real ``meshgate broker``
processes: node A's primary and backup, and two other nodes C and D.

1. the primary killed with ``kill -9``: C and D no longer hear it, both vote yes, and
   the backup takes over with a message receipted before the kill;
2. the replication link cut by a proxy while the primary keeps its mesh links: C and
   D still hear the primary and vote no, round after round; the backup logs their
   refusal and never takes over, and the primary keeps serving.

Every wait is for a log line or a state, bounded; processes are stopped by pid."""

from __future__ import annotations

import re
from functools import partial

import pytest
from e2e_support import manage_result, unique
from ha_support import HAProcesses, Member, ha_table, listening, mesh_table
from mesh_support import free_port, wait_until
from stomp_client import open_client
from tls_support import Certificates

from model.requests import Summary

PASSWORD = "e2e-" + unique("quorum")
TAKEOVER_DEADLINE = 15.0
# Quicker retries and liveness checks than the other HA tests' meshes.
quick_mesh = partial(mesh_table, PASSWORD, max_retry_interval_ms=500, check_period_ms=300, connection_ttl_ms=1500)


class QuorumMesh(HAProcesses):
    """Node A as a replicated pair (no witness) and two other nodes, C and D, which
    list both of A's mesh addresses; A's members list C and D."""

    def start(self, *, cut_able: bool = False, tls: Certificates | None = None) -> None:
        """``tls``: every mesh listener and link over mutual TLS, the backup's votes included."""
        a_mesh, b_mesh, c_mesh, d_mesh = (free_port() for _ in range(4))
        a_repl, b_repl = free_port(), free_port()

        def mesh_config(bind: int, peers: list[int], name: str) -> str:
            return quick_mesh(bind, peers) + (tls.table(name) if tls is not None else "")

        self.c = self.member("C", mesh_config(c_mesh, [a_mesh, b_mesh, d_mesh], "c"), node="C").start()
        self.d = self.member("D", mesh_config(d_mesh, [a_mesh, b_mesh], "d"), node="D").start()
        self.c.wait_log(r"mesh: linked with D$")
        peer = a_repl
        if cut_able:
            self.link_proxy = self.proxy(a_repl)  # backup -> the primary's replication listener
            peer = self.link_proxy.port
        self.primary = self.member("primary", mesh_config(a_mesh, [c_mesh, d_mesh], "primary")
                                   + ha_table("primary", a_repl, b_repl)).start()
        for other in (self.c, self.d):
            other.wait_log(r"mesh: linked with A$")
        self.backup = self.member("backup", mesh_config(b_mesh, [c_mesh, d_mesh], "backup")
                                  + ha_table("backup", b_repl, peer)).launch(free_port())
        self.backup.wait_log(r"replication: caught up with the primary")
        wait_until(lambda: manage_result(self.primary.port, Summary()).node.replication_state == "in-sync",
                   "the primary to see its backup in sync")


@pytest.fixture
def quorum_mesh(tmp_path):
    made = QuorumMesh(tmp_path)
    yield made
    made.cleanup()


def count(member: Member, pattern: str, since: int = 0) -> int:
    """Lines of ``member``'s stderr matching ``pattern``, from line ``since`` on."""
    regex = re.compile(pattern)
    return sum(1 for line in member.stderr().splitlines()[since:] if regex.search(line))


def lines(member: Member) -> int:
    return len(member.stderr().splitlines())


# -- (1) kill -9: the mesh's majority agrees, the backup takes over ---------------------------------


@pytest.mark.parametrize("over_tls", [False, True], ids=["plain links", "links over mutual TLS"])
def test_without_a_witness_the_mesh_majority_lets_the_backup_take_over_a_killed_primary(quorum_mesh, over_tls,
                                                                                       tmp_path):
    quorum_mesh.start(tls=Certificates(tmp_path / "certificates") if over_tls else None)
    primary, backup, c, d = quorum_mesh.primary, quorum_mesh.backup, quorum_mesh.c, quorum_mesh.d
    before = manage_result(primary.port, Summary()).node
    assert not listening(backup.port), "the backup listens for clients"
    assert "no ha.witness" not in backup.stderr()
    q = "/queue/" + unique("quorum")
    client = open_client(primary)
    client.send(q, "before the kill", headers={"persistent": "true"}, receipt=True)  # on both members
    client.drop()

    marks = {other: lines(other) for other in (c, d)}
    primary.kill9()
    backup.wait_listening(timeout=TAKEOVER_DEADLINE)
    backup.wait_log(r"backup: the primary at \S+ is gone \(for [\d.]+ s\) and the mesh's other nodes agree "
                    r"\(2 of the 2 other node\(s\) of \[mesh\] static agree, a majority needs 2: .*\); taking over "
                    rf"at epoch {before.epoch + 1}$")
    for other in (c, d):
        other.wait_log(rf"mesh: quorum vote from a backup at \S+ for node id {before.id} at epoch "
                       rf"{before.epoch + 1}: yes, no link to it and nothing from it for 1.0 s")
    after = manage_result(backup.port, Summary()).node
    assert (after.id, after.epoch, after.ha_role) == (before.id, before.epoch + 1, "primary")
    consumer = open_client(backup)
    consumer.subscribe(q)
    assert [m.body for m in consumer.listener.wait_for(1, timeout=10)] == ["before the kill"]
    consumer.drop()
    # The new primary joins the mesh at the granted epoch: C and D link with it.
    wait_until(lambda: all(count(other, r"mesh: linked with A$", marks[other]) for other in (c, d)),
               "C and D to link with the new primary", describe=lambda: c.stderr()[-3000:])


# -- (2) a cut replication link: the mesh still hears the primary, no takeover ------------------------


def test_a_cut_replication_link_makes_no_second_primary_while_the_mesh_hears_the_primary(quorum_mesh):
    quorum_mesh.start(cut_able=True)
    primary, backup, c, d = quorum_mesh.primary, quorum_mesh.backup, quorum_mesh.c, quorum_mesh.d
    node_id = manage_result(primary.port, Summary()).node.id
    q = "/queue/" + unique("cut")
    client = open_client(primary)
    client.send(q, "before the cut", headers={"persistent": "true"}, receipt=True)

    quorum_mesh.link_proxy.stop()  # only the replication link is cut
    backup.wait_log(r"replication: the link to the primary at .* is gone")
    backup.wait_log(r"backup: the primary at \S+ is unreachable from here, but the mesh's other nodes say: 0 of "
                    r"the 2 other node\(s\) of \[mesh\] static agree, a majority needs 2: C \(\S+\): no, I hear the "
                    r"primary: linked with it at epoch \d+, last frame [\d.]+ s ago; D \(\S+\): no, I hear the "
                    r"primary: .*; no takeover$")
    # Round after round the peers refuse (each round is a new question): three rounds, no takeover.
    refusal = rf"quorum vote from a backup at \S+ for node id {node_id} at epoch \d+: no, I hear the primary"
    wait_until(lambda: count(c, refusal) >= 3 and count(d, refusal) >= 3, "three refused rounds on C and D",
               describe=lambda: c.stderr()[-3000:])
    assert "taking over" not in backup.stderr() and "listening on" not in backup.stdout(), \
        "a second primary: the backup took over while the primary lives"
    assert not listening(backup.port)
    # The backup opened no mesh link, and the votes touched none of the primary's.
    assert "mesh: linked with" not in backup.stderr()
    assert "mesh: link with A lost" not in c.stderr() + d.stderr()
    # The primary serves on, alone.
    assert primary.running
    wait_until(lambda: manage_result(primary.port, Summary()).node.replication_state == "no-backup",
               "the primary to see its backup gone")
    client.send(q, "after the cut", headers={"persistent": "true"}, receipt=True)
    consumer = open_client(primary)
    consumer.subscribe(q)
    assert [m.body for m in consumer.listener.wait_for(2, timeout=10)] == ["before the cut", "after the cut"]
    consumer.drop()
    client.drop()
