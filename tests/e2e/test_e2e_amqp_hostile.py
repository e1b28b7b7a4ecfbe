"""Hostile AMQP clients against a real node, before they log in (issue 22): each
malformed connection.start-ok gets a connection.close with the reply code the
specification gives it and a text for humans, then the node closes the socket; the
node goes on serving pika; its log holds no traceback, and stays small however many
bad connections one address makes."""

from __future__ import annotations

import re

import pika.spec
import pytest
from amqp_support import AMQP_ON, amqp_broker
from amqp_wire_support import RawAmqp
from e2e_support import manage_result, unique

from gateway.hostile_log import LINE_LIMIT, PER_MINUTE
from model.requests import CloseConnection, Connections
from tests.amqp_inputs import (
    TIMESTAMP_2_64,
    TRUNCATED_AMQPLAIN,
    frame,
    nested_table,
    start_ok,
    timestamp_in_client_properties,
)

PYTHON_WORDS = ("Error", "error(", "struct", "unpack", "Traceback", "buffer", "internal error")
REPRODUCERS = {
    "timestamp 2**64-1": (TIMESTAMP_2_64, 502, "past the year 9999"),
    "timestamp 2**63-1": (timestamp_in_client_properties(2 ** 63 - 1), 502, "past the year 9999"),
    "2,000 nested tables": (start_ok(nested_table(2000, "F")), 502, "nested more than 32 deep"),
    "2,000 nested arrays": (start_ok(nested_table(2000, "A")), 502, "nested more than 32 deep"),
    "truncated AMQPLAIN": (TRUNCATED_AMQPLAIN, 403, "a malformed AMQPLAIN response"),
    "a publish before connection.open": (frame(1, 1, b"\x00\x3c\x00\x28\x00\x00\x00\x00\x00"), 505,
                                         "before connection.open"),
}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with amqp_broker(tmp_path_factory, "hostile") as broker:
        yield broker


def still_serves(node, amqp) -> None:
    channel = amqp(node).channel()
    queue = unique("after")
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"still serving")
    assert channel.basic_get(queue, auto_ack=True)[2] == b"still serving"


def logged_so_far(node, amqp) -> str:
    """The node's log once every line written before this call is read: an
    administrator closes a connection, a line no peer's budget holds back, and it is
    awaited."""
    listed = {c.id for c in manage_result(node.port, Connections())}
    amqp(node)
    (row,) = [c for c in manage_result(node.port, Connections()) if c.protocol == "amqp" and c.id not in listed]
    reason = unique("log-mark")
    manage_result(node.port, CloseConnection(connection=row.id, reason=reason))
    assert node.output.wait_for(re.escape(reason), stream="stderr"), node.stderr()[-3000:]
    return node.stderr()


@pytest.mark.parametrize("name", REPRODUCERS)
def test_a_malformed_start_ok_gets_connection_close_with_its_code_then_the_socket_closes(node, amqp, name):
    data, code, words = REPRODUCERS[name]
    client = RawAmqp(node)
    client.sendall(data)
    close = client.expect_close()
    assert close.reply_code == code and words in close.reply_text, close
    assert not any(word in close.reply_text for word in PYTHON_WORDS), close.reply_text
    assert client.closed_by_node()
    client.close()
    still_serves(node, amqp)
    log = logged_so_far(node, amqp)
    assert "Traceback" not in log and "Unhandled Error" not in log, log[-3000:]


def test_two_hundred_bad_connections_from_one_address_leave_a_short_log(broker_factory, amqp):
    node = broker_factory(sets=[AMQP_ON])
    before = len(logged_so_far(node, amqp))
    inputs = [data for data, _, _ in REPRODUCERS.values()]
    for i in range(200):
        client = RawAmqp(node)
        client.sendall(inputs[i % len(inputs)])
        assert isinstance(client.expect_close(), pika.spec.Connection.Close)
        assert client.closed_by_node()
        client.close()
    still_serves(node, amqp)
    log = logged_so_far(node, amqp)[before:]
    assert "Traceback" not in log and "Unhandled Error" not in log, log[:3000]
    about_peers = [line for line in log.splitlines() if "127.0.0.1" in line and "administrator" not in line]
    assert len(about_peers) <= PER_MINUTE + 1, "\n".join(about_peers)  # + the held-back count, past a minute
    assert "(more about 127.0.0.1 held back for a minute)" in log
    assert all(len(line) < LINE_LIMIT + 200 for line in log.splitlines())
    assert len(log) < 8000, len(log)
