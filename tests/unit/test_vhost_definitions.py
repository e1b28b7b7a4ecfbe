"""Vhosts as mesh-wide definitions (docs/vhosts.md, "Creating and deleting vhosts"):
a vhost record in the default vhost's definitions makes the vhost's broker, handing
it what the store kept for it; a tombstone deletes it with its stored messages, also
on a node that was away; a configured vhost stays. On the wire a node before vhosts
gets the vhost records in a frame of their own, so it loses only them."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gateway.broker.message import QUEUE
from gateway.broker.vhosts import VirtualHosts
from gateway.store.memory import MemoryStore
from mesh.definitions import DefinitionSync, _frames
from model.definitions import VHOST, Definition, QueueSettings, VhostSpec
from tests.unit.test_journal import close
from tests.unit.test_vhosts import bodies, node, reopened


def test_a_vhost_defined_after_start_gets_what_the_store_kept_for_it(tmp_path):
    vhosts, reactor = node(tmp_path, "team-a")
    vhosts.brokers["team-a"].send(QUEUE, "orders", {}, b"kept", persistent=True)
    close(vhosts.store, reactor)

    again, store, reactor, _ = reopened(tmp_path)  # team-a no longer configured: its records wait
    assert again.get("team-a") is None and again.messages("team-a") == 1
    again.define("team-a", VhostSpec())
    assert again.origin("team-a") == "definition"
    assert bodies(again, "team-a", "orders") == [b"kept"]
    close(store, reactor)


def test_a_defined_vhost_comes_back_at_recovery_and_a_deleted_one_leaves_nothing(tmp_path):
    vhosts, reactor = node(tmp_path)
    vhosts.define("team-x", VhostSpec(description="x"))
    vhosts.brokers["team-x"].send(QUEUE, "orders", {}, b"x1", persistent=True)
    close(vhosts.store, reactor)

    again, store, reactor, count = reopened(tmp_path)
    assert count == 1 and again.origin("team-x") == "definition"
    again.undefine("team-x")
    assert again.get("team-x") is None and not again.defined("team-x")
    close(store, reactor)

    third, store, reactor, count = reopened(tmp_path)
    assert count == 0 and third.get("team-x") is None
    third.define("team-x", VhostSpec())  # made again: empty, the old messages were removed from the journal
    assert bodies(third, "team-x", "orders") == []
    close(store, reactor)


def test_a_deletion_learned_after_a_restart_drops_the_records_it_kept(tmp_path):
    """A node that was away: it recovers the vhost, then a peer's tombstone arrives."""
    vhosts, reactor = node(tmp_path)
    record = vhosts.define("team-x", VhostSpec())
    vhosts.brokers["team-x"].send(QUEUE, "orders", {}, b"x1", persistent=True)
    close(vhosts.store, reactor)

    again, store, reactor, count = reopened(tmp_path)
    tombstone = Definition(kind=VHOST, name="team-x", version=record.version + 1, origin="peer", changed_at=1.0)
    assert count == 1 and again.default.merge_definition(tombstone)
    assert again.get("team-x") is None
    close(store, reactor)
    third, store, reactor, count = reopened(tmp_path)
    assert count == 0 and third.messages("team-x") == 0
    close(store, reactor)


def test_a_deletion_drops_what_the_store_kept_of_a_vhost_configured_no_more(tmp_path):
    vhosts, reactor = node(tmp_path, "team-a")
    vhosts.brokers["team-a"].send(QUEUE, "orders", {}, b"a1", persistent=True)
    close(vhosts.store, reactor)
    again, store, reactor, _ = reopened(tmp_path)  # no longer configured: listed as stored, unreachable
    assert again.unclaimed() == {"team-a": 1}
    again.undefine("team-a")  # meshgate vhost delete team-a --force, here or on a peer
    assert again.unclaimed() == {}
    close(store, reactor)
    third, store, reactor, _ = reopened(tmp_path, "team-a")  # configured again: nothing comes back
    assert bodies(third, "team-a", "orders") == []
    close(store, reactor)


def test_a_deletion_in_the_catalog_drops_a_vhosts_records_at_recovery(tmp_path):
    """The deletion was saved, not the journal's removes (a crash between): recovery finishes it."""
    vhosts, reactor = node(tmp_path, "team-a")
    vhosts.brokers["team-a"].send(QUEUE, "orders", {}, b"a1", persistent=True)
    vhosts.define("team-a", VhostSpec())
    vhosts.undefine("team-a")  # configured here: the vhost and its message stay, the tombstone is saved
    close(vhosts.store, reactor)
    again, store, reactor, _ = reopened(tmp_path)
    assert again.unclaimed() == {}
    close(store, reactor)
    third, store, reactor, _ = reopened(tmp_path, "team-a")
    assert bodies(third, "team-a", "orders") == []
    close(store, reactor)


def test_a_deletion_by_definition_leaves_a_configured_vhost(tmp_path):
    vhosts, reactor = node(tmp_path, "team-a")
    vhosts.define("team-a", VhostSpec())
    vhosts.undefine("team-a")
    assert vhosts.origin("team-a") == "config" and vhosts.get("team-a") is not None
    close(vhosts.store, reactor)


class _OldDefinition(msgspec.Struct, kw_only=True):
    """How a node before vhosts reads a definition: four kinds."""

    kind: Literal["queue", "durable", "exchange", "binding"]
    name: str
    version: int
    origin: str
    changed_at: float
    queue: Any = None


def test_vhost_records_travel_in_a_frame_of_their_own_so_an_older_node_keeps_the_rest():
    queue = Definition(kind="queue", name="orders", version=1, origin="n", changed_at=0.0, queue=QueueSettings())
    vhost = Definition(kind=VHOST, name="team-x", version=2, origin="n", changed_at=0.0, vhost=VhostSpec())
    known, vhosts = _frames([queue, vhost])
    assert [r.name for r in msgspec.json.decode(known, type=list[_OldDefinition])] == ["orders"]
    try:
        msgspec.json.decode(vhosts, type=list[_OldDefinition])
    except msgspec.ValidationError:
        pass  # what an older node logs and ignores: this frame alone
    else:
        raise AssertionError("an older node reads a vhost record")
    assert _frames([queue]) == [msgspec.json.encode([queue])]


class _Link:
    peer_name = peer_id = "peer"


class _Peers:
    linked: dict = {}

    def watch(self, up) -> None:
        pass


class _Frames:
    def on(self, kind, body, handler) -> None:
        pass


def test_a_record_of_a_kind_this_node_does_not_know_is_skipped_not_the_frame():
    vhosts = VirtualHosts(MemoryStore())
    sync = DefinitionSync("node", vhosts, _Peers(), 0, lambda: None, _Frames())  # type: ignore[arg-type]
    known = msgspec.to_builtins(Definition(kind="queue", name="orders", version=1, origin="peer", changed_at=0.0,
                                           queue=QueueSettings()))
    sync.received(_Link(), [{**known, "kind": "future-kind", "name": "x"}, known])  # type: ignore[arg-type]
    assert "orders" in vhosts.default.queue_settings
