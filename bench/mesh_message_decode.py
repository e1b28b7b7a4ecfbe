"""Instructions per MESSAGE frame a node decodes from a peer (mesh.codec.decode_message), alone.

    PYTHONHASHSEED=0 setarch -R valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        .venv/bin/python bench/mesh_message_decode.py [--count 50000] [--headers K] [--vhost NAME] [--checkout DIR]

The frame is a real one: a message a broker made of a STOMP SEND (256 bytes, a
content-type header, the id a node gives it), encoded by ``encode_message`` as node A
forwards it to node B (origin and path A's node id), its text block (ids, address,
headers) 118 bytes; ``--headers K`` adds K headers of 23 bytes. It is decoded ``--count`` times.
Run it at N and at 3N: the difference of valgrind's instruction counts divided by 2N
is the cost of one decode, free of start-up (a wall-clock A/B of ``mesh_pair.sh`` is
too noisy on a loaded machine to see a few per cent of one function). ``--vhost``
decodes a message of another vhost than "/" instead; ``--checkout`` imports Meshgate
from another checkout (the code before a change)."""

from __future__ import annotations

import argparse
import sys
import uuid


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50000, help="frames decoded")
    parser.add_argument("--vhost", default="", help='a vhost other than "/" the message belongs to')
    parser.add_argument("--headers", type=int, default=0, help="more headers, of 23 bytes each")
    parser.add_argument("--checkout", help="import Meshgate from this checkout")
    return parser.parse_args()


ARGS = _arguments()
if ARGS.checkout:
    sys.path.insert(0, ARGS.checkout)

from gateway.broker.broker import Broker  # noqa: E402
from gateway.broker.message import QUEUE  # noqa: E402
from gateway.store.memory import MemoryStore  # noqa: E402
from mesh.codec import decode_message, encode_message  # noqa: E402

BODY = b"m" * 256


def frame_payload(vhost: str, more_headers: int) -> bytes:
    """A MESSAGE frame's payload as node A sends it to node B."""
    node_a = str(uuid.UUID(int=1))  # fixed, so every run decodes the same bytes
    broker = Broker(MemoryStore(), message_id_prefix=f"{node_a[:8]}-3-")  # as meshgate.node names ids
    headers = {"content-type": "text/plain", **{f"x-header-{i:03d}": f"value-{i:03d}" for i in range(more_headers)}}
    message = broker.send(QUEUE, "orders", headers, BODY)
    assert message is not None
    frame = encode_message(message, node_a, (node_a,), vhost=vhost)
    return frame[5:]  # the frame head: length and type


def main() -> None:
    payload = frame_payload(ARGS.vhost, ARGS.headers)
    decode = decode_message
    for _ in range(ARGS.count):
        decode(payload)


if __name__ == "__main__":
    main()
