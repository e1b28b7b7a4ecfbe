"""Quorum votes for replicated pairs (docs/ha.md, "Takeover and quorum").

A backup whose primary looks gone, with no witness, asks the mesh's other nodes
whether they still hear the primary's node id. It does so over a short-lived
connection to each peer's mesh listener that never becomes a link:

1. the peer's listener sends its HELLO as to any dialler (a nonce, its node id,
   and ``"votes": true`` if it answers votes: a peer of an older Meshgate lacks
   the flag, is asked nothing and counts as a no);
2. the backup sends ``VOTE`` instead of a HELLO: ``{"op": "vote", "node_id",
   "epoch": N+1, "after_ms", "user", "nonce"}`` and a proof, an HMAC under the
   cluster password of the body bound to the peer's nonce (no replay);
3. the peer answers ``VOTED`` ``{"granted", "reason", "known", "node_id", "name"}``
   with a proof bound to the backup's nonce (no forged yes), and closes.

The peer grants (``yes``) only if it has no live link to that node id, has not
received a frame from it for ``after_ms``, has been up that long itself, and the
epoch is above the one it has seen of that node id (or the very epoch it granted
before: a backup may ask again). On a grant it records the epoch as seen of that
node id, so from then on it refuses that node id's links at a lower epoch: the old
primary, should it come back, is fenced as after a shared-store takeover.

``op = "epoch"`` asks only the highest epoch the peer has seen of a node id (a
primary starting without a witness checks it was not replaced while away).

The codec and the peer's side live here (no sockets); the backup's side is
``meshgate.replication.quorum``."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

from mesh.identity import Identity
from mesh.peers import PeerTable
from mesh.settings import Clock, MeshSettings

log = logging.getLogger("mesh.quorum")

VOTE_OPS = ("vote", "epoch")


def _canonical(body: dict) -> bytes:
    return json.dumps({k: v for k, v in body.items() if k != "proof"}, sort_keys=True,
                      separators=(",", ":")).encode()


def vote_proof(password: str, peer_nonce: str, body: dict) -> str:
    """The voter's proof: the cluster password, on the asked peer's link nonce."""
    return hmac.new(password.encode(), b"vote:" + peer_nonce.encode() + b":" + _canonical(body),
                    hashlib.sha256).hexdigest()


def voted_proof(password: str, voter_nonce: str, body: dict) -> str:
    """The peer's proof on its answer: the cluster password, on the voter's nonce."""
    return hmac.new(password.encode(), b"voted:" + voter_nonce.encode() + b":" + _canonical(body),
                    hashlib.sha256).hexdigest()


def make_vote(password: str, peer_nonce: str, *, op: str, node_id: str, epoch: int, after_ms: int, user: str,
              nonce: str) -> dict:
    body = {"op": op, "node_id": node_id, "epoch": epoch, "after_ms": after_ms, "user": user, "nonce": nonce}
    return {**body, "proof": vote_proof(password, peer_nonce, body)}


def check_voted(password: str, voter_nonce: str, body: object) -> dict | None:
    """The peer's answer if its proof holds, else None."""
    if not isinstance(body, dict):
        return None
    if not same_proof(body.get("proof"), voted_proof(password, voter_nonce, body)):
        return None
    return body


def same_proof(proof: object, expected: str) -> bool:
    """A peer's proof against the expected one, in constant time; anything but a string of
    the right characters is wrong (compare_digest refuses str with non-ASCII characters)."""
    return isinstance(proof, str) and hmac.compare_digest(proof.encode(), expected.encode())


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class VoteJudge:
    """What a node answers a backup's VOTE with: its peer table's view of the primary."""

    def __init__(self, config: MeshSettings, identity: Identity, peers: PeerTable, clock: Clock) -> None:
        self.config = config
        self.identity = identity
        self.peers = peers
        self.clock = clock
        self.listening_since = clock.seconds()  # reset when the node's link listener starts


def answer_vote(judge: VoteJudge, link_nonce: str, request: object, voter: str = "?") -> dict:
    """The peer's answer to a VOTE received on a connection whose HELLO carried
    ``link_nonce`` (signed with the cluster password, on the voter's nonce)."""
    config, identity, peers = judge.config, judge.identity, judge.peers
    body = request if isinstance(request, dict) else {}
    voter_nonce = str(body.get("nonce", ""))
    reply: dict = {"granted": False, "node_id": identity.node_id, "name": identity.name}
    epoch, after_ms, node_id, op = _int(body.get("epoch")), _int(body.get("after_ms")), body.get("node_id"), \
        body.get("op")
    if not same_proof(body.get("proof"), vote_proof(config.cluster_password, link_nonce, body)):
        reply["reason"] = "the vote carries no valid proof of the cluster password"
        log.warning("mesh: a quorum vote from %s without a valid proof of the cluster password; refused", voter)
    elif body.get("user") != config.cluster_user:
        reply["reason"] = "wrong cluster_user"
    elif op not in VOTE_OPS or epoch is None or after_ms is None or not isinstance(node_id, str) or not node_id:
        reply["reason"] = "a malformed vote"
    elif op == "epoch":
        reply["known"] = identity.epoch if node_id == identity.node_id else peers.epochs.get(node_id, 0)
        reply["reason"] = "the highest epoch this node has seen of it"
    else:
        granted, reply["reason"] = _judge(judge, node_id, epoch, after_ms / 1000.0)
        reply["granted"] = granted
        reply["known"] = peers.epochs.get(node_id, 0)
        log.log(logging.WARNING if granted else logging.INFO,
                "mesh: quorum vote from a backup at %s for node id %s at epoch %d: %s, %s", voter, node_id, epoch,
                "yes" if granted else "no", reply["reason"])
    reply["nonce"] = voter_nonce
    reply["proof"] = voted_proof(config.cluster_password, voter_nonce, reply)
    return reply


def _judge(judge: VoteJudge, node_id: str, epoch: int, after_s: float) -> tuple[bool, str]:
    now = judge.clock.seconds()
    identity, peers = judge.identity, judge.peers
    if node_id == identity.node_id:
        return False, f"this is node id {node_id} itself, serving at epoch {identity.epoch}: the primary lives"
    known = peers.epochs.get(node_id, 0)
    if epoch < known or (epoch == known and peers.granted_epochs.get(node_id) != epoch):
        return False, f"epoch {epoch} is not above epoch {known}, which this node has seen of it"
    peer = peers.linked.get(node_id)
    if peer is not None:
        return False, (f"I hear the primary: linked with it at epoch {known}, last frame "
                       f"{now - peer.link.last_received:.1f} s ago")
    last = peers.last_frame.get(node_id)
    if last is not None and now - last < after_s:
        return False, f"I hear the primary: last frame {now - last:.1f} s ago (the link went since)"
    up = now - judge.listening_since
    if up < after_s:
        return False, f"this node has been up only {up:.1f} s: too soon to tell whether the primary lives"
    # Fencing: the old primary's links (a lower epoch) are refused from now on, and the
    # epoch is kept in the peer's durable record (mesh.custody).
    peers.grant_epoch(node_id, epoch)
    heard = "never linked with it" if last is None else f"last frame {now - last:.1f} s ago"
    return True, f"no link to it and nothing from it for {after_s:.1f} s ({heard}); its links below epoch {epoch} " \
                 "are refused from now on"
