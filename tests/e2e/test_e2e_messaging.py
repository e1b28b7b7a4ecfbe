"""SEND/SUBSCRIBE/UNSUBSCRIBE, ack modes, NACK, transactions, receipts, MESSAGE headers
and header escaping, with stomp.py clients (and a raw socket where bytes matter)."""

from __future__ import annotations

import pytest
from e2e_support import queue, topic, unique
from raw_stomp import RawClient, RawFrame, encode
from stomp_client import Client

pytestmark = pytest.mark.shared_broker


def _subscribed(connect, broker, version: str = "1.2", ack: str = "auto") -> tuple[str, Client]:
    """A new queue, and a new client of ``version`` subscribed to it with ``ack``."""
    destination = queue()
    consumer = connect(broker, version)
    consumer.subscribe(destination, ack=ack)
    return destination, consumer


def _left_on(connect, broker, version: str, destination: str, ack: str = "auto") -> list:
    """What a new client of ``version`` gets from ``destination``: what was left there, then a fence."""
    return connect(broker, version).fenced(destination, ack=ack)


def _raw_pair(raw, broker, destination: str) -> tuple[RawClient, RawClient]:
    """Two raw STOMP 1.2 clients: one subscribed to ``destination`` (id "s", its receipt awaited),
    one to send with."""
    consumer = raw(broker)
    consumer.connect("1.2")
    consumer.send_frame("SUBSCRIBE", {"destination": destination, "id": "s", "receipt": "r"})
    consumer.expect("RECEIPT")
    producer = raw(broker)
    producer.connect("1.2")
    return consumer, producer


def _raw_delivery(raw, connect, broker, version: str, sub_id: str, ack: str, body: str) -> tuple[RawClient, RawFrame]:
    """A raw client of ``version`` subscribed to a new queue (with ``sub_id`` and ``ack``), and the
    MESSAGE it got of ``body``, sent there by another client."""
    destination = queue()
    client = raw(broker)
    client.connect(version)
    client.send_frame("SUBSCRIBE", {"destination": destination, "id": sub_id, "ack": ack})
    connect(broker).send(destination, body, receipt=True)
    return client, client.expect("MESSAGE")


# -- SEND / SUBSCRIBE / MESSAGE -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["queue", "topic"])
def test_message_carries_required_and_user_headers(broker, connect, version, kind):
    destination = f"/{kind}/" + unique(kind)
    consumer = connect(broker, version)
    producer = connect(broker, version)
    sub_id = consumer.subscribe(destination, id="sub-1")
    producer.send(destination, "hello world", receipt=True,
                  headers={"content-type": "text/plain;charset=utf-8", "x-custom": "value 1", "order": "42"})
    [message] = consumer.listener.wait_for(1)
    h = message.headers
    assert message.body == "hello world"
    assert h["destination"] == destination
    assert h.get("message-id")
    assert h.get("subscription") == sub_id
    assert h.get("content-type") == "text/plain;charset=utf-8"
    assert h.get("x-custom") == "value 1"
    assert h.get("order") == "42"
    assert int(h["content-length"]) == len("hello world")
    assert "redelivered" not in h


@pytest.mark.parametrize("producer_version, consumer_version", [("1.0", "1.2"), ("1.2", "1.0"), ("1.1", "1.2"),
                                                                ("1.2", "1.1")])
def test_versions_interoperate(broker, connect, producer_version, consumer_version):
    destination = queue()
    consumer = connect(broker, consumer_version)
    producer = connect(broker, producer_version)
    consumer.subscribe(destination, id="s")
    producer.send(destination, "across versions", receipt=True, headers={"k": "v"})
    [message] = consumer.listener.wait_for(1)
    assert message.body == "across versions"
    assert message.headers["k"] == "v"
    assert message.headers["destination"] == destination


def test_message_ids_are_unique(broker, connect):
    destination, consumer = _subscribed(connect, broker)
    for i in range(20):
        consumer.send(destination, f"m{i}")
    messages = consumer.listener.wait_for(20)
    assert len({m.headers["message-id"] for m in messages}) == 20
    assert [m.body for m in messages] == [f"m{i}" for i in range(20)]


@pytest.mark.parametrize("ack", ["client", "client-individual"])
def test_stomp12_message_has_ack_header_in_client_modes(broker, connect, ack):
    destination, consumer = _subscribed(connect, broker, "1.2", ack=ack)
    consumer.send(destination, "x")
    [message] = consumer.listener.wait_for(1)
    assert message.headers.get("ack"), message.headers


def test_unsubscribe_from_queue_stops_delivery(broker, connect, version):
    destination = queue()
    consumer = connect(broker, version)
    sub_id = consumer.subscribe(destination)
    consumer.unsubscribe(sub_id, destination)
    consumer.send(destination, "after unsubscribe", receipt=True)
    other = connect(broker, version)
    other.subscribe(destination)
    assert other.listener.wait_for(1)[0].body == "after unsubscribe"
    assert consumer.listener.messages == []


def test_unsubscribe_from_topic_stops_delivery(broker, connect, version):
    gone, fence = topic(), topic()
    consumer = connect(broker, version)
    sub_id = consumer.subscribe(gone, id="gone")
    consumer.subscribe(fence, id="fence")
    consumer.unsubscribe(sub_id, gone)
    producer = connect(broker)
    producer.send(gone, "lost")
    producer.send(fence, "fence")
    bodies = [m.body for m in consumer.listener.wait_for_body("fence")]
    assert bodies == ["fence"]


@pytest.mark.parametrize("version, command, headers, body", [
    pytest.param("1.2", "UNSUBSCRIBE", {"id": "never-subscribed", "receipt": "u"}, "", id="unsubscribe-an-unknown-id"),
    pytest.param(None, "NACK", {"message-id": "whatever", "receipt": "n"}, "", id="nack-in-stomp-1.0"),
    pytest.param("1.2", "SEND", {"destination": queue(), "transaction": "nope", "receipt": "s"}, "x",
                 id="send-in-an-unknown-transaction"),
    pytest.param("1.2", "SUBSCRIBE", {"destination": queue(), "id": "s", "ack": "sometimes", "receipt": "1"}, "",
                 id="subscribe-with-an-unknown-ack-mode"),
])
def test_a_refused_frame_is_an_error_that_closes_the_connection(broker, raw, version, command, headers, body):
    client = raw(broker)
    client.connect(version)
    frames = client.closed_after(command, headers, body)
    assert [f.command for f in frames] == ["ERROR"], frames


def test_send_without_destination_is_an_error(broker, raw, version):
    client = raw(broker)
    client.connect(version)
    frames = client.closed_after("SEND", {"receipt": "r-no-dest"}, "x")
    assert [f.command for f in frames] == ["ERROR"], frames
    assert frames[0].headers.get("receipt-id") == "r-no-dest"


# -- acknowledgement ----------------------------------------------------------------------


def test_auto_ack_messages_are_not_redelivered(broker, connect, version):
    destination, consumer = _subscribed(connect, broker, version, ack="auto")
    for i in range(3):
        consumer.send(destination, f"m{i}")
    consumer.listener.wait_for(3)
    consumer.disconnect()
    assert [m.body for m in _left_on(connect, broker, version, destination)] == ["fence"]


@pytest.mark.parametrize("leave", ["disconnect", "drop"])
def test_client_ack_is_cumulative(broker, connect, version, leave):
    destination, consumer = _subscribed(connect, broker, version, ack="client")
    for i in range(1, 6):
        consumer.send(destination, f"m{i}")
    messages = consumer.listener.wait_for(5)
    assert [m.body for m in messages] == ["m1", "m2", "m3", "m4", "m5"]
    consumer.ack(messages[2], receipt=True)  # the 3rd: acknowledges m1..m3
    getattr(consumer, leave)()
    received = _left_on(connect, broker, version, destination, ack="client")
    assert [m.body for m in received] == ["m4", "m5", "fence"]
    assert [m.headers.get("redelivered") for m in received[:2]] == ["true", "true"]


def test_client_individual_ack_acknowledges_one(broker, connect, version11):
    destination, consumer = _subscribed(connect, broker, version11, ack="client-individual")
    for i in range(1, 4):
        consumer.send(destination, f"m{i}")
    messages = consumer.listener.wait_for(3)
    consumer.ack(messages[1], receipt=True)  # m2 only
    consumer.disconnect()
    received = _left_on(connect, broker, version11, destination)
    assert [m.body for m in received] == ["m1", "m3", "fence"]
    assert all(m.headers.get("redelivered") == "true" for m in received[:2])


def test_acked_message_is_gone_and_unacked_comes_back(broker, connect, version):
    destination, consumer = _subscribed(connect, broker, version, ack="client")
    consumer.send(destination, "one")
    [message] = consumer.listener.wait_for(1)
    consumer.ack(message, receipt=True)
    consumer.send(destination, "two")
    consumer.listener.wait_for(2)
    consumer.drop()
    assert [m.body for m in _left_on(connect, broker, version, destination)] == ["two", "fence"]


@pytest.mark.parametrize("ack", ["client", "client-individual"])
def test_nack_redelivers_marked_redelivered(broker, connect, version11, ack):
    destination, consumer = _subscribed(connect, broker, version11, ack=ack)
    consumer.send(destination, "refused")
    [first] = consumer.listener.wait_for(1)
    assert "redelivered" not in first.headers
    consumer.nack(first, receipt=True)
    second = consumer.listener.wait_for(2)[1]
    assert second.body == "refused"
    assert second.headers.get("redelivered") == "true", second.headers
    assert second.headers["message-id"] == first.headers["message-id"]
    consumer.ack(second, receipt=True)
    consumer.disconnect()
    assert [m.body for m in _left_on(connect, broker, version11, destination)] == ["fence"]


def test_stomp12_ack_uses_id_from_ack_header(broker, raw, connect):
    client, message = _raw_delivery(raw, connect, broker, "1.2", "s", "client-individual", "ack me")
    ack_id = message.headers["ack"]
    client.send_frame("ACK", {"id": ack_id, "receipt": "acked"})
    assert client.expect("RECEIPT").headers["receipt-id"] == "acked"
    # Acknowledging a delivery that does not exist is a client error.
    client.send_frame("ACK", {"id": ack_id + "-nonexistent", "receipt": "bad"})
    assert client.expect("ERROR")


def test_stomp11_ack_needs_message_id_and_subscription(broker, raw, connect):
    client, message = _raw_delivery(raw, connect, broker, "1.1", "s11", "client", "ack me")
    assert message.headers["subscription"] == "s11"
    client.send_frame("ACK", {"message-id": message.headers["message-id"], "subscription": "s11", "receipt": "a"})
    assert client.expect("RECEIPT").headers["receipt-id"] == "a"
    client.send_frame("ACK", {"message-id": message.headers["message-id"], "receipt": "b"})
    assert client.expect("ERROR")


# -- transactions -------------------------------------------------------------------------


def test_transaction_sends_delivered_only_on_commit(broker, connect, version):
    destination, consumer = _subscribed(connect, broker, version)
    producer = connect(broker, version)
    producer.begin("tx1")
    producer.send(destination, "t1", transaction="tx1")
    producer.send(destination, "t2", transaction="tx1", receipt=True)
    producer.send(destination, "fence-1")
    assert [m.body for m in consumer.listener.wait_for_body("fence-1")] == ["fence-1"]
    producer.commit("tx1")
    assert [m.body for m in consumer.listener.wait_for(3)] == ["fence-1", "t1", "t2"]


def test_transaction_sends_discarded_on_abort(broker, connect, version):
    destination, consumer = _subscribed(connect, broker, version)
    producer = connect(broker, version)
    producer.begin("tx1")
    producer.send(destination, "t1", transaction="tx1")
    producer.abort("tx1")
    producer.send(destination, "fence")
    assert [m.body for m in consumer.listener.wait_for_body("fence")] == ["fence"]


def test_transaction_on_topic(broker, connect):
    destination = topic()
    consumer = connect(broker)
    consumer.subscribe(destination)
    producer = connect(broker)
    producer.begin("tx")
    producer.send(destination, "in tx", transaction="tx")
    producer.send(destination, "fence")
    assert [m.body for m in consumer.listener.wait_for_body("fence")] == ["fence"]
    producer.commit("tx")
    assert [m.body for m in consumer.listener.wait_for(2)] == ["fence", "in tx"]


def test_open_transaction_is_aborted_on_disconnect(broker, connect, version):
    destination = queue()
    producer = connect(broker, version)
    producer.begin("tx-open")
    producer.send(destination, "never", transaction="tx-open", receipt=True)
    producer.disconnect()
    assert [m.body for m in _left_on(connect, broker, version, destination)] == ["fence"]


def test_transactional_ack_takes_effect_on_commit(broker, connect, version):
    destination, consumer = _subscribed(connect, broker, version, ack="client")
    consumer.send(destination, "m")
    [message] = consumer.listener.wait_for(1)
    consumer.begin("tx-ack")
    consumer.ack(message, transaction="tx-ack", receipt=True)
    consumer.commit("tx-ack")
    consumer.disconnect()
    assert [m.body for m in _left_on(connect, broker, version, destination)] == ["fence"]


@pytest.mark.parametrize("end", ["abort", "disconnect"])
def test_transactional_ack_undone_by_abort_or_disconnect(broker, connect, version, end):
    destination, consumer = _subscribed(connect, broker, version, ack="client")
    consumer.send(destination, "m")
    [message] = consumer.listener.wait_for(1)
    consumer.begin("tx-ack")
    consumer.ack(message, transaction="tx-ack", receipt=True)
    if end == "abort":
        consumer.abort("tx-ack")
    consumer.disconnect()
    received = _left_on(connect, broker, version, destination)
    assert [m.body for m in received] == ["m", "fence"]
    assert received[0].headers.get("redelivered") == "true"


def test_unknown_transaction_is_an_error(broker, raw, version):
    client = raw(broker)
    client.connect(version)
    frames = client.closed_after("COMMIT", {"transaction": "no-such-tx", "receipt": "c"})
    assert [f.command for f in frames] == ["ERROR"], frames


# -- receipts -----------------------------------------------------------------------------


def test_every_frame_asking_gets_a_receipt_in_order(broker, raw, connect, version):
    destination = queue()
    client = raw(broker)
    client.connect(version)
    client.sendall(
        encode("SUBSCRIBE", {"destination": destination, "id": "s", "ack": "client", "receipt": "r-sub"})
        + encode("SEND", {"destination": destination, "receipt": "r-send"}, "1")
        + encode("BEGIN", {"transaction": "t", "receipt": "r-begin"})
        + encode("SEND", {"destination": destination, "transaction": "t", "receipt": "r-send-tx"}, "2")
        + encode("COMMIT", {"transaction": "t", "receipt": "r-commit"})
        + encode("BEGIN", {"transaction": "u", "receipt": "r-begin-2"})
        + encode("ABORT", {"transaction": "u", "receipt": "r-abort"})
    )
    frames = client.read_frames(9)
    receipts = [f.headers["receipt-id"] for f in frames if f.command == "RECEIPT"]
    assert receipts == ["r-sub", "r-send", "r-begin", "r-send-tx", "r-commit", "r-begin-2", "r-abort"]
    messages = [f for f in frames if f.command == "MESSAGE"]
    assert [m.body for m in messages] == [b"1", b"2"]
    ack = {"1.2": {"id": messages[1].headers.get("ack", "")},
           "1.1": {"message-id": messages[1].headers["message-id"], "subscription": "s"},
           "1.0": {"message-id": messages[1].headers["message-id"]}}[version]
    client.send_frame("ACK", {**ack, "receipt": "r-ack"})
    assert client.expect("RECEIPT").headers["receipt-id"] == "r-ack"
    unsubscribe = {"id": "s"} if version != "1.0" else {"destination": destination, "id": "s"}
    client.send_frame("UNSUBSCRIBE", {**unsubscribe, "receipt": "r-unsub"})
    assert client.expect("RECEIPT").headers["receipt-id"] == "r-unsub"
    client.send_frame("DISCONNECT", {"receipt": "r-disc"})
    assert [f.headers.get("receipt-id") for f in client.wait_closed()] == ["r-disc"]


def test_nack_with_receipt(broker, raw, connect, version11):
    client, message = _raw_delivery(raw, connect, broker, version11, "s", "client-individual", "n")
    nack = {"id": message.headers.get("ack", "")} if version11 == "1.2" else {
        "message-id": message.headers["message-id"], "subscription": "s"}
    client.send_frame("NACK", {**nack, "receipt": "r-nack"})
    frames = {f.command: f for f in client.read_frames(2)}
    assert frames["RECEIPT"].headers["receipt-id"] == "r-nack", frames
    assert frames["MESSAGE"].headers.get("redelivered") == "true", frames


# -- header escaping ----------------------------------------------------------------------


def test_header_values_with_colon_and_newline_round_trip(broker, connect, version11):
    destination = queue()
    consumer = connect(broker, version11)
    producer = connect(broker, version11)
    consumer.subscribe(destination)
    tricky = {"x-colon": "a:b:c", "x-newline": "line1\nline2", "x-backslash": "C:\\path\\n", "x-all": "k:v\n\\"}
    producer.send(destination, "escaped", receipt=True, headers=dict(tricky))
    [message] = consumer.listener.wait_for(1)
    for name, value in tricky.items():
        assert message.headers.get(name) == value, (name, message.headers)


def test_escaped_headers_on_the_wire_stomp12(broker, raw):
    destination = queue()
    consumer, producer = _raw_pair(raw, broker, destination)
    producer.send_frame("SEND", [("destination", destination), ("x\\cname", "a\\cb\\nc\\rd\\\\e")], "body")
    message = consumer.expect("MESSAGE")
    assert message.headers.get("x:name") == "a:b\nc\rd\\e", message.header_lines
    # On the wire the value is escaped again: no raw CR/LF or extra colon sneaks in.
    assert "x\\cname:a\\cb\\nc\\rd\\\\e" in message.header_lines, message.header_lines


def test_stomp10_header_value_with_colon_and_backslash_is_literal(broker, raw):
    destination = queue()
    consumer = raw(broker)
    consumer.connect(None)
    consumer.send_frame("SUBSCRIBE", {"destination": destination, "receipt": "r"})
    consumer.expect("RECEIPT")
    producer = raw(broker)
    producer.connect(None)
    producer.send_frame("SEND", {"destination": destination, "x-path": "C:\\temp\\new", "x-url": "http://h:1/"}, "b")
    message = consumer.expect("MESSAGE")
    assert message.headers.get("x-path") == "C:\\temp\\new", message.header_lines
    assert message.headers.get("x-url") == "http://h:1/", message.header_lines


def test_stomp10_backslash_reaches_stomp12_consumer_unchanged(broker, raw, connect):
    destination, consumer = _subscribed(connect, broker, "1.2")
    producer = raw(broker)
    producer.connect(None)
    producer.send_frame("SEND", {"destination": destination, "x-path": "C:\\temp\\new", "receipt": "r"}, "b")
    producer.expect("RECEIPT")
    [message] = consumer.listener.wait_for(1)
    assert message.headers.get("x-path") == "C:\\temp\\new", message.headers


def test_escapes_in_frames_pipelined_with_connect(broker, raw, connect):
    """A SEND in the same TCP write as CONNECT must be read with the negotiated version's
    escaping (1.2 here), not 1.0's."""
    destination, consumer = _subscribed(connect, broker, "1.2")
    client = raw(broker)
    client.sendall(
        encode("CONNECT", {"accept-version": "1.2", "host": "localhost"})
        + encode("SEND", {"destination": destination, "x-escaped": "a\\cb\\nc", "receipt": "r"}, "pipelined")
    )
    assert client.expect("CONNECTED")
    assert client.expect("RECEIPT")
    [message] = consumer.listener.wait_for(1)
    assert message.headers.get("x-escaped") == "a:b\nc", message.headers


def test_binary_body_with_content_type_passes_through(broker, raw):
    destination = queue()
    consumer, producer = _raw_pair(raw, broker, destination)
    body = bytes(range(256)) * 4
    producer.send_frame("SEND", {"destination": destination, "content-type": "application/octet-stream",
                                 "content-length": str(len(body))}, body)
    message = consumer.expect("MESSAGE")
    assert message.body == body
    assert message.headers["content-type"] == "application/octet-stream"
    assert message.headers["content-length"] == str(len(body))


def test_repeated_header_first_value_wins(broker, raw, connect):
    destination, consumer = _subscribed(connect, broker)
    producer = raw(broker)
    producer.connect("1.2")
    producer.send_frame("SEND", [("destination", destination), ("x-rep", "first"), ("x-rep", "second"),
                                 ("receipt", "r")], "b")
    producer.expect("RECEIPT")
    [message] = consumer.listener.wait_for(1)
    assert message.headers.get("x-rep") == "first"


def test_receipts_stay_in_order_across_persistent_and_transient_frames(broker, raw):
    destination = queue()
    client = raw(broker)
    client.connect("1.2")
    frames = []
    order = []
    for i in range(30):
        receipt = f"r{i:02d}"
        order.append(receipt)
        if i % 3 == 0:
            frames.append(encode("SEND", {"destination": destination, "persistent": "true", "receipt": receipt}, "p"))
        elif i % 3 == 1:
            frames.append(encode("SEND", {"destination": destination, "receipt": receipt}, "t"))
        else:
            frames.append(encode("BEGIN", {"transaction": f"t{i}", "receipt": receipt}))
    client.sendall(b"".join(frames))
    assert [f.headers["receipt-id"] for f in client.read_frames(30)] == order


def test_pending_receipt_is_sent_before_a_later_error(broker, raw):
    """Frames are handled in order: the RECEIPT of a persistent SEND that was accepted
    must not be overtaken (or swallowed) by the ERROR of a later frame."""
    destination = queue()
    client = raw(broker)
    client.connect("1.2")
    client.sendall(
        encode("SEND", {"destination": destination, "persistent": "true", "receipt": "stored"}, "p")
        + encode("COMMIT", {"transaction": "no-such-transaction", "receipt": "bad"})
    )
    frames = client.wait_closed()
    assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [("RECEIPT", "stored"), ("ERROR", "bad")]


def test_disconnect_receipt_comes_after_pending_persistent_receipts(broker, raw, connect):
    destination = queue()
    client = raw(broker)
    client.connect("1.2")
    client.sendall(
        b"".join(encode("SEND", {"destination": destination, "persistent": "true", "receipt": f"p{i}"}, f"m{i}")
                 for i in range(5))
        + encode("DISCONNECT", {"receipt": "bye"})
    )
    frames = client.wait_closed()
    assert [f.headers.get("receipt-id") for f in frames] == ["p0", "p1", "p2", "p3", "p4", "bye"]
    consumer = connect(broker)
    consumer.subscribe(destination)
    assert [m.body for m in consumer.listener.wait_for(5)] == [f"m{i}" for i in range(5)]


def test_client_ack_is_cumulative_per_subscription_only(broker, connect, version11):
    qa, qb = queue(), queue()
    consumer = connect(broker, version11)
    consumer.subscribe(qa, id="a", ack="client")
    consumer.subscribe(qb, id="b", ack="client")
    consumer.send(qa, "a1")
    consumer.listener.wait_for(1)
    consumer.send(qb, "b1")
    consumer.listener.wait_for(2)
    consumer.send(qa, "a2")
    messages = consumer.listener.wait_for(3)
    assert [m.body for m in messages] == ["a1", "b1", "a2"]
    consumer.ack(messages[2], receipt=True)  # acknowledges a1 and a2, not b1
    consumer.drop()
    other = connect(broker, version11)
    other.subscribe(qb)
    bodies = [m.body for m in other.fenced(qa)]
    assert sorted(bodies) == ["b1", "fence"], bodies


def test_duplicate_subscription_id_is_an_error(broker, raw):
    client = raw(broker)
    client.connect("1.2")
    client.send_frame("SUBSCRIBE", {"destination": queue(), "id": "same", "receipt": "1"})
    assert client.expect("RECEIPT").headers["receipt-id"] == "1"
    frames = client.closed_after("SUBSCRIBE", {"destination": queue(), "id": "same", "receipt": "2"})
    assert [f.command for f in frames] == ["ERROR"], frames


def test_stomp10_subscribe_and_unsubscribe_by_destination(broker, raw, connect):
    destination = queue()
    client = raw(broker)
    client.connect(None)
    client.send_frame("SUBSCRIBE", {"destination": destination, "receipt": "s"})
    assert client.expect("RECEIPT").headers["receipt-id"] == "s"
    producer = connect(broker)
    producer.send(destination, "one", receipt=True)
    message = client.expect("MESSAGE")
    assert message.body == b"one" and message.headers["destination"] == destination
    client.send_frame("UNSUBSCRIBE", {"destination": destination, "receipt": "u"})
    assert client.expect("RECEIPT").headers["receipt-id"] == "u"
    producer.send(destination, "two", receipt=True)
    other = connect(broker)
    other.subscribe(destination)
    assert [m.body for m in other.listener.wait_for(1)] == ["two"]
    assert client.poll(0.2) == []


def test_large_message_round_trip(broker, raw):
    destination = queue()
    consumer, producer = _raw_pair(raw, broker, destination)
    body = bytes(range(256)) * (5 * 1024 * 4)  # 5 MiB, NULs included
    producer.send_frame("SEND", {"destination": destination, "content-length": str(len(body)), "receipt": "big"},
                        body)
    assert producer.expect("RECEIPT", timeout=30).headers["receipt-id"] == "big"
    message = consumer.expect("MESSAGE", timeout=30)
    assert len(message.body) == len(body) and message.body == body


def test_large_message_without_content_length(broker, raw):
    destination = queue()
    consumer, producer = _raw_pair(raw, broker, destination)
    body = b"0123456789abcdef" * (256 * 1024)  # 4 MiB text, arriving in many reads
    producer.send_frame("SEND", {"destination": destination, "receipt": "big"}, body)
    assert producer.expect("RECEIPT", timeout=30).headers["receipt-id"] == "big"
    assert consumer.expect("MESSAGE", timeout=30).body == body


def test_transaction_names_are_per_connection(broker, connect):
    destination, consumer = _subscribed(connect, broker)
    first, second = connect(broker), connect(broker)
    first.begin("tx")
    second.begin("tx")  # the same name on another connection is another transaction
    first.send(destination, "from first", transaction="tx")
    second.send(destination, "from second", transaction="tx")
    second.abort("tx")
    first.commit("tx")
    first.send(destination, "fence")
    assert [m.body for m in consumer.listener.wait_for_body("fence")] == ["from first", "fence"]


def test_plain_reply_to_passes_through_unchanged(broker, connect):
    destination, consumer = _subscribed(connect, broker)
    consumer.send(destination, "x", headers={"reply-to": "/queue/answers.here"})
    assert consumer.listener.wait_for(1)[0].headers.get("reply-to") == "/queue/answers.here"
