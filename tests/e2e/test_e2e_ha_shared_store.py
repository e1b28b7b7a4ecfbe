"""High availability on a shared store (docs/ha.md), with real ``meshgate broker``
processes: two processes on one data dir with ``[ha] mode = "shared-store"``, the
second waiting as the standby until the first is killed; epoch fencing on mesh
links and in the data dir.

Every wait is bounded; the processes are stopped by pid (``kill -9`` where the test
is about a crash) and cleaned up at teardown."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from e2e_support import HOST, manage_result, unique
from ha_support import Member, listening, mesh_table
from mesh_support import free_port, send_many, wait_until
from stomp_client import open_client

from meshgate.datadir import read_epoch, write_epoch
from model.requests import Nodes, Summary

FAILOVER_DEADLINE = 5.0  # seconds from kill -9 of the active node to the standby listening
PASSWORD = "e2e-" + unique("ha")
N = 200


def ha_config(mesh: str = "") -> str:
    return '[ha]\nmode = "shared-store"\n' + mesh


@pytest.fixture
def members(tmp_path):
    made: list[Member] = []

    def make(label: str, data_dir: Path, config: str, node_name: str = "A") -> Member:
        member = Member(tmp_path, label, config, node=node_name, data_dir=data_dir)
        made.append(member)
        return member

    yield make
    for member in made:
        print(member.describe())  # shown when the test failed
        member.cleanup()


def start_pair(members, data: Path, primary_config: str, standby_config: str) -> tuple[Member, Member]:
    """The first process takes the data dir; the second waits as its standby."""
    primary = members("primary", data, primary_config).start()
    standby = members("standby", data, standby_config).launch(free_port())
    standby.wait_log(rf"standby \(ha\.mode = shared-store\): data dir .* is held by pid {primary.pid} .*"
                     r"waiting for its lock")
    return primary, standby


def standby_listed(port: int, pid: int) -> bool:
    node = manage_result(port, Summary()).node
    return any(standby.pid == pid for standby in node.standbys)


# ---------------------------------------------------------------------------------------
# (a) the standby takes over a crashed active node, with every receipted message
# ---------------------------------------------------------------------------------------


def test_the_standby_waits_exposing_nothing_then_takes_over_with_every_receipted_message(members, tmp_path):
    data = tmp_path / "shared"
    primary, standby = start_pair(members, data, ha_config(), ha_config())
    assert standby.running and not listening(standby.port), "the standby listens for clients"
    epoch = read_epoch(data)
    assert epoch >= 1

    summary = manage_result(primary.port, Summary()).node
    assert (summary.ha_mode, summary.ha_state, summary.epoch) == ("shared-store", "active", epoch)
    wait_until(lambda: standby_listed(primary.port, standby.pid), "the active node to list its standby")

    q = "/queue/" + unique("ha")
    producer = open_client(primary)
    sent = send_many(producer, q, [f"m{i:03d}" for i in range(N)], persistent=True)
    killed = time.monotonic()
    primary.kill9()
    producer.drop()
    standby.wait_listening(timeout=FAILOVER_DEADLINE)
    took = time.monotonic() - killed
    assert took <= FAILOVER_DEADLINE, f"failover took {took:.1f} s"
    standby.wait_log(r"standby: the lock of data dir .* is free .* taking over")

    consumer = open_client(standby)
    consumer.subscribe(q)
    got = [m.body for m in consumer.listener.wait_for(N, timeout=10)]
    assert sorted(got) == sorted(sent), f"lost: {sorted(set(sent) - set(got))[:10]}"
    assert got == sent, "the journal keeps their order"
    assert read_epoch(data) == epoch + 1
    after = manage_result(standby.port, Summary()).node
    assert (after.ha_state, after.epoch, after.id) == ("active", epoch + 1, summary.id), "not the same node"
    assert after.standbys == []
    consumer.disconnect()


def test_a_graceful_stop_hands_the_data_dir_to_the_standby(members, tmp_path):
    data = tmp_path / "shared"
    primary, standby = start_pair(members, data, ha_config(), ha_config())
    q = "/queue/" + unique("ha")
    sent = send_many(open_client(primary), q, ["one", "two"], persistent=True)
    primary.stop()  # SIGTERM: exits 0, releasing the lock last
    standby.wait_listening(timeout=FAILOVER_DEADLINE)
    consumer = open_client(standby)
    consumer.subscribe(q)
    assert [m.body for m in consumer.listener.wait_for(2)] == sent
    consumer.disconnect()


def test_a_standby_stopped_while_waiting_exits_cleanly_and_is_no_longer_listed(members, tmp_path):
    data = tmp_path / "shared"
    primary, standby = start_pair(members, data, ha_config(), ha_config())
    wait_until(lambda: standby_listed(primary.port, standby.pid), "the active node to list its standby")
    standby.stop()  # SIGTERM while waiting: status 0
    assert not list((data / "standby").glob("*.json")), "the standby's file stayed"
    wait_until(lambda: not standby_listed(primary.port, standby.pid), "the standby to leave the active's model")
    assert primary.running


def test_without_shared_store_a_second_process_still_refuses_to_start(members, tmp_path):
    data = tmp_path / "data"
    first = members("first", data, "").start()
    second = members("second", data, "").launch(free_port())
    assert second.wait_exit(10) == 1
    assert f"is in use by another meshgate process (pid {first.pid}" in second.stderr()
    assert first.running


# ---------------------------------------------------------------------------------------
# (b) in a mesh: the peer links with the new process, and messages cross both ways
# ---------------------------------------------------------------------------------------


def test_after_a_takeover_the_peer_links_with_the_new_process_and_messages_route(members, tmp_path):
    peer_link, primary_link, standby_link = free_port(), free_port(), free_port()
    peer = members("peer", tmp_path / "peer", mesh_table(PASSWORD, peer_link, []), node_name="P").start()
    data = tmp_path / "shared"
    primary, standby = start_pair(members, data, ha_config(mesh_table(PASSWORD, primary_link, [peer_link])),
                                  ha_config(mesh_table(PASSWORD, standby_link, [peer_link])))
    peer.wait_log(r"mesh: linked with A$")
    assert not listening(standby_link), "the standby listens for mesh links"
    epoch = read_epoch(data)

    q = "/queue/" + unique("backlog")
    sent = send_many(open_client(primary), q, [f"b{i:03d}" for i in range(50)], persistent=True)
    primary.kill9()
    standby.wait_listening(timeout=FAILOVER_DEADLINE)
    wait_until(lambda: len(re.findall(r"mesh: linked with A\n", peer.stderr() + "\n")) >= 2,
               "the peer to link with the new process", timeout=10, describe=peer.describe)

    # What the old process held follows a consumer on the peer; new messages too.
    consumer = open_client(peer)
    consumer.subscribe(q)
    fresh = send_many(open_client(standby), q, [f"n{i:03d}" for i in range(20)], persistent=True)
    got = [m.body for m in consumer.listener.wait_for(70, timeout=20)]
    assert sorted(got) == sorted(sent + fresh), f"lost: {sorted(set(sent + fresh) - set(got))[:10]}"
    # And the other way: sent on the peer, consumed on the new process (a backlog on
    # the peer follows the consumer's demand once it arrives).
    back = "/queue/" + unique("back")
    at_new = open_client(standby)
    at_new.subscribe(back)
    open_client(peer).send(back, "to the new process", receipt=True)
    assert [m.body for m in at_new.listener.wait_for(1, timeout=10)] == ["to the new process"]

    # The peer's view: the same node id, at the new epoch and the new address.
    view = manage_result(peer.port, Nodes())
    (node,) = [s.node for s in view.nodes if s.node.name == "A"]
    assert node.epoch == epoch + 1 and node.addresses.stomp == f"{HOST}:{standby.port}"
    assert node.addresses.link == f"{HOST}:{standby_link}"


# ---------------------------------------------------------------------------------------
# (c) a peer refuses a node id at an older epoch than it has seen, even after a restart
# ---------------------------------------------------------------------------------------


def test_a_peer_refuses_an_old_copy_of_a_node_and_the_old_copy_stops(members, tmp_path):
    peer_link, a_link = free_port(), free_port()
    peer = members("peer", tmp_path / "peer", mesh_table(PASSWORD, peer_link, []), node_name="P").start()
    data = tmp_path / "shared"
    first = members("first", data, ha_config(mesh_table(PASSWORD, a_link, [peer_link]))).start()
    peer.wait_log(r"mesh: linked with A$")
    first.stop()
    old_copy = tmp_path / "old-copy"
    shutil.copytree(data, old_copy)  # the data dir as an old process left it, at this epoch
    stale_epoch = read_epoch(old_copy)
    second = members("second", data, ha_config(mesh_table(PASSWORD, a_link, [peer_link]))).start()
    wait_until(lambda: peer.stderr().count("mesh: linked with A") >= 2, "the peer to link with epoch 2",
               describe=peer.describe)
    second.stop()
    assert read_epoch(data) == stale_epoch + 1
    peer.restart()  # the epoch it saw is in its store, not only in memory

    # The old process comes back on its old data (without shared-store: it keeps its epoch).
    stale = members("stale", old_copy, mesh_table(PASSWORD, a_link, [peer_link])).launch(free_port())
    assert stale.wait_exit(15) == 1
    peer.wait_log(rf"mesh link A refused: node id \S+ presented epoch {stale_epoch}, but this node has seen "
                  rf"epoch {stale_epoch + 1} of it")
    assert re.search(r"mesh: P refused the link: node id .* presented epoch", stale.stderr()), stale.stderr()
    assert "meshgate: fenced: P has seen epoch" in stale.stderr()
    assert peer.running


# ---------------------------------------------------------------------------------------
# (d) an active node that finds a higher epoch in its data dir was replaced: it stops
# ---------------------------------------------------------------------------------------


def test_the_holder_stops_when_its_data_dir_shows_a_higher_epoch(members, tmp_path):
    data = tmp_path / "shared"
    holder = members("holder", data, ha_config()).start()
    client = open_client(holder)
    client.send("/queue/" + unique("before"), "x", receipt=True)
    epoch = read_epoch(data)
    write_epoch(data, epoch + 1)  # what a process that took the data dir over (a partition) writes
    replaced_at = time.monotonic()
    assert holder.wait_exit(10) == 1
    took = time.monotonic() - replaced_at
    assert took < 3.0, f"the replaced holder served on for {took:.1f} s (lease interval: 1 s)"
    stderr = holder.stderr()
    assert re.search(rf"meshgate: fenced: data dir \S+ was taken over by another process: its epoch is "
                     rf"{epoch + 1}, this node's is {epoch}", stderr), stderr
    assert not listening(holder.port)
    client.listener.wait_disconnected()


def test_standby_takeover_without_a_standby_is_just_a_restart_at_the_next_epoch(members, tmp_path):
    data = tmp_path / "shared"
    node = members("node", data, ha_config()).start()
    first = manage_result(node.port, Summary()).node
    node.kill9()
    node.start(port=0)
    second = manage_result(node.port, Summary()).node
    assert second.id == first.id and second.epoch == first.epoch + 1 == read_epoch(data)
