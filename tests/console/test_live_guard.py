"""The live WebSocket against hostile pages and stale sessions: only the console's own
origin (scheme, host and port) or a configured one may open it with the session cookie;
signing out closes the session's sockets and an expired or deleted session stops the
updates; a message the socket cannot act on gets an error and leaves it usable.

Real parts: a real redis-server as the channel layer, real Django sessions in the
database, the console's whole ASGI application (tests/console/live_support.py)."""

from __future__ import annotations

import datetime

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from console.live.updates import MESH
from tests.console.live_support import HOST, ORIGIN, connected, next_of, session_key, signed_in, socket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def layer(redis_only, settings):
    """Channels' Redis layer on the test's redis-server, as the worker and daphne share it."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": [redis_only.url], "prefix": "guard-test"}}}


async def opens(communicator) -> bool:
    ok, _ = await communicator.connect()
    if ok:
        await communicator.disconnect()
    return ok


@pytest.mark.parametrize("origin", [
    "http://127.0.0.1:8000",  # another port of the same host: the session cookie goes there too
    "https://127.0.0.1:8161",  # another scheme
    "http://localhost:8161",  # another host, though an allowed one
    "http://evil.example:8161",
    "null",  # a sandboxed frame, a file: page
    None,  # no Origin header: not a browser's page
    "http://127.0.0.1:8161/ws",  # not an origin
    "http://127.0.0.1:99999",
])
async def test_pages_of_other_origins_cannot_open_the_socket(users, origin):
    client = await signed_in(users["viewer"][0])
    assert not await opens(socket(client, origin=origin))
    assert await opens(socket(client))  # the same session from the console's own page


async def test_the_own_origin_is_read_from_the_host_and_scheme_the_console_is_served_on(users, settings):
    client = await signed_in(users["viewer"][0])
    settings.ALLOWED_HOSTS = ["127.0.0.1", "console.example"]
    assert await opens(socket(client, origin="http://console.example", host="console.example"))
    assert await opens(socket(client, origin="http://console.example:80", host="console.example"))
    # Served over TLS (wss): the https page only.
    assert await opens(socket(client, origin="https://" + HOST, scheme="wss"))
    assert not await opens(socket(client, origin=ORIGIN, scheme="wss"))
    # Behind a TLS proxy (MESHGATE_CONSOLE_TLS=1): as Django reads the scheme of a request.
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    forwarded = [(b"x-forwarded-proto", b"https")]
    assert await opens(socket(client, origin="https://" + HOST, extra=forwarded))
    assert not await opens(socket(client, origin=ORIGIN, extra=forwarded))


async def test_a_host_not_allowed_is_refused_even_from_its_own_origin(users):
    """DNS rebinding: a page of evil.example whose name now points at the console."""
    client = await signed_in(users["viewer"][0])
    assert not await opens(socket(client, origin="http://evil.example:8161", host="evil.example:8161"))
    assert not await opens(socket(client, host=None))


async def test_configured_origins_are_accepted(users, settings):
    """A proxy in front rewrites the Host header: the browser's origin is configured."""
    client = await signed_in(users["viewer"][0])
    assert not await opens(socket(client, origin="https://console.example"))
    settings.CONSOLE_ALLOWED_ORIGINS = ["https://console.example"]
    assert await opens(socket(client, origin="https://console.example"))
    assert not await opens(socket(client, origin="http://console.example"))


async def test_signing_out_closes_the_sessions_sockets_and_only_those(users):
    user = users["viewer"][0]
    leaving, staying = await signed_in(user), await signed_in(user)  # two browsers of one user
    closing, open_one = socket(leaving), socket(staying)
    for communicator in (closing, open_one):
        assert (await communicator.connect())[0]
    response = await sync_to_async(leaving.post)("/logout/")
    assert response.status_code == 302
    assert await closing.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    await open_one.send_json_to({"subscribe": ["mesh"]})
    assert (await open_one.receive_json_from(timeout=5))["type"] == "mesh"
    await open_one.disconnect()


@pytest.mark.parametrize("ending", ["expired", "deleted"])
async def test_a_session_that_ended_stops_the_updates(users, settings, ending):
    from django.contrib.sessions.models import Session
    from django.utils import timezone

    settings.CONSOLE_SESSION_RECHECK = 0  # every update asks the session store
    client = await signed_in(users["viewer"][0])
    communicator = socket(client)
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"subscribe": ["mesh"]})
    await next_of(communicator, "mesh")
    await get_channel_layer().group_send(MESH, {"type": "mesh.update", "update": {"type": "mesh", "seq": 1}})
    assert await next_of(communicator, "mesh", lambda m: m.get("seq") == 1, timeout=5)
    sessions = Session.objects.filter(session_key=session_key(client))
    if ending == "expired":
        await sync_to_async(sessions.update)(expire_date=timezone.now() - datetime.timedelta(seconds=1))
    else:
        await sync_to_async(sessions.delete)()
    await get_channel_layer().group_send(MESH, {"type": "mesh.update", "update": {"type": "mesh", "seq": 2}})
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    assert await communicator.receive_nothing(timeout=0.2)  # the update did not go out


@pytest.mark.parametrize("message", [
    "not json{",
    '{"subscribe": [[1]]}',  # a name that is not hashable
    '{"subscribe": [{}]}',
    '{"subscribe": "mesh"}',
    '{"subscribe": ["everything"]}',
    "[1]",
    "[" * 900,  # nested deeper than the JSON parser recurses
    '{"subscribe": ["mesh"], "pad": "' + "x" * 100_000 + '"}',  # oversized: not parsed at all
    b"\x00binary",
])
async def test_a_bad_message_gets_an_error_and_the_socket_stays_usable(users, message):
    communicator = await connected(users["viewer"][0])
    if isinstance(message, bytes):
        await communicator.send_to(bytes_data=message)
    else:
        await communicator.send_to(text_data=message)
    error = await communicator.receive_json_from(timeout=5)
    assert error["type"] == "error" and 0 < len(error["message"]) < 200, error  # nothing of the input echoed
    await communicator.send_json_to({"subscribe": ["mesh"]})
    assert (await communicator.receive_json_from(timeout=5))["type"] == "mesh"
    await communicator.disconnect()
