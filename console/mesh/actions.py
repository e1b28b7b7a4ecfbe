"""Management requests from the console to the mesh, through the first node that
answers, with the admin credential the console is configured with."""

from __future__ import annotations

import logging

from management.client import ManagementClient, ManagementClientError
from model.requests import Failure, Reply, Request

log = logging.getLogger(__name__)


class Unavailable(Exception):
    """No node could be asked."""


class Management:
    def __init__(self, addresses: list[str], login: str | None, passcode: str | None, timeout: float = 15.0) -> None:
        self.addresses = addresses
        self.login = login
        self.passcode = passcode
        self.timeout = timeout

    def ask(self, request: Request) -> Reply:
        """The reply of the first node that takes the request; Unavailable if none does."""
        problems = []
        for address in self.addresses:
            host, _, port = address.rpartition(":")
            try:
                with ManagementClient(host.strip("[]"), int(port), self.login, self.passcode, self.timeout) as client:
                    return client.ask(request)
            except ManagementClientError as error:
                problems.append(f"{address}: {error}")
        raise Unavailable("no node answered: " + "; ".join(problems) if problems else "no node to ask is configured")


def failure_of(reply: Reply) -> Failure | None:
    return reply.error if not reply.ok else None
