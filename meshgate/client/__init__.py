"""A failover client for a Meshgate mesh, over stomp.py (``pip install meshgate[client]``).

    from meshgate.client import FailoverConnection

    conn = FailoverConnection("failover:(tcp://a:61613,tcp://b:61613)?randomize=false",
                              login="app", passcode="…").connect()
    conn.send("/queue/orders", "hello", {"persistent": "true"})   # waits for the RECEIPT
    conn.subscribe("/queue/orders", ack="client-individual", callback=handle)

The URL syntax (:mod:`meshgate.client.url`), the load-balancing policies
(:mod:`meshgate.client.policy`), discovery by multicast or DNS
(:mod:`meshgate.client.discovery`) and the connection (:mod:`meshgate.client.connection`)
are described in docs/clients.md.
"""

from meshgate.client.connection import FailoverConnection
from meshgate.client.discovery import discover
from meshgate.client.messages import (
    RESENT,
    SEND_ID,
    ConnectFailed,
    ConnectRefused,
    FailoverError,
    FrameRefused,
    Message,
    NotConnected,
    PendingSend,
    SendRefused,
    SendTimeout,
    Stats,
)
from meshgate.client.policy import LoadBalancingPolicy, make_policy
from meshgate.client.url import POLICIES, BrokerURI, DiscoveryURI, FailoverOptions, FailoverURL, parse_url

__all__ = [
    "POLICIES", "RESENT", "SEND_ID", "BrokerURI", "ConnectFailed", "ConnectRefused", "DiscoveryURI",
    "FailoverConnection", "FailoverError", "FailoverOptions", "FailoverURL", "FrameRefused", "LoadBalancingPolicy",
    "Message", "NotConnected", "PendingSend", "SendRefused", "SendTimeout", "Stats", "discover", "make_policy",
    "parse_url",
]
