"""A live socket lives no longer than the session that opened it: signing out closes the
session's sockets at once (every socket joins a group of its session, which the logout
signal tells to close), and a socket asks again now and then whether its session is
still signed in (expired, flushed, password changed, user disabled), in case the
close could not be sent."""

from __future__ import annotations

import hashlib
import logging
from importlib import import_module

from asgiref.sync import async_to_sync
from channels.auth import get_user
from channels.layers import get_channel_layer
from django.conf import settings
from redis.exceptions import RedisError

log = logging.getLogger(__name__)
SIGN_IN = 4401  # the close code that sends a page to the sign-in page (static/console/common.js)
SESSION_END = "session.end"  # the message a session's sockets get at logout


def session_group(session_key: str) -> str:
    """The session's group: a digest, so the session key (a secret) is not a Redis key."""
    return "console.session." + hashlib.sha256(session_key.encode()).hexdigest()[:40]


async def still_signed_in(session_key: str, user_id) -> bool:
    """Whether the session (read afresh from the store) still signs in the same user."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = await get_user({"session": store})
    return user.is_authenticated and user.pk == user_id


def close_sockets_at_logout(sender, request, user, **kwargs) -> None:
    """``user_logged_out`` receiver: the signed-out session's sockets close with 4401."""
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if not session_key:
        return
    try:
        async_to_sync(get_channel_layer().group_send)(session_group(session_key), {"type": SESSION_END})
    except (OSError, RedisError) as error:  # Redis away: the sockets' own re-check closes them
        log.warning("logout: could not tell the session's live sockets to close (%s)", type(error).__name__)
