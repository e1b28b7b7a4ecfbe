"""What the API's views share: pages of rows filtered and sorted by the query, the
``?vhost=`` a request names, and management requests sent in the signed-in user's
name (one, or one per vhost), their failures as JSON errors."""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec
from drf_spectacular.utils import OpenApiParameter
from rest_framework.response import Response

from console.api.errors import MeshUnavailable, failure_response
from console.api.inputs import ListParams, VhostParams, valid
from console.api.pagination import Pages
from console.api.parsers import ApiView
from console.mesh import vhosts
from console.mesh.actions import Unavailable
from console.mesh.sources import management
from model.mesh import PartialQueue
from model.names import DEFAULT_VHOST
from model.requests import ALL, Failure, Request, VhostList

builtins = msgspec.to_builtins
# Snapshots leave a partial queue's default fields out; the API answers them whole.
_PARTIAL_DEFAULTS = {f.encode_name: f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
                     for f in msgspec.structs.fields(PartialQueue) if f.required is False}


def whole_partial(partial) -> dict:
    return {**_PARTIAL_DEFAULTS, **builtins(partial)}


_DIGITS = re.compile(r"(\d+)")
PAGE_PARAMS = [
    OpenApiParameter("page", int, description="1, 2, …"),
    OpenApiParameter("page_size", int, description="items per page, at most 500 (default 100)"),
]
LIST_PARAMS = [*PAGE_PARAMS, ListParams]
VHOST_LIST_PARAMS = [*LIST_PARAMS, VhostParams]
IN_VHOST = [VhostParams]


def vhost_filter(request) -> str | None:
    """The ``?vhost=`` a list is filtered by (a 400 if it is no vhost name); None: every vhost."""
    return valid(VhostParams, request.query_params).get("vhost")


def vhost_of(request) -> str:
    """The vhost a request about one queue or definition names (``?vhost=``), else ``/``."""
    return vhost_filter(request) or DEFAULT_VHOST


def one_page(view: ApiView, request, items: list, convert=builtins) -> Response:
    """One page of ``items``; only the page is turned into JSON-ready values."""
    paginator = Pages()
    shown = paginator.paginate_queryset(items, request, view=view)
    return paginator.get_paginated_response([convert(item) for item in shown])


def _value(row, field: str):
    for part in field.split("."):
        row = row.get(part) if isinstance(row, dict) else getattr(row, part, None)
    return row


def sorted_rows(request, rows: list, allowed: tuple[str, ...], default: str) -> list:
    """Rows (dicts or structs) filtered by ``?name=`` and sorted by ``?sort=`` (``sort_reverse``)."""
    params = valid(ListParams, request.query_params, sorts=allowed)
    name = params.get("name")
    if name:
        rows = [row for row in rows if name.lower() in str(_value(row, "name") or "").lower()]
    field = params.get("sort", default)
    reverse = params["sort_reverse"]

    def key(row):
        value = _value(row, field)
        if isinstance(value, str):  # "node1-10" after "node1-9"
            return (False, [(0, int(part), "") if part.isdecimal() and len(part) < 1000 else (1, 0, part)
                            for part in _DIGITS.split(value)])  # '²' is a digit to isdigit(), not to int()
        return (value is None, value if value is not None else 0)

    return sorted(rows, key=key, reverse=reverse)


def ask(request, mesh_request: Request):
    """Send a management request for the signed-in user; a Response if it failed as a whole."""
    mesh_request.on_behalf_of = request.user.get_username()
    try:
        reply = management().ask(mesh_request)
    except Unavailable as error:
        raise MeshUnavailable(str(error)) from None
    if not reply.ok:
        return None, failure_response(reply.error or Failure(code="unreachable", message="the node gave no reason"))
    return reply, None


def ask_each(request, vhost: str | None, question: Callable[[str], Request]) -> tuple[list, list]:
    """``question(v)``'s answers for vhost ``vhost``, or (None) for every vhost besides
    ``/``: the results as (vhost, item), and the failures."""
    if vhost is None:
        reply, failed = ask(request, VhostList(node=ALL))
        if failed is not None:
            return [], [failed.data["error"]]
        names, failures = vhosts.others(reply.result), builtins(reply.failures)
    else:
        names, failures = [vhost], []
    results: list = []
    for name in names:
        reply, failed = ask(request, question(name))
        if failed is not None:
            failures.append(failed.data["error"])
            continue
        results += [(name, item) for item in reply.result]
        failures += builtins(reply.failures)
    return results, failures


def action_response(request, mesh_request: Request) -> Response:
    reply, failed = ask(request, mesh_request)
    if failed is not None:
        return failed
    return Response({"result": builtins(reply.result), "failures": builtins(reply.failures)})
