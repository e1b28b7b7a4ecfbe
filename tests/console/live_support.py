"""The live WebSocket as a browser opens it, for the console's tests: a real Django
session (signed in by the test client), its cookie sent with the handshake to the
console's whole ASGI application (origin check, sessions, auth, the consumer), through
Channels' WebsocketCommunicator."""

from __future__ import annotations

import time

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

HOST = "127.0.0.1:8161"  # the console as the browser reached it
ORIGIN = "http://" + HOST  # its pages' origin


async def signed_in(user):
    """A test client (a browser's cookie jar) with a session signed in as ``user``."""
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    await sync_to_async(client.force_login)(user)
    return client


def session_key(client) -> str:
    from django.conf import settings

    return client.cookies[settings.SESSION_COOKIE_NAME].value


def socket(client=None, origin: str | None = ORIGIN, host: str | None = HOST, scheme: str = "ws",
           extra: list[tuple[bytes, bytes]] = ()) -> WebsocketCommunicator:
    """A handshake to ``/ws/mesh`` with ``client``'s session cookie (none: signed out),
    from a page of ``origin`` (None: no Origin header)."""
    from console.asgi import application

    headers = [(b"host", host.encode())] if host is not None else []
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if client is not None:
        headers.append((b"cookie", client.cookies.output(header="", sep=";").strip().encode()))
    communicator = WebsocketCommunicator(application, "/ws/mesh", headers=[*headers, *extra])
    communicator.scope["scheme"] = scheme
    return communicator


async def connected(user, *groups: str) -> WebsocketCommunicator:
    """A signed-in browser's open socket, subscribed to ``groups``."""
    communicator = socket(await signed_in(user))
    ok, code = await communicator.connect()
    assert ok, code
    if groups:
        await communicator.send_json_to({"subscribe": list(groups)})
    return communicator


async def next_of(communicator: WebsocketCommunicator, kind: str, predicate=lambda m: True, timeout: float = 15.0,
                  seen: list | None = None):
    """The first message of ``kind`` that ``predicate`` accepts; every message read
    on the way is appended to ``seen``."""
    deadline = time.monotonic() + timeout
    seen = seen if seen is not None else []
    while time.monotonic() < deadline:
        try:
            message = await communicator.receive_json_from(timeout=deadline - time.monotonic())
        except TimeoutError:
            break
        seen.append(message)
        if message.get("type") == kind and predicate(message):
            return message
    raise AssertionError(f"no {kind} message as expected within {timeout}s; got {[m.get('type') for m in seen]}")
