"""The mesh link port: the fuzzer plays a peer node that knows the cluster password.
It reads the node's HELLO, sends its own (sometimes broken: wrong types, the
node's own id, a VOTE instead), proves the password on the node's nonce (an AUTH
made when the case runs; sometimes a wrong or mangled proof), then sends an
established link's frames — messages, chunks, custody lists, demand, durable
subscriptions, forgets, management requests, pings — some of them mutated, as
bytes or as JSON of the wrong shape. The control check is a fresh handshake and
a PING answered by a PONG.

The fuzzer's peer ids are a fixed few, as a real peer's id would be, so the
node's per-peer records stay bounded."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import socket
import struct
import time
import uuid

from bench.fuzz.mutate import Mutator
from bench.fuzz.node import HOST
from bench.fuzz.runner import Case, CaseBuilder, ControlFailed, Live, Target

HELLO, AUTH, REFUSE, PING, PONG, DEMAND, TOPOLOGY, MESSAGE, STORED, RELEASED, MARKERS, DURABLE, ASK, HAVE, \
    LEAVING, FORGET, REQUEST, REPLY, CHUNK, BUSY, DEFINITIONS, VOTE = range(1, 23)
PROTOCOL_VERSION = 4
PEER_IDS = tuple(str(uuid.UUID(int=n)) for n in (0xF0221, 0xF0222, 0xF0223))
CONTROL_PEER_ID = str(uuid.UUID(int=0xC0221))  # the control's own: whatever the cases did to theirs
P_BROKEN_HANDSHAKE = 0.1
P_MUTATE = 0.2
# What a JSON value may be replaced with: every type, empty, huge, deep.
ODD_VALUES = (None, True, 0, -1, 2 ** 64, 1.5e308, "", "x" * 5000, [], {}, [1, [2]], {"a": {"b": None}}, "\u0000",
              [[[[[[[[[[[]]]]]]]]]]])


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">IB", len(payload), kind) + payload


def control(kind: int, body: object = None) -> bytes:
    return frame(kind, b"" if body is None else json.dumps(body, separators=(",", ":")).encode())


def proof(password: str, nonce: str, node_id: str) -> str:
    return hmac.new(password.encode(), (nonce + node_id).encode(), hashlib.sha256).hexdigest()


def hello(peer_id: str, nonce: str) -> dict:
    return {"version": PROTOCOL_VERSION, "node_id": peer_id, "name": "fuzz-peer", "user": "meshgate", "nonce": nonce,
            "started": 1.0, "link": [HOST, 1], "stomp": [HOST, 2], "group": "", "chunks": True, "busy": True,
            "epoch": 0, "votes": False}


def message(rng: random.Random, peer_id: str, address: str | None = None) -> bytes:
    """A MESSAGE frame as mesh.codec encodes it (written out here, not imported)."""
    kind = rng.randrange(2)
    address = address or (f"fuzz.{rng.randrange(4)}" if kind == 0 else f"fuzz.t.{rng.randrange(4)}")
    headers = rng.choice(({}, {"a": "b"}, {"content-length": "2", "x\nz": "y"}, {"priority": "9"}))
    mid = f"fuzz-{rng.randrange(2000)}"  # a bounded set: the node keeps a duplicate marker per persistent id
    fields = (mid, peer_id, address, peer_id, rng.choice(("", "", "fuzz-durable")))
    flags = rng.choice((0, 0, 1, 2, 8))
    if rng.random() < 0.2:
        text = json.dumps([*fields[:3], [peer_id], fields[4], headers])
        flags |= 4
    else:
        text = "\0".join((*fields, *(x for kv in headers.items() for x in kv)))
    block, body = text.encode(), rng.randbytes(rng.choice((0, 3, 200, 5000)))
    # Queue messages mostly expired on arrival (nobody consumes them); topic ones go nowhere unsubscribed.
    expires = rng.choice((0, 1, 2 ** 62)) if kind == 1 or rng.random() < 0.05 else 1
    head = struct.pack(">IIBBqBd", len(block), len(body), kind, rng.randrange(10), expires, flags, 1.7e9)
    return frame(MESSAGE, head + block + body)


def chunks(rng: random.Random, peer_id: str) -> list[bytes]:
    whole = message(rng, peer_id)[5:]
    cut = rng.randrange(1, len(whole))
    return [frame(CHUNK, b"\x00" + whole[:cut]), frame(CHUNK, b"\x01" + whole[cut:])]


class LinkFrames:
    """Valid frames of an established link."""

    def __init__(self, rng: random.Random, peer_id: str, node_id: str) -> None:
        self.rng = rng
        self.peer_id = peer_id
        self.node_id = node_id
        self.makers = [self.message, self.message, self.chunks, self.ids, self.demand, self.durable, self.forget,
                       self.request, self.ping, self.definitions]

    def next(self) -> list[bytes]:
        return self.rng.choice(self.makers)()

    def message(self) -> list[bytes]:
        return [message(self.rng, self.peer_id)]

    def chunks(self) -> list[bytes]:
        return chunks(self.rng, self.peer_id)

    def ids(self) -> list[bytes]:
        rng = self.rng
        entries = [f"{self.peer_id}/fuzz.{rng.randrange(4)}/fuzz-{rng.getrandbits(20):x}" for _ in range(3)]
        return [control(rng.choice((STORED, BUSY, RELEASED, MARKERS, ASK, HAVE)), entries[:rng.randrange(4)])]

    def demand(self) -> list[bytes]:
        rng = self.rng
        records = [{"kind": rng.choice(("queue", "topic")), "address": f"fuzz.{rng.randrange(4)}",
                    "selector": rng.choice((None, "priority > 3")), "consumers": rng.randrange(1, 4),
                    "path": [self.peer_id]} for _ in range(rng.randrange(3))]
        return [control(DEMAND, records)]

    def durable(self) -> list[bytes]:
        rng = self.rng
        body = rng.choice(({"link": self.peer_id, "patterns": ["fuzz.t.>"]},
                           {"name": f"fuzz-durable-{rng.randrange(2)}", "topic": "fuzz.t.1", "selector": None}))
        return [control(DURABLE, body)]

    def forget(self) -> list[bytes]:
        node = str(uuid.UUID(int=self.rng.getrandbits(128)))
        return [control(FORGET, {"node": node, "id": str(uuid.UUID(int=self.rng.getrandbits(128)))})]

    def request(self) -> list[bytes]:
        rng = self.rng
        route = [self.peer_id, self.node_id]
        if rng.random() < 0.5:  # read-only requests: a fuzzer must not scale the node down
            body = {"action": rng.choice(("nodes", "summary", "queues", "links"))}
            return [control(REQUEST, {"id": f"q-{rng.randrange(100)}", "route": route, "body": body})]
        return [control(REPLY, {"id": f"q-{rng.randrange(100)}", "route": route, "answer": {}})]

    def ping(self) -> list[bytes]:
        return [control(self.rng.choice((PING, PONG, LEAVING, 99)))]

    def definitions(self) -> list[bytes]:
        return [control(DEFINITIONS, [])]


def json_mutation(rng: random.Random, data: bytes) -> bytes | None:
    """A control frame whose JSON keeps its syntax but not its shape: one value
    replaced by one of another type, a key dropped, or the whole body swapped."""
    try:
        body = json.loads(data[5:]) if len(data) > 5 else None
    except ValueError:
        return None
    if isinstance(body, dict) and body:
        # A proven peer's epoch is believed (and kept): a huge one would fence the fuzzer's ids for good.
        key = rng.choice(sorted(set(body) - {"epoch"}) or sorted(body))
        if rng.random() < 0.2:
            del body[key]
        else:
            body[key] = rng.choice(ODD_VALUES)
    elif isinstance(body, list) and body:
        body[rng.randrange(len(body))] = rng.choice(ODD_VALUES)
    else:
        body = rng.choice(ODD_VALUES)
    return control(data[4], body)


class MeshTarget(Target):
    name = "mesh"
    scheme = "mesh"

    def __init__(self, node) -> None:
        super().__init__(node)
        rng = random.Random(0)
        frames = LinkFrames(rng, PEER_IDS[0], node.node_id or PEER_IDS[1])
        self.corpus = [control(HELLO, hello(PEER_IDS[0], "n" * 32))] + [f for _ in range(40) for f in frames.next()]

    def make_case(self, rng: random.Random, index: int) -> Case:
        mutator = Mutator(rng, lambda data: [(0, 4), (4, 1)])
        builder = CaseBuilder(rng, mutator, self.corpus, index)
        peer_id = rng.choice(PEER_IDS)
        own = hello(peer_id, uuid.UUID(int=rng.getrandbits(128)).hex)
        if rng.random() < P_BROKEN_HANDSHAKE / 4:
            own["node_id"] = self.node.node_id  # a peer claiming the node's own id
        if rng.random() < P_BROKEN_HANDSHAKE / 4:
            vote = {"op": rng.choice(("epoch", "takeover")), "node_id": peer_id, "epoch": 1, "after_ms": 10,
                    "nonce": "n", "user": "meshgate", "proof": "0" * 64}
            self._add(builder, control(VOTE, vote), P_BROKEN_HANDSHAKE)
            return builder.case
        self._add(builder, control(HELLO, own), P_BROKEN_HANDSHAKE)
        builder.live("auth", peer_id, P_BROKEN_HANDSHAKE)  # the proof for the fuzzer's id, always
        link = LinkFrames(rng, peer_id, self.node.node_id)
        for _ in range(rng.choice((1, 4, 16, 40))):
            for data in link.next():
                self._add(builder, data, P_MUTATE)
        if rng.random() < 0.1:
            builder.frames([control(REFUSE, {"reason": "fuzz says goodbye"})], P_MUTATE)
        return builder.case

    def _add(self, builder: CaseBuilder, data: bytes, p: float) -> None:
        """One frame: as is, mutated as bytes, or (for JSON frames) reshaped."""
        if data[4] not in (MESSAGE, CHUNK) and builder.rng.random() < p / 2:
            reshaped = json_mutation(builder.rng, data)
            if reshaped is not None:
                builder.frames([reshaped], 0.0)
                builder._case.mutated += 1
                return
        builder.frames([data], p / 2)

    def opened(self, sock: socket.socket) -> dict:
        """The node's HELLO (its nonce): the AUTH is made on it."""
        kind, payload = read_frame(sock, time.monotonic() + 10.0)
        if kind != HELLO:
            raise ControlFailed(f"the node's first link frame is of type {kind}, not HELLO")
        return json.loads(payload)

    def live(self, step: Live, context: object) -> list[bytes]:
        rng = random.Random(step.seed)
        node_hello = context if isinstance(context, dict) else {}
        auth = control(AUTH, {"proof": proof(self.node.password, str(node_hello.get("nonce", "")), step.arg)})
        if step.mutate:
            auth = rng.choice((control(AUTH, {"proof": "0" * 64}), Mutator(rng).mutate(auth, [auth]),
                               control(AUTH, rng.choice(ODD_VALUES))))
        return [auth]

    def control(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        sock = socket.create_connection((HOST, self.port), timeout=timeout)
        try:
            node_hello = self.opened(sock)
            nonce = uuid.uuid4().hex
            # The dialler proves the password first; the node proves it back.
            sock.sendall(control(HELLO, hello(CONTROL_PEER_ID, nonce)) +
                         control(AUTH, {"proof": proof(self.node.password, node_hello["nonce"], CONTROL_PEER_ID)}))
            kind, payload = read_frame(sock, deadline, skip=(PING,))
            expected = proof(self.node.password, nonce, node_hello["node_id"])
            if kind != AUTH or json.loads(payload).get("proof") != expected:
                raise ControlFailed(f"no valid AUTH from the node: type {kind}, {payload[:200]!r}")
            sock.sendall(control(PING))
            read_frame(sock, deadline, want=PONG)
        finally:
            sock.close()


def read_frame(sock: socket.socket, deadline: float, want: int | None = None,
               skip: tuple[int, ...] = ()) -> tuple[int, bytes]:
    """The next frame (of type ``want``, skipping the others; any but ``skip`` if None)."""
    buffer = bytearray()
    while True:
        while len(buffer) >= 5:
            length, kind = struct.unpack_from(">IB", buffer)
            if len(buffer) < 5 + length:
                break
            payload = bytes(buffer[5:5 + length])
            del buffer[:5 + length]
            if kind == REFUSE:
                raise ControlFailed(f"the node refused the link: {payload[:300]!r}")
            if (want is None and kind not in skip) or kind == want:
                return kind, payload
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ControlFailed(f"no link frame{f' of type {want}' if want else ''} in time")
        sock.settimeout(remaining)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            raise ControlFailed("no link frame in time") from None
        if not data:
            raise ControlFailed("the node closed the link")
        buffer += data
