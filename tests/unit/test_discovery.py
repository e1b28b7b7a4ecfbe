"""Multicast discovery: the signed codec, the peer table, the service on a fake clock, real multicast on lo."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock

from mesh.discovery import (
    MAX_DATAGRAM,
    Announcement,
    DiscoveryError,
    DiscoveryService,
    DiscoveryTable,
    decode_announcement,
    encode_announcement,
)

SECRET = b"cluster-password"
REPO = Path(__file__).resolve().parents[2]


def announcement(name: str = "a", link_port: int = 61616, node_id: str | None = None) -> Announcement:
    return Announcement(node_id or str(uuid.uuid4()), name, ("10.0.0.1", link_port), ("10.0.0.1", 61613), "grp")


# --- codec -------------------------------------------------------------------------------------

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
addresses = st.tuples(text, st.integers(0, 65535))
announcements = st.builds(Announcement, st.uuids().map(str), text, addresses, addresses, text, st.booleans())


@given(announcements, st.binary(max_size=64))
def test_round_trip(a, secret):
    data = encode_announcement(a, secret)
    assert len(data) <= MAX_DATAGRAM
    assert decode_announcement(data, secret) == a


@settings(max_examples=500)
@given(st.binary(max_size=5000))
def test_arbitrary_bytes_raise_only_discovery_error(data):
    try:
        decode_announcement(data, SECRET)
    except DiscoveryError:
        pass


def test_wrong_secret_is_rejected():
    with pytest.raises(DiscoveryError, match="MAC"):
        decode_announcement(encode_announcement(announcement(), SECRET), b"other-password")


@given(st.data())
def test_any_tampered_byte_is_rejected(data):
    encoded = bytearray(encode_announcement(announcement(), SECRET))
    i = data.draw(st.integers(0, len(encoded) - 1))
    encoded[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(DiscoveryError):
        decode_announcement(bytes(encoded), SECRET)


def test_truncated_and_extended_datagrams_are_rejected():
    encoded = encode_announcement(announcement(), SECRET)
    for bad in (encoded[:-1], encoded + b" ", encoded[:10], b""):
        with pytest.raises(DiscoveryError):
            decode_announcement(bad, SECRET)


def test_wrong_version_is_rejected_even_with_a_valid_mac():
    import hashlib
    import hmac

    encoded = encode_announcement(announcement(), SECRET)
    header, body = b"MGD\x02", encoded[4 + 32 :]
    forged = header + hmac.new(SECRET, header + body, hashlib.sha256).digest() + body
    with pytest.raises(DiscoveryError, match="version"):
        decode_announcement(forged, SECRET)


def test_oversized_announcements_are_refused_both_ways():
    big = announcement(name="x" * MAX_DATAGRAM)
    with pytest.raises(DiscoveryError, match="large"):
        encode_announcement(big, SECRET)
    with pytest.raises(DiscoveryError, match="large"):
        decode_announcement(b"MGD\x01" + b"\0" * MAX_DATAGRAM, SECRET)


def test_signed_but_malformed_payloads_are_rejected():
    import hashlib
    import hmac

    def signed(body: bytes) -> bytes:
        header = b"MGD\x01"
        return header + hmac.new(SECRET, header + body, hashlib.sha256).digest() + body

    good = {"id": str(uuid.uuid4()), "n": "a", "l": ["h", 1], "s": ["h", 2], "g": ""}
    bad_bodies = [b"\xff", b"[]", b"{", json.dumps({**good, "id": "not-a-uuid"}).encode()]
    bad_bodies += [json.dumps({**good, "l": v}).encode() for v in (["h", 70000], ["h", True], ["h"], None, "h:1")]
    bad_bodies += [json.dumps({**good, "n": 5}).encode()]
    assert decode_announcement(signed(json.dumps(good).encode()), SECRET).name == "a"
    for body in bad_bodies:
        with pytest.raises(DiscoveryError):
            decode_announcement(signed(body), SECRET)


def _body(data: bytes) -> dict:
    return json.loads(data[4 + 32 :])


def test_the_tls_flag_is_sent_only_by_a_node_that_requires_tls():
    plain = announcement()
    tls = Announcement(plain.node_id, plain.name, plain.link, plain.stomp, plain.group_name, requires_tls=True)
    assert "t" not in _body(encode_announcement(plain, SECRET))  # what nodes sent before the flag existed
    assert _body(encode_announcement(tls, SECRET))["t"] == 1
    assert decode_announcement(encode_announcement(tls, SECRET), SECRET).requires_tls is True
    assert decode_announcement(encode_announcement(plain, SECRET), SECRET).requires_tls is False


def test_an_announcement_without_the_flag_is_plaintext_and_unknown_fields_are_ignored():
    import hashlib
    import hmac

    def signed(fields: dict) -> bytes:
        header, body = b"MGD\x01", json.dumps(fields).encode()
        return header + hmac.new(SECRET, header + body, hashlib.sha256).digest() + body

    old = {"id": str(uuid.uuid4()), "n": "old", "l": ["h", 1], "s": ["h", 2], "g": ""}
    assert decode_announcement(signed(old), SECRET).requires_tls is False
    assert decode_announcement(signed({**old, "t": 1, "future": [1]}), SECRET).requires_tls is True
    for bad in (True, 2, "1", None, 1.0):
        with pytest.raises(DiscoveryError, match="TLS flag"):
            decode_announcement(signed({**old, "t": bad}), SECRET)


# --- table -------------------------------------------------------------------------------------


def test_a_peer_restarted_with_tls_is_found_again():
    me, peer = announcement("me"), announcement("peer")
    table = DiscoveryTable(me.node_id, refresh_timeout=1.0)
    assert table.seen(peer, now=0.0) == [peer]
    with_tls = Announcement(peer.node_id, peer.name, peer.link, peer.stomp, peer.group_name, requires_tls=True)
    assert table.seen(with_tls, now=0.5) == [with_tls]
    assert table.seen(with_tls, now=0.7) == []


def test_table_found_once_then_changed_then_lost():
    me, peer = announcement("me"), announcement("peer")
    table = DiscoveryTable(me.node_id, refresh_timeout=1.0)
    assert table.seen(peer, now=0.0) == [peer]
    assert table.seen(peer, now=0.5) == []  # heard again, unchanged: not found again
    restarted = announcement("peer", link_port=7000, node_id=peer.node_id)
    assert table.seen(restarted, now=1.0) == [restarted]
    assert table.peers == {peer.node_id: restarted}
    assert table.expire(now=1.75) == []  # last heard at 1.0
    assert table.expire(now=2.0) == [restarted]
    assert table.peers == {}
    assert table.expire(now=5.0) == []  # lost only once
    assert table.seen(restarted, now=6.0) == [restarted]  # back after being lost: found again


def test_table_ignores_own_announcements():
    me = announcement("me")
    table = DiscoveryTable(me.node_id, refresh_timeout=1.0)
    assert table.seen(me, now=0.0) == []
    assert table.peers == {}


# --- service on a fake reactor -----------------------------------------------------------------


class FakeMulticastPort:
    def __init__(self, protocol):
        self.protocol, self.sent, self.options = protocol, [], {}
        self.interface_set = defer.Deferred()  # fired by the test, like a slow setOutgoingInterface

    def setTTL(self, ttl):
        self.options["ttl"] = ttl

    def setLoopbackMode(self, mode):
        self.options["loop"] = mode

    def joinGroup(self, addr, interface=""):
        self.options["joined"] = (addr, interface)
        return defer.succeed(None)

    def setOutgoingInterface(self, addr):
        def record(_):
            self.options["interface"] = addr

        return self.interface_set.addCallback(record)

    def write(self, datagram, addr):
        assert self.options.get("interface") == "127.0.0.1", "sent before the outgoing interface was set"
        self.sent.append((datagram, addr))

    def stopListening(self):
        self.options["stopped"] = True


class MulticastMemoryReactor(MemoryReactorClock):
    def listenMulticast(self, port, protocol, interface="", maxPacketSize=8192, listenMultiple=False):
        self.multicast = (port, interface, listenMultiple)
        self.port = FakeMulticastPort(protocol)
        protocol.makeConnection(self.port)
        return self.port


def make_service(reactor, events, me=None):
    return DiscoveryService(
        reactor,
        ("239.255.1.2", 45000),
        "127.0.0.1",
        me or announcement("me"),
        SECRET,
        broadcast_period=0.1,
        refresh_timeout=0.4,
        on_found=lambda a: events.append(("found", a.name)),
        on_lost=lambda a: events.append(("lost", a.name)),
    )


def test_service_waits_for_outgoing_interface_then_broadcasts_periodically():
    reactor, events = MulticastMemoryReactor(), []
    service = make_service(reactor, events)
    ready = service.start()
    port = reactor.port
    assert reactor.multicast == (45000, "239.255.1.2", True)
    assert port.options == {"ttl": 1, "loop": True, "joined": ("239.255.1.2", "127.0.0.1")}
    assert port.sent == [] and not ready.called
    port.interface_set.callback(None)
    assert ready.called and len(port.sent) == 1
    reactor.advance(0.1)
    reactor.advance(0.1)
    assert len(port.sent) == 3
    assert {addr for _, addr in port.sent} == {("239.255.1.2", 45000)}
    assert decode_announcement(port.sent[0][0], SECRET) == service.announcement
    service.stop()
    reactor.advance(1.0)
    assert len(port.sent) == 3 and port.options["stopped"]


def test_service_finds_loses_and_rejects_on_fake_clock():
    reactor, events = MulticastMemoryReactor(), []
    service = make_service(reactor, events)
    service.start()
    reactor.port.interface_set.callback(None)
    peer = announcement("peer")
    service.datagramReceived(encode_announcement(service.announcement, SECRET), ("127.0.0.1", 1))  # own echo
    service.datagramReceived(encode_announcement(peer, SECRET), ("127.0.0.1", 1))
    service.datagramReceived(encode_announcement(peer, b"stranger"), ("127.0.0.1", 2))
    service.datagramReceived(b"\0" * 10_000, ("127.0.0.1", 2))
    assert events == [("found", "peer")] and service.rejected == 2
    assert list(service.peers) == [peer.node_id]
    reactor.advance(0.3)
    service.datagramReceived(encode_announcement(peer, SECRET), ("127.0.0.1", 1))  # refreshed at 0.3
    for _ in range(6):  # lost between 0.7 and 0.8 (expiry checked every 0.1)
        reactor.advance(0.1)
    assert events == [("found", "peer"), ("lost", "peer")] and service.peers == {}


def test_failing_callback_does_not_escape_datagram_received():
    reactor = MulticastMemoryReactor()
    service = make_service(reactor, [])
    service.on_found = lambda a: 1 / 0
    service.start()
    service.datagramReceived(encode_announcement(announcement("peer"), SECRET), ("127.0.0.1", 1))
    assert len(service.peers) == 1


# --- real multicast on 127.0.0.1 ---------------------------------------------------------------

# Runs in a subprocess so the global reactor never leaks into other tests; prints one JSON line.
SCENARIO = r"""
import json, os, socket, struct, sys, uuid
from twisted.internet import defer, task
from mesh.discovery import Announcement, DiscoveryService

ETH_P_ALL = 0x0003

def sniffer(ifname):
    # Sees outgoing frames too (ETH_P_ALL), so a datagram leaving by eth0 would show up here.
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    s.bind((ifname, 0))
    s.setblocking(False)
    return s

def count_group_frames(s, group, port):
    n = 0
    while True:
        try:
            frame = s.recv(65535)
        except BlockingIOError:
            return n
        ip = frame[14:]
        if frame[12:14] != b"\x08\x00" or len(ip) < 28 or ip[9] != 17:
            continue
        ihl = (ip[0] & 0x0F) * 4
        if ip[16:20] == socket.inet_aton(group) and struct.unpack("!H", ip[ihl + 2 : ihl + 4])[0] == port:
            n += 1

@defer.inlineCallbacks
def main(reactor, raw):
    cfg = json.loads(raw)
    group = (cfg["group"], cfg["port"])
    t0 = reactor.seconds()
    now = lambda: round(reactor.seconds() - t0, 4)
    out = {"events": [], "ready": {}, "sockopts": {}, "sniffed": {}}
    sniffers = {name: sniffer(name) for name in cfg.get("sniff", [])}
    counts = dict.fromkeys(sniffers, 0)
    def drain():
        for name, s in sniffers.items():
            counts[name] += count_group_frames(s, *group)
    sniffing = task.LoopingCall(drain)
    sniffing.start(0.02)
    services = {}
    for i, (name, secret) in enumerate(cfg["nodes"]):
        a = Announcement(str(uuid.uuid4()), name, ("127.0.0.1", 7000 + i), ("127.0.0.1", 8000 + i))
        def event(kind, me=name):
            return lambda p: out["events"].append([kind, me, p.name, now()])
        services[name] = s = DiscoveryService(reactor, group, "127.0.0.1", a, secret.encode(), cfg["period"],
                                              cfg["timeout"], event("found"), event("lost"))
        yield s.start()
        out["ready"][name] = now()
        sock = s._port.socket
        out["sockopts"][name] = {
            "if": socket.inet_ntoa(sock.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, 4)),
            "ttl": sock.getsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL),
        }
    yield task.deferLater(reactor, cfg["settle"], lambda: None)
    snapshot = lambda: {n: sorted(p.name for p in s.peers.values()) for n, s in services.items()}
    out["peers"] = snapshot()
    out["rejected"] = {n: s.rejected for n, s in services.items()}
    if cfg.get("stop"):
        out["stopped_at"] = now()
        yield services.pop(cfg["stop"]).stop()
        yield task.deferLater(reactor, cfg["after_stop"], lambda: None)
        out["peers_after_stop"] = snapshot()
    for s in services.values():
        yield s.stop()
    sniffing.stop()
    drain()
    out["sniffed"] = counts
    print(json.dumps(out))

task.react(main, [sys.argv[1]])
"""

PERIOD, TIMEOUT = 0.1, 0.4


def run_scenario(**cfg) -> dict:
    cfg.setdefault("group", f"239.255.{random.randint(0, 255)}.{random.randint(1, 254)}")
    cfg.setdefault("port", random.randint(40000, 60000))
    cfg.setdefault("period", PERIOD)
    cfg.setdefault("timeout", TIMEOUT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", SCENARIO, json.dumps(cfg)], capture_output=True, text=True, timeout=30, env=env, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def found_at(out, me, peer):
    return [t for kind, m, p, t in out["events"] if (kind, m, p) == ("found", me, peer)]


def test_real_multicast_two_nodes_find_each_other_and_nothing_leaves_by_eth0():
    sniff = ["lo", "eth0"] if os.geteuid() == 0 and Path("/sys/class/net/eth0").exists() else []
    out = run_scenario(nodes=[["a", "s3cret"], ["b", "s3cret"]], settle=3 * PERIOD, sniff=sniff)
    assert out["peers"] == {"a": ["b"], "b": ["a"]}
    both_ready = max(out["ready"].values())
    # Found once each, within ~2 broadcast periods of both being up (plus scheduling slack).
    for me, peer in (("a", "b"), ("b", "a")):
        (t,) = found_at(out, me, peer)
        assert t - both_ready <= 2 * PERIOD + 0.1, out
    assert out["rejected"] == {"a": 0, "b": 0}
    assert all(o == {"if": "127.0.0.1", "ttl": 1} for o in out["sockopts"].values()), out["sockopts"]
    if sniff:
        assert out["sniffed"]["lo"] > 0  # the sniffer works ...
        assert out["sniffed"]["eth0"] == 0  # ... and saw no announcement leave by the default route


def test_real_multicast_node_with_another_secret_is_not_found():
    out = run_scenario(nodes=[["a", "s3cret"], ["b", "s3cret"], ["c", "intruder"]], settle=4 * PERIOD)
    assert out["peers"] == {"a": ["b"], "b": ["a"], "c": []}
    assert not [e for e in out["events"] if "c" in e[1:3]]
    # Each side heard the other's datagrams and dropped them.
    assert out["rejected"]["c"] >= 2 and out["rejected"]["a"] >= 1 and out["rejected"]["b"] >= 1


def test_real_multicast_stopped_node_is_lost_after_refresh_timeout():
    out = run_scenario(nodes=[["a", "s3cret"], ["b", "s3cret"]], settle=3 * PERIOD, stop="b", after_stop=3 * TIMEOUT)
    assert out["peers"] == {"a": ["b"], "b": ["a"]}
    lost = [t for kind, me, peer, t in out["events"] if (kind, me, peer) == ("lost", "a", "b")]
    assert len(lost) == 1, out["events"]
    # Last heard at most one period before the stop; expiry is checked every timeout/4.
    delay = lost[0] - out["stopped_at"]
    assert TIMEOUT - PERIOD - 0.02 <= delay <= TIMEOUT * 1.25 + 0.15, out
    assert out["peers_after_stop"] == {"a": []}
    assert len(found_at(out, "a", "b")) == 1  # not found again after being lost
