"""What a management request's admin_action event says (model.events.AdminAction): the
target it names, and a TLS reload's outcome. Text a request brings is bounded here: an
event's size is not the asker's to choose."""

from __future__ import annotations

from model.names import DEFAULT_VHOST
from model.requests import (
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
)


def reload_detail(result: TlsReload) -> str:
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
