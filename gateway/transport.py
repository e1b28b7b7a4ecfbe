"""What the protocols use of a Twisted stream transport, as a type mypy can check.

Twisted annotates ``Protocol.transport`` as ``ITransport | None``: a zope interface,
whose methods mypy reads as taking no ``self``, and None until ``makeConnection``.
A protocol whose callbacks all run once connected declares ``transport: Transport``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from twisted.internet.interfaces import IAddress


class Transport(Protocol):
    """A TCP connection's transport (or what stands for one, as the WebSocket's for STOMP)."""

    def write(self, data: bytes) -> None: ...

    def writeSequence(self, data: Iterable[bytes]) -> None: ...

    def loseConnection(self) -> None: ...

    def abortConnection(self) -> None: ...

    def getPeer(self) -> IAddress: ...

    def getHost(self) -> IAddress: ...

    # The producer provides IPushProducer: a zope declaration, which mypy cannot check.
    def registerProducer(self, producer: object, streaming: bool) -> None: ...

    def unregisterProducer(self) -> None: ...

    def pauseProducing(self) -> None: ...

    def resumeProducing(self) -> None: ...
