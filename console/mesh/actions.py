"""Management requests from the console to the mesh, through the first node that
answers, with the admin credential the console is configured with."""

from __future__ import annotations

import logging
import ssl

from management.client import ManagementClient, ManagementClientError, TlsFiles, parse_address
from model.requests import Failure, Reply, Request

log = logging.getLogger(__name__)


class Unavailable(Exception):
    """No node could be asked."""


class Management:
    def __init__(self, addresses: list[str], login: str | None, passcode: str | None, timeout: float = 15.0,
                 tls: TlsFiles | None = None) -> None:
        """``addresses``: ``host:port`` or ``stomp+ssl://host:port``; ``tls`` verifies the latter."""
        self.addresses = addresses
        self.login = login
        self.passcode = passcode
        self.timeout = timeout
        self.tls = tls or TlsFiles()
        self._context: ssl.SSLContext | None = None

    def ask(self, request: Request) -> Reply:
        """The reply of the first node that takes the request; Unavailable if none does."""
        problems = []
        for address in self.addresses:
            try:
                host, port, tls = parse_address(address)
                context = self._tls_context() if tls else None
                with ManagementClient(host, port, self.login, self.passcode, self.timeout, context) as client:
                    return client.ask(request)
            except (ManagementClientError, ValueError) as error:
                problems.append(f"{address}: {error}")
        raise Unavailable("no node answered: " + "; ".join(problems) if problems else "no node to ask is configured")


    def _tls_context(self) -> ssl.SSLContext:
        # Made on first use, so that a missing file is an answer's problem, not the console's start's.
        if self._context is None:
            self._context = self.tls.context()
        return self._context


def failure_of(reply: Reply) -> Failure | None:
    return reply.error if not reply.ok else None
