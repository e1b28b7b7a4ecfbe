"""Whether a node is alive and ready, by rules of their own (deploy/README.md, "Health
and readiness"): what a kubelet's probes, a load balancer or an operator ask of the
node's HTTP endpoint (meshgate.http_endpoint). The node gathers the facts; the rules
here are pure, so they are tested on their own.

Ready means: clients may be sent here. A peer that is down does not make a node
unready: a node alone still serves its clients, and a StatefulSet restarted pod by
pod would otherwise wait forever for the first pod, whose peers are not up yet. A
peer the node has given up dialling (``mesh.reconnect_attempts``) does: the mesh the
operator configured will not come back by itself."""

from __future__ import annotations

import msgspec


class PeerFacts(msgspec.Struct, kw_only=True):
    address: str
    linked: bool
    gave_up: bool = False  # mesh.reconnect_attempts ran out


class HealthFacts(msgspec.Struct, kw_only=True):
    serving: bool  # the store recovered and the listeners open (a standby waits before that)
    standby: bool = False  # high availability: another process serves this node
    stopping: bool = False
    scaling_down: bool = False
    listeners: list[str] = []  # "scheme://host:port" of each open listener
    peers: list[PeerFacts] = []


class Readiness(msgspec.Struct, kw_only=True):
    ready: bool
    reasons: list[str]  # why not, for humans
    listeners: list[str]
    peers: list[PeerFacts]


def readiness(facts: HealthFacts) -> Readiness:
    reasons = []
    if facts.stopping:
        reasons.append("stopping")
    elif facts.standby:
        reasons.append("a standby of a high-availability pair: it serves once it takes over")
    elif not facts.serving:
        reasons.append("starting: the store is being recovered or the listeners are not open yet")
    if facts.scaling_down:
        reasons.append("scaling down: handing its messages over to the other nodes")
    reasons += [f"gave up dialling peer {peer.address} (mesh.reconnect_attempts)" for peer in facts.peers
                if peer.gave_up and not peer.linked]
    return Readiness(ready=not reasons, reasons=reasons, listeners=facts.listeners, peers=facts.peers)

