"""A hand-driven peer on one mesh link: what a node's LinkProtocol writes is read back
as (frame type, body) pairs, and the test writes whatever bytes it likes, so a
handshake can be played right, wrong, or as an attacker would."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

from twisted.test import iosim

from gateway.broker.message import QUEUE, Message
from mesh.codec import LinkParser, encode_control, encode_frame, encode_message
from mesh.identity import OLDEST_PROTOCOL
from mesh.large import _LAST, _MORE
from mesh.link import PROTOCOL_VERSION, LinkProtocol, LinkState
from mesh.wire import FrameType, decode_control
from tests.protocol.mesh_harness import SimNode


def proof(password: str, nonce: str, node_id: str) -> str:
    """The AUTH proof of the cluster password, as a node makes it."""
    return hmac.new(password.encode(), (nonce + node_id).encode(), hashlib.sha256).hexdigest()


ABSENT = object()  # a HELLO field's value that leaves the field out (a node of an older release)


def hello(node_id: str, nonce: str, **more) -> dict:
    """A HELLO as a node of this release makes it (``more`` overrides its fields, ABSENT drops one)."""
    body = {"version": OLDEST_PROTOCOL, "speaks": PROTOCOL_VERSION, "node_id": node_id, "name": "peer",
            "user": "meshgate", "nonce": nonce, "started": 1.0, "link": ["127.0.0.1", 1], "stomp": ["127.0.0.1", 2],
            "group": "", "chunks": True, "busy": True, "epoch": 0, **more}
    return {key: value for key, value in body.items() if value is not ABSENT}


def demand(**fields) -> list[dict]:
    """One demand record as the peer's own consumers make it (``fields`` override its fields)."""
    return [{"kind": "queue", "address": "q", "consumers": 1, "path": ["peer-node"], **fields}]


def route(count: int) -> list[str]:
    """``count`` node ids, ending with the peer's: a demand path or a request route that long."""
    return [f"node-{i}" for i in range(count - 1)] + ["peer-node"]


def up_to(limit: int, body: Callable[[int], object]) -> tuple[object, object]:
    """``body(limit)``, a field as long as a node may send it, and ``body(limit + 1)``."""
    return body(limit), body(limit + 1)


def message(address: str = "q", message_id: str = "peer-1-1", origin: str = "peer-node",
            path: tuple[str, ...] = ("peer-node",), target: str = "", vhost: str = "") -> bytes:
    """A MESSAGE frame as the peer forwards one of its messages (a queue's, of "/" unless ``vhost``)."""
    return encode_message(Message(message_id, QUEUE, address, {"content-type": "text/plain"}, b"body"), origin,
                          path, target, vhost=vhost)


def chunked(frame: bytes) -> bytes:
    """A MESSAGE frame as a peer sends a large one (mesh.large): its payload in two CHUNK frames."""
    payload = frame[len(encode_frame(0, b"")):]
    half = len(payload) // 2
    return encode_frame(FrameType.CHUNK, _MORE + payload[:half]) + encode_frame(FrameType.CHUNK,
                                                                               _LAST + payload[half:])


class RawPeer:
    """The far end of a link to ``node`` (the node listens unless ``node_dials``)."""

    def __init__(self, node: SimNode, node_dials: bool = False) -> None:
        self.node = node
        self.link = LinkProtocol(node.mesh.links, dialled=node_dials)
        self.transport = iosim.FakeTransport(self.link, isServer=not node_dials)
        self.link.makeConnection(self.transport)
        self._parser = LinkParser()
        self.received: list[tuple[int, object]] = []

    def send(self, kind: int, body: object = None) -> None:
        self.link.dataReceived(encode_control(kind, body))

    def raw(self, data: bytes) -> None:
        self.link.dataReceived(data)

    def frames(self) -> list[tuple[int, object]]:
        """Every frame the node wrote so far, decoded (MESSAGE payloads stay bytes)."""
        data = b"".join(self.transport.stream)
        self.transport.stream.clear()
        for kind, payload in self._parser.feed(data):
            self.received.append((kind, payload if kind == FrameType.MESSAGE else decode_control(payload)))
        return self.received

    def of(self, kind: int) -> list[object]:
        return [body for k, body in self.frames() if k == kind]

    @property
    def node_hello(self) -> dict:
        return self.of(FrameType.HELLO)[0]

    @property
    def closed(self) -> bool:
        return self.transport.disconnecting

    def refusal(self) -> str:
        refusals = self.of(FrameType.REFUSE)
        assert refusals, f"no REFUSE; the node wrote {self.received}"
        return refusals[0]["reason"]

    def establish(self, password: str, node_id: str = "peer-node", **more) -> None:
        """The whole handshake, right, as a node that dials would make it (``more``: HELLO fields)."""
        self.send(FrameType.HELLO, hello(node_id, "peer-nonce", **more))
        self.send(FrameType.AUTH, {"proof": proof(password, self.node_hello["nonce"], node_id)})
        assert self.link.state is LinkState.ESTABLISHED, f"the link did not come up: {self.frames()}"
