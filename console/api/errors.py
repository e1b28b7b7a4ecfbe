"""Every error is JSON: ``{"error": {"code": ..., "message": ..., "node": ...}}`` with
the HTTP status its code says (400, 401, 403, 404, 409, 503)."""

from __future__ import annotations

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from model.requests import ERROR_CODES, Failure

_CODES = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
          409: "conflict", 415: "unsupported_media_type", 429: "throttled", 503: "unreachable"}


class MeshUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "no node of the mesh could be asked"
    default_code = "unreachable"


def failure_response(failure: Failure) -> Response:
    body = {"code": failure.code, "message": failure.message}
    if failure.node:
        body["node"] = failure.node
    return Response({"error": body}, status=ERROR_CODES.get(failure.code, 400))


def handle(exc, context):
    response = exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    if isinstance(detail, dict) and set(detail) == {"detail"}:
        message = str(detail["detail"])
    elif isinstance(detail, dict):
        message = "; ".join(f"{field}: {' '.join(map(str, errors)) if isinstance(errors, list) else errors}"
                            for field, errors in detail.items())
    else:
        message = " ".join(map(str, detail)) if isinstance(detail, list) else str(detail)
    response.data = {"error": {"code": _CODES.get(response.status_code, "error"), "message": message}}
    return response
