"""One error shape for the whole API: ``{"error": {"code", "message", "fields"}}``.

DRF's exception handler is replaced (``REST_FRAMEWORK["EXCEPTION_HANDLER"]``), and
the 404/500 handlers of the URL configuration answer the same shape under /api/ and
/v1/ (a path no route matches never gets an HTML page there).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from claw_platform.outage import lost_connection

logger = logging.getLogger("claw.api")


class ApiError(exceptions.APIException):
    """A refusal with its own code and status, e.g. ``ApiError(409, "conflict", "…")``."""

    def __init__(self, status_code: int, code: str, message: str, fields: dict[str, Any] | None = None):
        self.status_code = status_code
        self.code = code
        self.fields = fields or {}
        super().__init__(detail=message, code=code)


def error_body(code: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def _flatten(detail: Any) -> list[str]:
    if isinstance(detail, dict):
        return [m for v in detail.values() for m in _flatten(v)]
    if isinstance(detail, list):
        return [m for v in detail for m in _flatten(v)]
    return [str(detail)]


def _fields(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """``{"field": ["message", …]}`` with nested fields dotted (``files.0.name``)."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if key == "non_field_errors" and not prefix:
                name = "non_field_errors"
            if isinstance(value, dict) or (
                isinstance(value, list) and any(isinstance(v, dict) for v in value)
            ):
                if isinstance(value, list):
                    for i, item in enumerate(value):
                        out.update(_fields(item, f"{name}.{i}"))
                else:
                    out.update(_fields(value, name))
            else:
                out[name] = _flatten(value)
    return out


def _validation_message(fields: dict[str, list[str]], fallback: str) -> str:
    for name, messages in fields.items():
        if messages:
            return messages[0] if name == "non_field_errors" else f"{name}: {messages[0]}"
    return fallback


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, RequestDataTooBig):
        exc = ApiError(413, "payload_too_large", "The request body is too large.")
    elif isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(detail)
    elif isinstance(exc, ObjectDoesNotExist | Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a real bug: Django logs it and answers 500 (handler500 below)
    assert isinstance(exc, exceptions.APIException)
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        fields = _fields(detail)
        body = error_body("invalid", _validation_message(fields, "Invalid input."), fields)
    elif isinstance(exc, ApiError):
        body = error_body(exc.code, str(exc.detail), exc.fields)
    else:
        code = exc.get_codes() if not isinstance(exc.get_codes(), dict | list) else exc.default_code
        body = error_body(str(code), " ".join(_flatten(exc.detail)))
    response.data = body
    return response


def _is_api_path(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/v1/"))


def json_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api_path(request):
        if request.path.startswith("/v1/"):
            return JsonResponse(
                openai_error_body("Unknown URL.", "invalid_request_error", "unknown_url"), status=404
            )
        return JsonResponse(error_body("not_found", "No such URL."), status=status.HTTP_404_NOT_FOUND)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception or Http404())


def json_server_error(request: HttpRequest) -> HttpResponse:
    if lost_connection(sys.exc_info()[1]):
        return database_unavailable(request)
    if _is_api_path(request):
        return JsonResponse(error_body("server_error", "Something went wrong on the server."), status=500)
    from django.views.defaults import server_error

    return server_error(request)


# How soon a client may try again when the database is away.
RETRY_AFTER_SECONDS = 5


def database_unavailable(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After for a request that found the database away: the API's
    error shape, OpenAI's under /v1/, a plain page elsewhere. Not logged as a server
    error: ``claw_platform.outage`` logs the outage once."""
    message = "The database is not answering; try again in a few seconds."
    response: HttpResponse
    if request.path.startswith("/v1/"):
        response = JsonResponse(
            openai_error_body(message, "server_error", "database_unavailable"), status=503
        )
    elif _is_api_path(request):
        response = JsonResponse(error_body("database_unavailable", message), status=503)
    else:
        response = HttpResponse(
            f"Service unavailable. {message}\n", status=503, content_type="text/plain; charset=utf-8"
        )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response._has_been_logged = True  # type: ignore[attr-defined]  # no "Service Unavailable" traceback
    return response


def openai_error_body(
    message: str, error_type: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
