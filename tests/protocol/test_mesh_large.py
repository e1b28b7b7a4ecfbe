"""Large messages over a link (mesh/large.py): pieces on the wire, the whole
message out at the other end, smaller messages for other addresses going between
the pieces, the order kept for one address, and whole frames for older peers."""

from __future__ import annotations

import msgspec

from gateway.broker.queue import Subscription
from mesh.large import CHUNK
from mesh.wire import FrameType
from tests.protocol.mesh_harness import MeshHarness

BIG = bytes(range(256)) * (3 * CHUNK // 256 + 100)  # a little over 3 chunks


class Arrivals:
    """One sink for several consumers: what arrived, in order, as (address, size)."""

    def __init__(self) -> None:
        self.order: list[tuple[str, int]] = []
        self.bodies: dict[str, list[bytes]] = {}

    def deliver(self, sub: Subscription, message) -> None:
        self.order.append((message.address, len(message.body)))
        self.bodies.setdefault(message.address, []).append(message.body)


def consume(node, arrivals: Arrivals, *addresses: str) -> None:
    session = node.broker.open_session(arrivals, f"{node.name}-arrivals")
    for address in addresses:
        session.subscribe(address, "queue", address, "auto", None, None)


def frame_kinds(pump) -> list[int]:
    """The types of the frames the acceptor's end handles from now on, in order."""
    kinds: list[int] = []
    handle = pump.server._handle
    pump.server._handle = lambda kind, payload: (kinds.append(kind), handle(kind, payload))
    return kinds


def test_a_large_message_crosses_in_pieces_and_arrives_whole_and_stored():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    kinds = frame_kinds(mesh.link(a, b))
    arrivals = Arrivals()
    consume(b, arrivals, "big")
    mesh.settle()
    a.send("big", BIG)
    mesh.settle(rounds=200)
    assert arrivals.bodies["big"] == [BIG]
    assert kinds.count(FrameType.CHUNK) == 4  # the 4th piece handed on as the whole MESSAGE
    assert a.stored == []  # b said STORED: a let go of it


def test_smaller_messages_for_other_addresses_go_between_the_pieces_and_one_address_keeps_its_order():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    mesh.link(a, b)
    arrivals = Arrivals()
    consume(b, arrivals, "big", "other")
    mesh.settle()
    a.send("big", BIG)
    a.send("big", b"after the big one")  # same address: waits behind it
    a.send("other", b"small")  # another address: overtakes
    mesh.settle(rounds=200)
    assert arrivals.order.index(("other", 5)) < arrivals.order.index(("big", len(BIG)))
    assert arrivals.bodies["big"] == [BIG, b"after the big one"]


def test_a_peer_that_does_not_say_chunks_gets_the_whole_frame():
    mesh = MeshHarness()
    a, b = mesh.node("a"), mesh.node("b")
    hello = b.mesh.identity.hello
    b.mesh.identity.hello = lambda nonce: {key: value for key, value in msgspec.to_builtins(hello(nonce)).items()
                                           if key != "chunks"}
    received = frame_kinds(mesh.link(a, b))
    arrivals = Arrivals()
    consume(b, arrivals, "big")
    mesh.settle()
    a.send("big", BIG)
    mesh.settle(rounds=200)
    assert arrivals.bodies["big"] == [BIG]
    assert FrameType.MESSAGE in received and FrameType.CHUNK not in received
