"""What the ``admin_action`` event of an admin action says (management/service.py emits
one for each, refused or done): who, on what, how it went, and whether it was a
doctor's remedy (``apply_remedy``)."""

from __future__ import annotations

from typing import Any

from gateway.auth import ANONYMOUS
from model.events import AdminAction
from model.names import DEFAULT_VHOST
from model.requests import (
    ApplyRemedy,
    BrowsePage,
    DeleteDefinition,
    JourneySearch,
    JourneySteps,
    Request,
    TlsReload,
    VhostAdd,
    VhostDelete,
    VhostPermissionsClear,
    VhostPermissionsSet,
    VhostSetLimits,
    action_of,
)

_COUNTED = ("purge", "delete_queue", "move", "redistribute", "send")


def admin_action(request: Request, user: str, ok: bool, result: str) -> AdminAction:
    """The event of ``request`` asked by ``user`` (and the tool's user it acted for)."""
    if request.remedy_of:
        result = f"doctor {request.remedy_of}: {result}"
    return AdminAction(user=asker(request, user), action=action_of(request), target=target_of(request), ok=ok,
                       result=result)


def asker(request: Request, user: str) -> str:
    """Who asked, as events and definitions name them: ``user``, and the tool's user it
    acted for (``on_behalf_of``: the console's signed-in user)."""
    if not request.on_behalf_of:
        return user
    if user == ANONYMOUS.name:
        # A node without users knows every connection by this name, the console's too: it
        # would only say the node has no users. The tool's user is who there is to name.
        return request.on_behalf_of
    return f"{user} for {request.on_behalf_of}"


def outcome(action: str, result: Any) -> tuple[bool, str]:
    """Whether a done action did all it was asked, and what it did, in words."""
    if isinstance(result, BrowsePage):
        return True, f"looked at {len(result.messages)} of {result.total} message(s) from {result.offset}"
    if action == "journey_steps":
        return True, f"looked at {len(result)} journey record(s)"
    if action == "journey_search":
        return True, f"found {len(result)} journey(s)"
    if isinstance(result, TlsReload):  # done where it could be: ok only if every listener took its files
        return result.all_reloaded, _reload_detail(result)
    return True, ", ".join(part for part in (f"{result.count} message(s)" if action in _COUNTED else "",
                                             result.detail) if part)


def _reload_detail(result: TlsReload) -> str:
    if not result.listeners:
        return "no TLS listener or dialler on this node"
    reloaded = [outcome.listener for outcome in result.listeners if outcome.reloaded]
    kept = [f"{outcome.listener} kept its old certificate ({outcome.reason})" for outcome in result.listeners
            if not outcome.reloaded]
    return "; ".join((["reloaded " + ", ".join(reloaded)] if reloaded else []) + kept)


def target_of(request: Request) -> str:
    if isinstance(request, (VhostAdd, VhostSetLimits, VhostDelete)):
        return f"vhost {request.name}"
    if isinstance(request, VhostPermissionsSet):
        spec = request.permission
        return f"permissions of {_principal(spec.user, spec.group)} in vhost {spec.vhost}"
    if isinstance(request, VhostPermissionsClear):
        return f"permissions of {_principal(request.user, request.group)} in vhost {request.vhost}"
    if isinstance(request, ApplyRemedy):  # refused before its remedy's request was sent
        return f"finding {request.finding}"
    if isinstance(request, JourneySteps):  # the first ids only: the event's size is not the asker's to choose
        more = f" and {len(request.ids) - 3} more" if len(request.ids) > 3 else ""
        return "journeys of " + ", ".join(request.ids[:3]) + more
    if isinstance(request, JourneySearch):  # what it looked for stays out: the event's size is not the asker's
        return "journey search" + (f" in /queue/{request.queue}" if request.queue else "")
    vhost = getattr(request, "vhost", DEFAULT_VHOST)
    where = "" if vhost == DEFAULT_VHOST else f" in vhost {vhost}"
    if isinstance(request, DeleteDefinition):
        described = {"queue": "/queue/", "trace": "tracing of "}.get(request.kind, "durable subscription ")
        return described + request.name + where
    for field in ("queue", "destination", "connection", "forget"):
        value = getattr(request, field, None)
        if value:
            return (f"/queue/{value}" if field == "queue" else value) + where
    return request.node or "this node"


def _principal(user: str | None, group: str | None) -> str:
    return f"user {user}" if user is not None else f"group {group}"
