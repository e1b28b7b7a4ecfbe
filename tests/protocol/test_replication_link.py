"""The replication link over iosim: the handshake (both sides prove the password),
the catch-up copy, the stream, and receipts held until the backup's ACK."""

from __future__ import annotations

from twisted.test import iosim

from gateway.store.replicated import ReplicatedJournalStore
from meshgate import replication as r
from tests.unit.test_journal import LoopReactor, message


class Reactor(LoopReactor):
    def seconds(self) -> float:
        return 0.0

    def turn(self) -> None:
        while not self.calls.empty():
            func, args = self.calls.get()
            func(*args)


def pair(tmp_path, backup_password: str = "pw"):
    reactor = Reactor()
    store = ReplicatedJournalStore(tmp_path / "primary", reactor, sync=False)
    list(store.recover())
    (tmp_path / "primary" / "epoch").write_text("3\n")
    (tmp_path / "primary" / "node.json").write_text('{"id": "n1", "name": "A", "boots": 1}')
    replaced: list[str] = []
    source = r.ReplicationSource(store, reactor, node_id="n1", epoch=3, password="pw", sync=True, heartbeat_s=0.2,
                                 backup_timeout_s=3.0, on_replaced=replaced.append)
    (tmp_path / "backup").mkdir()
    follower = r.ReplicaFollower(tmp_path / "backup", reactor, peer=("127.0.0.1", 1), password=backup_password,
                                 witness=None, heartbeat_s=0.2, takeover_after_s=1.0, force=False,
                                 node_id=lambda: "n1")
    server = r._SourceFactory(source).buildProtocol(None)
    client = r._FollowerFactory(follower).buildProtocol(None)
    follower.link = client
    pump = iosim.connect(server, iosim.makeFakeServer(server), client, iosim.makeFakeClient(client), debug=False)
    return store, reactor, source, follower, pump, replaced


def test_the_backup_copies_the_journal_then_follows_and_receipts_wait_for_its_ack(tmp_path):
    store, reactor, source, follower, pump, _ = pair(tmp_path)
    store.add("queue:/queue/a", message(1))
    reactor.turn()  # written before the backup came: it arrives in the copy
    pump.flush()
    assert source.state == "in-sync" and follower.caught_up
    assert (tmp_path / "backup" / "epoch").read_text() == "3\n"
    assert store.replica_waits, "sync: receipts wait for an in-sync backup"
    store.add("queue:/queue/a", message(2))
    waiter = store.when_durable()
    reactor.turn()
    assert not waiter.called, "durable before the backup had it"
    pump.flush()  # WRITE to the backup, its ACK back
    assert waiter.called
    segment = f"{store.segment:08d}.log"
    assert (tmp_path / "backup" / "journal" / segment).read_bytes() == \
        (tmp_path / "primary" / "journal" / segment).read_bytes()
    assert source.lag() == 0


def test_a_backup_with_the_wrong_password_gets_nothing(tmp_path):
    store, reactor, source, follower, pump, _ = pair(tmp_path, backup_password="wrong")
    store.add("queue:/queue/a", message(1))
    reactor.turn()
    pump.flush()
    assert source.backup is None and source.state == "no-backup"
    assert not (tmp_path / "backup" / "journal").exists()
    waiter = store.when_durable()
    reactor.turn()
    assert waiter.called, "receipts do not wait for a backup that is not there"
