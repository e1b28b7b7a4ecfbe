"""Replicated pairs without sockets: the replication codec, the primary's durable
position across both copies (one group commit), the backup's copy of the files,
and the witness's rules for a takeover."""

from __future__ import annotations

import json

import pytest

from gateway.store.replicated import ReplicatedJournalStore
from meshgate import replication as r
from meshgate.witness import Witness, signed, verify
from tests.unit.test_journal import LoopReactor, message

# -- the codec -----------------------------------------------------------------------------------


def test_frames_round_trip_split_at_every_byte():
    stream = b"".join([
        r.encode_json(r.CHALLENGE, {"nonce": "abc"}),
        r.encode_write(3, 4096, 123456, b"record bytes"),
        r.encode_file("journal/00000003.log", 10, b"copy"),
        r.encode_position(r.ACK, 2**40 + 7),
        r.encode(r.DELETE, b"journal/00000001.log"),
    ])
    for split in range(len(stream) + 1):
        parser = r.Parser()
        frames = parser.feed(stream[:split]) + parser.feed(stream[split:])
        assert [kind for kind, _ in frames] == [r.CHALLENGE, r.WRITE, r.FILE, r.ACK, r.DELETE]
        segment, offset, end, data = r.decode_write(frames[1][1])
        assert (segment, offset, end, bytes(data)) == (3, 4096, 123456, b"record bytes")
        name, offset, data = r.decode_file(frames[2][1])
        assert (name, offset, bytes(data)) == ("journal/00000003.log", 10, b"copy")
        assert r.decode_position(frames[3][1]) == 2**40 + 7


def test_the_parser_refuses_oversized_and_unknown_frames():
    with pytest.raises(r.ReplicationError, match="at most"):
        r.Parser(max_frame=10).feed(r.encode(r.CATALOG, b"x" * 11))
    with pytest.raises(r.ReplicationError, match="unknown frame kind"):
        r.Parser().feed(b"\x00\x00\x00\x00\x63")


@pytest.mark.parametrize("name", ["../etc/passwd", "journal/../../x.log", "/abs/00000001.log", "journal/abc.log",
                                  "lock", "journal/00000001.log/x"])
def test_a_file_name_outside_the_data_dir_is_refused(name):
    with pytest.raises(r.ReplicationError, match="not a replicated file name"):
        r.decode_file(r.encode_file(name, 0, b"")[5:])


def test_proofs_depend_on_password_nonce_and_side():
    assert r.proof("pw", "n1", "backup") == r.proof("pw", "n1", "backup")
    assert r.proof("pw", "n1", "backup") != r.proof("other", "n1", "backup")
    assert r.proof("pw", "n1", "backup") != r.proof("pw", "n2", "backup")
    assert r.proof("pw", "n1", "backup") != r.proof("pw", "n1", "primary")


# -- the durable position across both copies -----------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.writes: list[tuple[int, int, bytes, int]] = []
        self.events: list[tuple[str, object]] = []

    def wrote(self, segment, offset, data, end):
        self.writes.append((segment, offset, data, end))

    def segment_opened(self, segment):
        self.events.append(("segment", segment))

    def file_deleted(self, name):
        self.events.append(("deleted", name))

    def catalog_saved(self, data):
        self.events.append(("catalog", data))


def replicated(tmp_path) -> tuple[ReplicatedJournalStore, LoopReactor, Sink]:
    reactor = LoopReactor()
    store = ReplicatedJournalStore(tmp_path, reactor, sync=False)  # sync off: the local "sync" is immediate
    list(store.recover())
    sink = Sink()
    store.sink = sink
    return store, reactor, sink


def test_each_write_is_streamed_with_its_segment_offset_and_end(tmp_path):
    store, reactor, sink = replicated(tmp_path)
    store.add("queue:/queue/a", message(1))
    store.add("queue:/queue/a", message(2))
    d = store.when_durable()
    reactor.run_until(lambda: d.called)
    assert len(sink.writes) == 1, "one reactor turn, one write, one frame"
    segment, offset, data, end = sink.writes[0]
    assert (segment, offset, end) == (store.segment, 0, store.written)
    assert (tmp_path / "journal" / f"{segment:08d}.log").read_bytes() == data
    store.save_catalog({"queues": {"a": {}}})
    assert sink.events[-1][0] == "catalog" and b"queues" in sink.events[-1][1]


def test_with_a_waiting_replica_durable_needs_the_backups_ack_and_one_ack_covers_many(tmp_path):
    store, reactor, sink = replicated(tmp_path)
    store.set_replica_waits(True)
    waiters = []
    for n in range(5):
        store.add("queue:/queue/a", message(n))
        waiters.append(store.when_durable())
        reactor.run_until(lambda n=n: len(sink.writes) == n + 1)
    assert store.local_durable == store.written
    assert not any(w.called for w in waiters), "durable before the backup acknowledged"
    store.acked(sink.writes[2][3])
    assert [w.called for w in waiters] == [True, True, True, False, False]
    store.acked(sink.writes[-1][3])  # one ack for the rest: the group commit spans both
    assert all(w.called for w in waiters)


def test_a_backup_that_goes_releases_what_waited_only_for_it(tmp_path):
    store, reactor, sink = replicated(tmp_path)
    store.set_replica_waits(True)
    store.add("queue:/queue/a", message(1))
    waiter = store.when_durable()
    reactor.run_until(lambda: sink.writes)
    assert not waiter.called
    store.set_replica_waits(False)
    assert waiter.called


def test_the_ack_of_a_backup_that_does_not_count_never_holds_receipts(tmp_path):
    store, reactor, sink = replicated(tmp_path)  # catching up: replica_waits is False
    store.add("queue:/queue/a", message(1))
    waiter = store.when_durable()
    reactor.run_until(lambda: waiter.called)
    store.acked(10**9)  # harmless
    assert store.replica_acked == 10**9


# -- the backup's copy -----------------------------------------------------------------------------


def test_the_backup_copy_sets_the_old_journal_aside_and_marks_itself_incomplete_until_finished(tmp_path):
    (tmp_path / "journal").mkdir()
    (tmp_path / "journal" / "00000009.log").write_bytes(b"stale")
    (tmp_path / "epoch").write_text("99\n")
    files = r.ReplicaFiles(tmp_path)
    files.begin()
    assert not files.complete
    assert (tmp_path / "journal.old" / "00000009.log").exists()
    assert not (tmp_path / "epoch").exists(), "a stale file would keep its tail under a shorter copy"
    files.write("journal/00000001.log", 0, b"abc")
    files.write("journal/00000001.log", 3, b"def")
    files.write("epoch", 0, b"4\n")
    files.finish()
    assert files.complete
    assert (tmp_path / "journal" / "00000001.log").read_bytes() == b"abcdef"
    assert (tmp_path / "epoch").read_text() == "4\n"
    files.delete("journal/00000001.log")
    assert not (tmp_path / "journal" / "00000001.log").exists()
    files.close()


# -- the witness -----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _signed(body: dict) -> dict:
    return json.loads(signed("pw", body))


def test_the_witness_refuses_a_claim_while_it_hears_the_primary_and_grants_exactly_one_after():
    clock = Clock()
    witness = Witness("pw", clock=clock)
    assert witness.answer(_signed({"op": "alive", "node_id": "n", "epoch": 3})) == {"ok": True}
    clock.now += 0.5
    refused = witness.answer(_signed({"op": "claim", "node_id": "n", "epoch": 4, "after_s": 1.0}))
    assert refused["granted"] is False and "heard the primary" in refused["reason"]
    clock.now += 1.0
    assert witness.answer(_signed({"op": "claim", "node_id": "n", "epoch": 4, "after_s": 1.0})) == {"granted": True}
    again = witness.answer(_signed({"op": "claim", "node_id": "n", "epoch": 4, "after_s": 1.0}))
    assert again["granted"] is False, "a second claim of the same epoch"
    # The old primary, heard again, is told it was replaced; a restarting one asks the status.
    assert witness.answer(_signed({"op": "alive", "node_id": "n", "epoch": 3})) == {"fenced": 4}
    assert witness.answer(_signed({"op": "status", "node_id": "n", "epoch": 3}))["epoch"] == 4


def test_the_witness_answers_nothing_to_a_request_without_the_password():
    witness = Witness("pw")
    forged = json.loads(signed("not-the-password", {"op": "claim", "node_id": "n", "epoch": 9, "after_s": 0}))
    assert "error" in witness.answer(forged)
    assert witness.epochs == {}
    assert verify("pw", _signed({"op": "status"})) and not verify("pw", forged)


# -- the [ha] keys ---------------------------------------------------------------------------------


def test_replicated_mode_needs_its_addresses_and_a_password():
    from meshgate.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="ha.replication_bind"):
        load_config(None, {"ha.mode": "replicated", "ha.peer": "127.0.0.1:1", "ha.password": "x"})
    with pytest.raises(ConfigError, match="ha.password"):
        load_config(None, {"ha.mode": "replicated", "ha.peer": "127.0.0.1:1", "ha.replication_bind": "127.0.0.1:2"})
    config = load_config(None, {"ha.mode": "replicated", "ha.peer": "127.0.0.1:1", "ha.replication_bind":
                                "127.0.0.1:2", "ha.password": "x", "ha.role": "backup", "ha.sync": False})
    assert (config.ha.role, config.ha.sync, config.ha.witness, config.replication_password) == \
        ("backup", False, None, "x")


# -- [ha.tls] ---------------------------------------------------------------------------------------


def _replicated(**more: object) -> dict[str, object]:
    return {"ha.mode": "replicated", "ha.peer": "127.0.0.1:1", "ha.replication_bind": "127.0.0.1:2",
            "ha.password": "x", **more}


def _pem_files(tmp_path) -> dict[str, str]:
    """A member's [ha.tls] files, real ones: the key must match its certificate at load."""
    from tests.e2e.tls_support import issue

    ca = issue(tmp_path, "ca", "pair CA", ca=True)
    issue(tmp_path, "member", "127.0.0.1", issuer=ca[:2], client=True)
    return {"ha.tls.certificate": str(tmp_path / "member.crt"), "ha.tls.private_key": str(tmp_path / "member.key"),
            "ha.tls.ca_certificate": str(tmp_path / "ca.crt")}


def test_ha_tls_is_optional_and_parsed(tmp_path):
    from meshgate.config import load_config

    assert load_config(None, _replicated()).ha.tls is None
    tls = load_config(None, _replicated(**_pem_files(tmp_path))).ha.tls
    assert (tls.certificate, tls.private_key, tls.ca_certificate) == \
        (str(tmp_path / "member.crt"), str(tmp_path / "member.key"), str(tmp_path / "ca.crt"))


@pytest.mark.parametrize("key", ["certificate", "private_key", "ca_certificate"])
def test_ha_tls_needs_every_file(tmp_path, key):
    from meshgate.config import ConfigError, load_config

    files = _pem_files(tmp_path)
    del files[f"ha.tls.{key}"]
    with pytest.raises(ConfigError, match=rf"ha\.tls\.{key}: required key is missing"):
        load_config(None, _replicated(**files))
    files[f"ha.tls.{key}"] = str(tmp_path / "absent.pem")
    with pytest.raises(ConfigError, match=rf"ha\.tls\.{key}: file .*absent\.pem.* does not exist"):
        load_config(None, _replicated(**files))


@pytest.mark.parametrize("key", ["certificate", "private_key", "ca_certificate"])
def test_ha_tls_rejects_a_file_that_is_not_pem(tmp_path, key):
    from meshgate.config import ConfigError, load_config

    files = _pem_files(tmp_path)
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    files[f"ha.tls.{key}"] = str(tmp_path / "junk.pem")
    with pytest.raises(ConfigError, match=rf"ha\.tls\.{key}: .*junk\.pem.* holds no PEM"):
        load_config(None, _replicated(**files))


def test_ha_tls_only_with_a_replicated_pair(tmp_path):
    from meshgate.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"ha\.tls: only with mode = \"replicated\""):
        load_config(None, {"ha.mode": "shared-store", **_pem_files(tmp_path)})
    with pytest.raises(ConfigError, match=r"ha\.tls\.bind: unknown key"):
        load_config(None, _replicated(**_pem_files(tmp_path), **{"ha.tls.bind": "127.0.0.1:3"}))
