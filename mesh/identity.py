"""Who this node is on its links: what its HELLO says, and what a proven peer's
HELLO naming this very node id means (its own HELLO come back, a copy of its data
dir, or a process that replaced it)."""

from __future__ import annotations

from typing import Callable

from mesh.settings import MeshSettings
from mesh.wire import Hello

# 2: messages carry their accept time; 3: mesh-wide definitions; 4: HELLO carries the node's epoch (fencing);
# 5: the link carries every vhost (docs/vhosts-mesh-design.md), not only "/".
# Quorum votes (mesh.quorum) need no new version: a HELLO's "votes" flag says a node answers them, a VOTE is
# only sent to such a node, and it comes on a connection that never becomes a link.
PROTOCOL_VERSION = 5
# The oldest version this node links with. A HELLO's "version" says it, because a node of version 4 refuses
# any HELLO whose version is not 4; "speaks" says the newest, and a link speaks the lower of both sides'.
OLDEST_PROTOCOL = 4
VHOSTS_PROTOCOL = 5  # a link of this version or later carries vhosts other than "/"
SELF_LINK = "a link to this node itself"  # a refusal: a discovery listed this node's own address


class Identity:
    def __init__(self, config: MeshSettings, *, node_id: str, name: str, started_at: float, epoch: int,
                 stomp_address: tuple[str, int], on_fatal: Callable[[str], None],
                 on_fenced: Callable[[str], None] | None) -> None:
        self.config = config
        self.node_id = node_id
        self.name = name
        self.started_at = started_at
        # The data dir's epoch this process serves under (docs/ha.md): a peer that has
        # seen a higher one of this node id refuses it, and it stops (on_fenced).
        self.epoch = epoch
        self.stomp_address = stomp_address
        self.link_address: tuple[str, int] = config.bind
        self.on_fatal = on_fatal
        self.on_fenced = on_fenced
        self.own_nonces: set[str] = set()  # of this node's open links: a HELLO with one came from itself

    def hello(self, nonce: str) -> Hello:
        return Hello(version=OLDEST_PROTOCOL, speaks=PROTOCOL_VERSION, node_id=self.node_id, name=self.name,
                     user=self.config.cluster_user, nonce=nonce, started=self.started_at, link=self.link_address,
                     stomp=self.stomp_address, group=self.config.group_name, chunks=True, busy=True,
                     epoch=self.epoch, votes=True)

    def fenced(self, reason: str) -> None:
        """This node was replaced (its data dir taken over by another process): it must
        stop serving at once."""
        (self.on_fenced or self.on_fatal)(reason)

    def check_peer(self, hello: Hello) -> str | None:
        """Why a proven peer's HELLO cannot make a link, if it names this node id."""
        if hello.node_id != self.node_id:
            return None
        if hello.nonce in self.own_nonces:
            return SELF_LINK
        where = f"as node {hello.name!r} at {tuple(hello.link or ())}"
        if hello.epoch > self.epoch:
            # The same node at a higher epoch: this process was replaced on a shared store.
            self.fenced(f"node id {self.node_id} is in the mesh at epoch {hello.epoch} {where}, above this "
                        f"process's epoch {self.epoch}: another process took this node's data dir over, so this "
                        "one was replaced")
            return f"node id {self.node_id} at epoch {self.epoch} is replaced by the dialler's epoch"
        if hello.started < self.started_at:
            # We are the newcomer: the other node had this identity first.
            self.on_fatal(f"node id {self.node_id} is already in the mesh {where}: this node's data dir was "
                          "copied from it; start this node with a fresh data dir")
        return (f"node id {self.node_id} is already in the mesh: the joining node's data dir was copied; "
                "it must start with a fresh data dir")
