"""Map every API error to `{"error": code, "detail": ...}` with the status the contract names.

A database that stayed locked past the connection's wait (core.db_locks) is 503 `database_busy` with
`Retry-After`: the request changed nothing and may simply be sent again.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from core.db_locks import BUSY_CODE, BUSY_DETAIL, RETRY_AFTER_SECONDS, is_database_busy
from core.errors import DomainError


def error_response(code: str, detail: Any, status_code: int, field: str | None = None) -> Response:
    body: dict[str, Any] = {"error": code, "detail": detail}
    if field:
        body["field"] = field
    return Response(body, status=status_code)


def busy_response() -> Response:
    """503 database_busy with Retry-After (see core.db_locks)."""
    response = error_response(BUSY_CODE, BUSY_DETAIL, status.HTTP_503_SERVICE_UNAVAILABLE)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if is_database_busy(exc):
        set_rollback()
        return busy_response()
    if isinstance(exc, DomainError):
        return error_response(exc.code, exc.detail, exc.status_code, exc.field)
    if isinstance(exc, Http404):
        return error_response("not_found", str(exc) or "not found", status.HTTP_404_NOT_FOUND)
    if isinstance(exc, exceptions.ParseError):
        return error_response("invalid_json", f"body: {exc.detail}", status.HTTP_400_BAD_REQUEST, "body")
    if isinstance(exc, exceptions.ValidationError):
        field, message = _first_error(exc.detail)
        return error_response("invalid", f"{field}: {message}", status.HTTP_400_BAD_REQUEST, field)
    if isinstance(exc, exceptions.UnsupportedMediaType):
        # The contract speaks JSON only; a body in another format is bad input like malformed JSON.
        return error_response(
            "unsupported_media_type", f"body: {exc.detail}; send application/json", status.HTTP_400_BAD_REQUEST, "body"
        )
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.APIException):
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "error"
        response.data = {"error": code, "detail": str(exc.detail)}
    return response


def _first_error(detail: Any, path: str = "") -> tuple[str, str]:
    """The dotted path and message of the first error in a DRF ValidationError detail.

    Serializer-level errors ("non_field_errors", or a bare list) are about the body as a whole.
    """
    if isinstance(detail, dict) and detail:
        key, value = next(iter(detail.items()))
        name = "" if key in (api_settings.NON_FIELD_ERRORS_KEY, "non_field_errors") else str(key)
        return _first_error(value, f"{path}.{name}".strip(".") if name else path)
    if isinstance(detail, list):
        for index, item in enumerate(detail):
            if isinstance(item, dict):
                if item:  # a list serializer reports {} for each valid item
                    return _first_error(item, f"{path}[{index}]")
            elif item:
                return _first_error(item, path)
    return (path or "body", str(detail))
