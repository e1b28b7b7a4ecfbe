"""The replication link over iosim: the handshake (both sides prove the password),
the catch-up copy, the stream, and receipts held until the backup's ACK."""

from __future__ import annotations

import pytest
from twisted.test import iosim

from gateway.store.replicated import ReplicatedJournalStore
from meshgate import replication as r
from meshgate.replication import primary as replication_primary
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


def step(reactor: Reactor) -> bool:
    """Run one queued call (one reactor turn's worth of the copy); False when none waits."""
    if reactor.calls.empty():
        return False
    func, args = reactor.calls.get()
    func(*args)
    return True


def test_the_copy_goes_a_chunk_a_turn_and_stays_consistent_with_writes_and_deletions_made_meanwhile(
        tmp_path, monkeypatch):
    monkeypatch.setattr(replication_primary, "COPY_CHUNK", 2048)  # where the copy reads it
    reactor = Reactor()
    store = ReplicatedJournalStore(tmp_path / "primary", reactor, sync=False, segment_size=16 * 1024)
    list(store.recover())
    (tmp_path / "primary" / "epoch").write_text("3\n")
    (tmp_path / "primary" / "node.json").write_text('{"id": "n1", "name": "A", "boots": 1}')
    body = b"x" * 1000
    added = [message(n, body) for n in range(120)]
    for m in added:
        store.add("queue:/queue/a", m)
        reactor.turn()
    source = r.ReplicationSource(store, reactor, node_id="n1", epoch=3, password="pw", sync=True, heartbeat_s=0.2,
                                 backup_timeout_s=3.0, on_replaced=lambda reason: None)
    (tmp_path / "backup").mkdir()
    follower = r.ReplicaFollower(tmp_path / "backup", reactor, peer=("127.0.0.1", 1), password="pw", witness=None,
                                 heartbeat_s=0.2, takeover_after_s=1.0, force=False, node_id=lambda: "n1")
    server = r._SourceFactory(source).buildProtocol(None)
    client = r._FollowerFactory(follower).buildProtocol(None)
    follower.link = client
    pump = iosim.connect(server, iosim.makeFakeServer(server), client, iosim.makeFakeClient(client), debug=False)
    assert source.state == "catching-up"
    turns = 0
    n = 1000
    while source.state != "in-sync":
        pump.flush()
        if turns % 3 == 0:  # writes while the copy goes on: new records, and whole segments freed
            store.add("queue:/queue/a", message(n, body))
            n += 1
            for m in added[turns // 3 * 4:turns // 3 * 4 + 4]:
                store.remove("queue:/queue/a", m)
        step(reactor)
        turns += 1
        assert turns < 10_000
    assert turns > 20, "the copy went in one turn"
    reactor.turn()
    pump.flush()
    primary = {p.name: p.read_bytes() for p in (tmp_path / "primary" / "journal").glob("*.log")}
    backup = {p.name: p.read_bytes() for p in (tmp_path / "backup" / "journal").glob("*.log")}
    assert sorted(backup) == sorted(primary), "segments deleted meanwhile must not be recreated by the copy"
    assert backup == primary
    assert follower.caught_up and source.lag() == 0


def test_a_failback_hands_over_to_the_in_sync_backup_and_nothing_written_after_counts(tmp_path):
    from twisted.internet import defer

    store, reactor, source, follower, pump, _ = pair(tmp_path)
    follower._done = defer.Deferred()  # as wait() leaves it
    store.add("queue:/queue/a", message(1))
    reactor.turn()
    pump.flush()
    reactor.turn()
    pump.flush()
    assert source.state == "in-sync" and source.lag() == 0
    outcome = []
    source.hand_over(timeout_s=5.0).addBoth(outcome.append)  # (this test reactor runs timers at once: no turn)
    pump.flush()
    assert outcome == [4], outcome
    assert follower._done.called and follower._done.result == 4
    assert store.handed_over
    store.add("queue:/queue/a", message(2))
    waiter = store.when_durable()
    reactor.turn()
    pump.flush()
    reactor.turn()
    assert not waiter.called, "a write after the handover counted as durable"


def test_a_backup_that_is_behind_refuses_the_handover_and_goes_on_following(tmp_path):
    from twisted.internet import defer

    store, reactor, source, follower, pump, _ = pair(tmp_path)
    follower._done = defer.Deferred()
    reactor.turn()
    pump.flush()
    reactor.turn()
    pump.flush()
    assert source.state == "in-sync"
    follower.received = -1  # as if a write had not arrived
    outcome = []
    source.hand_over(timeout_s=5.0).addBoth(outcome.append)
    pump.flush()
    assert outcome and isinstance(outcome[0].value, r.HandoverRefused) and "behind" in str(outcome[0].value)
    assert not follower._done.called and not store.handed_over
    store.add("queue:/queue/a", message(3))
    waiter = store.when_durable()
    reactor.turn()
    pump.flush()
    assert waiter.called, "the stream goes on after a refused handover"


# -- [ha.tls]: the same link inside TLS ------------------------------------------------------------


def _tls_configs(tmp_path):
    """Two members' [ha.tls], both signed by the pair's CA, and a rogue one signed by another CA."""
    from meshgate.config import ReplicationTlsConfig
    from tests.e2e.tls_support import issue

    ca_cert, ca_key, ca_path, _ = issue(tmp_path, "ca", "pair-ca", ca=True)
    other_cert, other_key, _, _ = issue(tmp_path, "other-ca", "other-ca", ca=True)
    made = {}
    for stem, issuer in (("a", (ca_cert, ca_key)), ("b", (ca_cert, ca_key)), ("rogue", (other_cert, other_key))):
        _, _, cert, key = issue(tmp_path, stem, "127.0.0.1", issuer=issuer, client=True)
        made[stem] = ReplicationTlsConfig(certificate=str(cert), private_key=str(key), ca_certificate=str(ca_path))
    return made


def tls_pair(tmp_path, backup: str, dial: str = "127.0.0.1"):
    from twisted.internet.task import Clock
    from twisted.protocols.tls import TLSMemoryBIOFactory

    from meshgate.replication.tls import client_options, server_options

    tls = _tls_configs(tmp_path)
    reactor = Reactor()
    store = ReplicatedJournalStore(tmp_path / "primary", reactor, sync=False)
    list(store.recover())
    (tmp_path / "primary" / "epoch").write_text("3\n")
    (tmp_path / "primary" / "node.json").write_text('{"id": "n1", "name": "A", "boots": 1}')
    source = r.ReplicationSource(store, reactor, node_id="n1", epoch=3, password="pw", sync=True, heartbeat_s=0.2,
                                 backup_timeout_s=3.0, on_replaced=lambda _: None, tls=tls["a"])
    (tmp_path / "backup").mkdir()
    follower = r.ReplicaFollower(tmp_path / "backup", reactor, peer=("127.0.0.1", 1), password="pw", witness=None,
                                 heartbeat_s=0.2, takeover_after_s=1.0, force=False, node_id=lambda: "n1",
                                 tls=tls[backup])
    clock = Clock()  # the TLS transports gather small writes until the next turn of this clock
    server = TLSMemoryBIOFactory(server_options(tls["a"]), False, r._SourceFactory(source),
                                 clock=clock).buildProtocol(None)
    client = TLSMemoryBIOFactory(client_options(tls[backup], dial), True, r._FollowerFactory(follower),
                                 clock=clock).buildProtocol(None)
    follower.link = client.wrappedProtocol
    pump = iosim.connect(server, iosim.makeFakeServer(server), client, iosim.makeFakeClient(client), debug=False)

    class Pump:
        def flush(self) -> None:
            for _ in range(100):
                moved = pump.flush()
                clock.advance(0)
                moved = pump.flush() or moved
                quiet = reactor.calls.empty()
                reactor.turn()
                if not moved and quiet and not clock.getDelayedCalls():
                    return

    return store, reactor, source, follower, Pump()


def test_over_tls_the_backup_copies_and_follows(tmp_path):
    store, reactor, source, follower, pump = tls_pair(tmp_path, backup="b")
    store.add("queue:/queue/a", message(1))
    reactor.turn()
    pump.flush()
    assert follower.link.handshake_done and source.backup is not None and source.backup.handshake_done
    assert source.state == "in-sync" and follower.caught_up
    store.add("queue:/queue/a", message(2))
    waiter = store.when_durable()
    reactor.turn()
    pump.flush()
    assert waiter.called and source.lag() == 0


@pytest.mark.parametrize(("backup", "dial"), [("rogue", "127.0.0.1"), ("b", "other.example")],
                         ids=["another CA signed the backup's certificate", "the listener's names another host"])
def test_over_tls_a_peer_that_fails_verification_gets_nothing(tmp_path, caplog, backup, dial):
    store, reactor, source, follower, pump = tls_pair(tmp_path, backup=backup, dial=dial)
    store.add("queue:/queue/a", message(1))
    reactor.turn()
    with caplog.at_level("WARNING", logger="meshgate.replication"):
        pump.flush()
    assert source.backup is None and source.state == "no-backup"
    assert not (tmp_path / "backup" / "journal").exists()
    assert "the TLS handshake with backup" in caplog.text
