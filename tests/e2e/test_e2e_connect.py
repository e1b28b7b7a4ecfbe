"""CONNECT/STOMP, version negotiation, CONNECTED headers, DISCONNECT, heart-beats."""

from __future__ import annotations

import threading
import time

import pytest
from e2e_support import unique
from raw_stomp import encode

pytestmark = pytest.mark.shared_broker


@pytest.mark.parametrize(
    "command, accept, expected",
    [
        ("CONNECT", None, "1.0"),
        ("CONNECT", "1.0", "1.0"),
        ("CONNECT", "1.1", "1.1"),
        ("CONNECT", "1.2", "1.2"),
        ("CONNECT", "1.0,1.1,1.2", "1.2"),
        ("CONNECT", "1.0,1.1", "1.1"),
        ("CONNECT", "1.1,2.0", "1.1"),
        ("CONNECT", "3.0,1.2,1.0", "1.2"),
        ("STOMP", "1.1", "1.1"),
        ("STOMP", "1.2", "1.2"),
        ("STOMP", "1.0,1.1,1.2", "1.2"),
    ],
)
def test_connect_negotiates_highest_common_version(broker, raw, command, accept, expected):
    client = raw(broker)
    headers = {"host": "localhost"}
    if accept is not None:
        headers["accept-version"] = accept
    client.send_frame(command, headers)
    frame = client.expect("CONNECTED")
    assert frame.headers.get("version") == expected
    assert frame.headers.get("server", "").startswith("meshgate"), frame.headers
    assert frame.headers.get("session"), frame.headers
    if expected != "1.0":
        send, _, receive = frame.headers.get("heart-beat", "").partition(",")
        assert send.isdigit() and receive.isdigit(), frame.headers


def test_sessions_are_distinct(broker, raw):
    sessions = {raw(broker).connect("1.2").headers["session"] for _ in range(3)}
    assert len(sessions) == 3


@pytest.mark.parametrize("accept", ["2.0", "0.9,3.1", "1.3"])
def test_no_common_version_is_an_error_with_version_header(broker, raw, accept):
    client = raw(broker)
    frames = client.closed_after("CONNECT", {"accept-version": accept, "host": "localhost"})
    assert [f.command for f in frames] == ["ERROR"], frames
    supported = frames[0].headers.get("version", "")
    assert {v.strip() for v in supported.split(",")} >= {"1.2"}, frames[0].headers
    assert "CONNECTED" not in [f.command for f in frames]


@pytest.mark.parametrize("host", ["example.invalid", "*", "/", "vhost with spaces", ""])
def test_any_host_header_is_accepted(broker, raw, host):
    client = raw(broker)
    client.send_frame("STOMP", {"accept-version": "1.2", "host": host})
    assert client.expect("CONNECTED").headers["version"] == "1.2"


def test_first_frame_must_be_connect(broker, raw):
    client = raw(broker)
    frames = client.closed_after("SEND", {"destination": "/queue/x", "receipt": "r1"}, b"hi")
    assert [f.command for f in frames] == ["ERROR"], frames
    assert frames[0].headers.get("message")


def test_connect_twice_is_an_error(broker, raw):
    client = raw(broker)
    client.connect("1.2")
    frames = client.closed_after("CONNECT", {"accept-version": "1.2", "host": "localhost"})
    assert [f.command for f in frames] == ["ERROR"], frames


def test_stomp_py_connects_with_every_version(broker, connect, version):
    client = connect(broker, version)
    frame = client.connected_frame
    assert frame.headers.get("session")
    assert frame.headers.get("server", "").startswith("meshgate")
    if version != "1.0":
        assert frame.headers.get("version") == version


def test_disconnect_with_receipt_then_closed(broker, raw, version):
    client = raw(broker)
    client.connect(version)
    frames = client.closed_after("DISCONNECT", {"receipt": "bye-77"})
    assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [("RECEIPT", "bye-77")]


def test_frames_before_disconnect_in_same_write_are_processed(broker, raw, connect):
    DEST = "/queue/" + unique("before-disconnect")
    consumer = connect(broker)
    consumer.subscribe(DEST)
    client = raw(broker)
    client.connect("1.2")
    client.sendall(
        encode("SEND", {"destination": DEST}, "before")
        + encode("DISCONNECT", {"receipt": "d"})
        + encode("SEND", {"destination": DEST}, "after")
    )
    assert [f.command for f in client.wait_closed()] == ["RECEIPT"]
    consumer.send(DEST, "fence")
    bodies = [m.body for m in consumer.listener.wait_for_body("fence")]
    assert bodies[0] == "before", bodies


# -- heart-beats ----------------------------------------------------------------------------


@pytest.mark.parametrize("server_ms, client_ms", [(100, 200), (300, 100)])
def test_server_sends_heartbeats_at_negotiated_interval(broker_factory, raw, server_ms, client_ms):
    broker = broker_factory(sets=[f"stomp.heartbeat_send_ms={server_ms}"])
    client = raw(broker)
    connected = client.connect("1.2", {"heart-beat": f"0,{client_ms}"})
    assert connected.headers["heart-beat"].split(",")[0] == str(server_ms)
    interval = max(server_ms, client_ms) / 1000  # the negotiated interval
    window = 1.3
    start = time.monotonic()
    assert client.poll(window) == []
    beats = [t - start for t in client.heartbeat_times]
    expected = window / interval
    assert expected - 2 <= len(beats) <= expected + 2, (interval, beats)
    # "MUST send new data at least every <interval>": allow scheduling jitter, not a missed beat.
    gaps = [b - a for a, b in zip([0.0, *beats[:-1]], beats, strict=True)]
    assert max(gaps) < interval * 1.4 + 0.05, gaps


def test_no_heartbeats_when_client_does_not_want_them(broker_factory, raw):
    broker = broker_factory(sets=["stomp.heartbeat_send_ms=100"])
    client = raw(broker)
    client.connect("1.2", {"heart-beat": "0,0"})
    assert client.poll(0.6) == []
    assert client.heartbeat_times == []


def test_silent_client_is_disconnected_and_its_message_redelivered(broker_factory, raw, connect):
    broker = broker_factory(sets=["stomp.heartbeat_receive_ms=300"])
    silent = raw(broker)
    connected = silent.connect("1.2", {"heart-beat": "300,0"})
    assert connected.headers["heart-beat"].split(",")[1] == "300"
    silent.send_frame("SUBSCRIBE", {"destination": "/queue/hb", "id": "s1", "ack": "client", "receipt": "sub"})
    assert silent.expect("RECEIPT").headers["receipt-id"] == "sub"
    producer = connect(broker)
    producer.send("/queue/hb", "precious", receipt=True)
    message = silent.expect("MESSAGE")
    assert message.body == b"precious"
    assert "redelivered" not in message.headers
    other = connect(broker)
    other.subscribe("/queue/hb")
    went_silent = time.monotonic()
    # No ACK, no heart-beat: 300 ms x grace 1.5 later the broker must give up on it.
    silent.wait_closed(timeout=5)
    elapsed = time.monotonic() - went_silent
    assert elapsed >= 0.3, f"closed after {elapsed:.2f}s, before the heart-beat interval passed"
    [redelivered] = other.listener.wait_for(1)
    assert redelivered.body == "precious"
    assert redelivered.headers.get("redelivered") == "true", redelivered.headers


@pytest.mark.parametrize("traffic", ["lf", "crlf", "frames"])
def test_client_that_sends_heartbeats_stays_connected(broker_factory, raw, traffic):
    broker = broker_factory(sets=["stomp.heartbeat_receive_ms=300"])
    client = raw(broker)
    client.connect("1.2", {"heart-beat": "300,0"})
    stop = threading.Event()

    def beat() -> None:
        n = 0
        while not stop.wait(0.1):
            n += 1
            if traffic == "frames":  # any traffic counts, not only EOLs
                data = encode("BEGIN", {"transaction": f"t{n}"}) + encode("ABORT", {"transaction": f"t{n}"})
            else:
                data = b"\n" if traffic == "lf" else b"\r\n"
            try:
                client.sendall(data)
            except OSError:
                return

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        frames = client.poll(1.5)  # five times the negotiated interval
        assert frames == [] and not client.closed
    finally:
        stop.set()
        thread.join()
    client.send_frame("SUBSCRIBE", {"destination": "/queue/alive", "id": "1", "receipt": "still-here"})
    assert client.expect("RECEIPT").headers["receipt-id"] == "still-here"


def test_stomp_py_heartbeats_keep_connection_open(broker_factory, connect):
    broker = broker_factory(sets=["stomp.heartbeat_receive_ms=200", "stomp.heartbeat_send_ms=200"])
    client = connect(broker, "1.2", heartbeats=(200, 200))
    client.listener.wait_until(lambda: client.listener.heartbeats >= 3, "3 heart-beats from the broker")
    destination = "/queue/" + unique("hb")
    client.subscribe(destination)
    client.send(destination, "ping", receipt=True)
    assert client.listener.wait_for(1)[0].body == "ping"
    assert not client.listener.disconnected


def test_heartbeat_header_ignored_for_stomp_10(broker_factory, raw):
    broker = broker_factory(sets=["stomp.heartbeat_send_ms=100", "stomp.heartbeat_receive_ms=100"])
    client = raw(broker)
    client.connect(None, {"heart-beat": "100,100"})
    # A 1.0 session negotiates no heart-beats: no beats, and silence is not fatal.
    assert client.poll(0.6) == []
    assert client.heartbeat_times == [] and not client.closed


def test_malformed_heartbeat_header_is_an_error(broker, raw):
    client = raw(broker)
    frames = client.closed_after("CONNECT", {"accept-version": "1.2", "host": "x", "heart-beat": "soon"})
    assert [f.command for f in frames] == ["ERROR"], frames


def test_stomp_py_client_with_receive_heartbeats_is_not_timed_out(broker_factory, connect):
    """stomp.py declares the broker dead after 1.5 x the negotiated interval without
    data; the broker must send something within every interval, also right after it
    sent a frame (a RECEIPT here) in the middle of an interval."""
    broker = broker_factory(sets=["stomp.heartbeat_send_ms=300"])
    client = connect(broker, "1.2", heartbeats=(0, 300))
    for _ in range(5):
        if client.listener.heartbeat_timeouts:
            break
        client.sync()  # a RECEIPT at a random phase of the broker's beat timer...
        time.sleep(0.8)  # ...then idle: only heart-beats keep stomp.py happy now
    assert client.listener.heartbeat_timeouts == 0, "stomp.py timed out waiting for the broker's heart-beats"
    assert client.conn.is_connected()


def test_silent_client_declared_dead_after_interval_times_grace(broker_factory, raw):
    """docs/configuration.md: "A connection is declared dead after negotiated interval x
    heartbeat_grace without traffic" -- here 400 ms x 1.5 = 0.6 s, not twice that."""
    broker = broker_factory(sets=["stomp.heartbeat_receive_ms=400", "stomp.heartbeat_grace=1.5"])
    client = raw(broker)
    client.send_frame("CONNECT", {"accept-version": "1.2", "host": "h", "heart-beat": "400,0"})
    last_traffic = time.monotonic()  # the CONNECT frame is the last thing the client sends
    assert client.expect("CONNECTED")
    client.wait_closed(timeout=5)
    silence = time.monotonic() - last_traffic
    assert silence >= 0.55, f"declared dead after only {silence:.2f}s"
    assert silence <= 0.6 + 0.25, f"declared dead only after {silence:.2f}s of silence (limit 0.6 s)"
