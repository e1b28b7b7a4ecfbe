"""Every error is JSON: ``{"error": {"code": ..., "message": ..., "node": ...}}`` with
the HTTP status its code says (400, 401, 403, 404, 405, 409, 413, 415, 429, 503) —
Django's own refusals of an API request included (a body over
DATA_UPLOAD_MAX_MEMORY_SIZE, more parameters than DATA_UPLOAD_MAX_NUMBER_FIELDS, an
unknown path), so no client input gets an HTML page or a 500."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig, TooManyFieldsSent
from django.http import JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler

from model.requests import ERROR_CODES, Failure

_CODES = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
          409: "conflict", 413: "too_large", 415: "unsupported_media_type", 429: "throttled", 503: "unreachable"}
MAX_MESSAGE = 1000  # characters: messages quote what the client sent (field names, values)
_MAX_FIELD = 60
API_PREFIX = "/api/"


class MeshUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "no node of the mesh could be asked"
    default_code = "unreachable"


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"


def failure_response(failure: Failure) -> Response:
    body = {"code": failure.code, "message": failure.message}
    if failure.node:
        body["node"] = failure.node
    return Response({"error": body}, status=ERROR_CODES.get(failure.code, 400))


def _api_exception(exc: Exception) -> Exception:
    """Django's refusals of a request, raised when a view first reads its body or its
    query, as the API's errors."""
    if isinstance(exc, RequestDataTooBig):
        return BodyTooLarge(f"the request body is over the limit of {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")
    if isinstance(exc, TooManyFieldsSent):
        return exceptions.ValidationError(f"more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} parameters")
    return exc


def _message(detail) -> str:
    if isinstance(detail, dict):
        if set(detail) == {"detail"}:
            return _message(detail["detail"])
        return "; ".join(_message(errors) if field == api_settings.NON_FIELD_ERRORS_KEY else
                         f"{_cut(str(field), _MAX_FIELD)}: {_message(errors)}" for field, errors in detail.items())
    if isinstance(detail, list):
        return " ".join(map(_message, detail))
    return str(detail)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _error(status_code: int, message: str) -> dict:
    return {"error": {"code": _CODES.get(status_code, "error"), "message": _cut(message, MAX_MESSAGE)}}


def handle(exc, context):
    response = exception_handler(_api_exception(exc), context)
    if response is None:
        return None
    response.data = _error(response.status_code, _message(response.data))
    return response


# -- Django's handlers (console/urls.py): JSON for the API's paths --------------------------------


def bad_request(request, exception):
    """A request Django refused before any view (e.g. a Host not allowed)."""
    if not request.path.startswith(API_PREFIX):
        return defaults.bad_request(request, exception)
    error = _api_exception(exception)
    if isinstance(exception, DisallowedHost):
        error = exceptions.ParseError("the request's Host is not one this console answers to")
    elif not isinstance(error, exceptions.APIException):
        error = exceptions.ParseError("the request is malformed")
    return JsonResponse(_error(error.status_code, str(error.detail)), status=error.status_code)


def not_found(request, exception):
    if not request.path.startswith(API_PREFIX):
        return defaults.page_not_found(request, exception)
    return JsonResponse(_error(404, "no such path in the API (/api/v1/schema/ lists them)"), status=404)
