"""A minimal blocking STOMP client for the ``meshgate topology``, ``stat`` and
``forget`` commands: one request to the management address, one JSON answer."""

from __future__ import annotations

import json
import socket
import uuid

from gateway.stomp.codec import FrameParser, encode_frame
from management.service import ADDRESS


class AdminError(Exception):
    pass


def request(host: str, port: int, what: str, login: str | None = None, passcode: str | None = None,
            timeout: float = 10.0, headers: dict[str, str] | None = None) -> dict:
    connect = {"accept-version": "1.2", "host": host, "heart-beat": "0,0"}
    if login is not None:
        connect.update(login=login, passcode=passcode or "")
    reply = f"/temp-queue/admin-{uuid.uuid4().hex[:8]}"
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(
            encode_frame("CONNECT", connect)
            + encode_frame("SUBSCRIBE", {"id": "admin", "destination": reply})
            + encode_frame("SEND", {**(headers or {}), "destination": "/queue/" + ADDRESS, "reply-to": reply,
                                    "meshgate-request": what})
        )
        parser = FrameParser("1.2")
        while True:
            data = sock.recv(1 << 16)
            if not data:
                raise AdminError("the broker closed the connection without answering")
            for frame in parser.feed(data):
                if frame.command == "ERROR":
                    raise AdminError(frame.headers.get("message", "error"))
                if frame.command == "MESSAGE":
                    return json.loads(frame.body)


def format_topology(answer: dict) -> str:
    nodes = answer["nodes"]
    names = {node_id: info.get("name", node_id[:8]) for node_id, info in nodes.items()}
    lines = [f"{len(nodes)} node(s), as seen from {names.get(answer['self'], answer['self'])}"]
    for node_id, info in sorted(nodes.items(), key=lambda item: names[item[0]]):
        links = ", ".join(names.get(peer, peer[:8]) for peer in info.get("links", [])) or "-"
        address = ":".join(map(str, info.get("stomp", []))) or "?"
        lines.append(f"  {names[node_id]} ({node_id}) stomp {address}; links: {links}")
        for queue, (depth, consumers, inflight, *in_doubt) in sorted(info.get("queues", {}).items()):
            counts = format_counts(depth, inflight, sum(in_doubt))
            lines.append(f"    /queue/{queue}: {counts}, {consumers} consumer(s)")
    return "\n".join(lines)


def format_cluster_stat(answer: dict) -> str:
    nodes = answer["nodes"]
    totals: dict[str, list[int]] = {}
    per_node: dict[str, list[tuple[str, int, int]]] = {}
    for info in nodes.values():
        # Nodes before in-doubt counts sent three numbers per queue.
        for queue, (depth, consumers, inflight, *in_doubt) in info.get("queues", {}).items():
            held = depth + inflight + sum(in_doubt)
            total = totals.setdefault(queue, [0, 0])
            total[0] += held
            total[1] += consumers
            per_node.setdefault(queue, []).append((info.get("name", "?"), held, consumers))
    lines = [f"{'queue':<40} {'messages':>10} {'consumers':>10}"]
    for queue in sorted(totals):
        depth, consumers = totals[queue]
        lines.append(f"/queue/{queue:<33} {depth:>10} {consumers:>10}")
        for name, node_depth, node_consumers in sorted(per_node[queue]):
            lines.append(f"  {name:<38} {node_depth:>10} {node_consumers:>10}")
    return "\n".join(lines)


def format_counts(depth: int, inflight: int, in_doubt: int) -> str:
    text = f"{depth} queued, {inflight} in flight"
    # Only after a link loss or restart: held until a peer says whether it has them.
    return text + f", {in_doubt} in doubt" if in_doubt else text
