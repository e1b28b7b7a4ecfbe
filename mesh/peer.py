"""What a node keeps per established link, and the session sink that writes
forwarded messages onto it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.broker.message import Message
from gateway.broker.queue import Subscription
from gateway.broker.session import Session
from mesh.codec import encode_message

if TYPE_CHECKING:
    from mesh.link import LinkProtocol

LINK_WINDOW = 10_000  # messages in flight per link subscription before the peer confirms


class Peer:
    """One linked neighbour: its link, the session its link subscriptions live on,
    the demand it advertised and what is in flight to it."""

    def __init__(self, link: LinkProtocol, session: Session, since: float) -> None:
        self.link = link
        self.session = session
        self.since = since
        self.demand: list[dict] = []
        self.advertised: list[dict] | None = None
        self.queue_subs: dict[str, Subscription] = {}
        self.topic_sub: Subscription | None = None
        # Durable subscription name -> the link subscription that takes this node's part
        # of it to the peer, whose demand says its subscriber is there (or beyond).
        self.durable_subs: dict[str, Subscription] = {}
        self.forwarded: dict[str, Subscription] = {}  # message id -> link subscription holding it
        self.retiring: set[Subscription] = set()  # no demand any more; waiting for confirmations
        self.to_confirm: list[str] = []
        # Ids of messages in flight that move a backlog (redistribution), not a fresh send.
        self.redistributing: set[str] = set()
        self.forwarded_out = 0  # messages whose custody passed to the peer
        self.forwarded_in = 0  # messages received from the peer
        self.busy = False  # it said its store has no room: nothing goes to it until BUSY_RETRY_S passed
        self.busy_since = 0.0  # when it first said so, until it stores something again


class Forwarder:
    """The link session's sink: writes each message onto the link."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.peer: Peer | None = None  # set once the peer is known, cleared when its link goes

    def deliver(self, sub: Subscription, message: Message) -> None:
        peer = self.peer
        if peer is None:
            return
        path = message.path
        if sub.id.startswith("d:"):
            # A scale-down subscription (d:NAME) hands a durable subscription's backlog over.
            target = sub.id[2:]
            peer.forwarded[entry_name(target, message.id)] = sub
        else:
            target = ""
            peer.forwarded[message.id] = sub
            queue = sub.queue
            if queue.backlog and sub.prefetch:
                # The first messages out after redistribution began are the backlog that waited
                # (not what an administrator moves by hand: that subscription has no window).
                queue.backlog -= 1
                peer.redistributing.add(message.id)
                peer.link.send_message(encode_message(message, path[0] if path else self.node_id,
                                                      (*path, self.node_id), target, redistributed=True),
                                       message.address)
                return
        peer.link.send_message(encode_message(message, path[0] if path else self.node_id,
                                              (*path, self.node_id), target), message.address)


def entry_name(target: str, message_id: str) -> str:
    """How a forwarded copy is named in STORED/RELEASED: by id, and by the durable
    subscription it goes to when handed over (copies of one message share its id)."""
    return f"{target}/{message_id}" if target else message_id
