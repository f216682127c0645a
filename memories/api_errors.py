"""Map every API error to `{"error": code, "detail": ...}` with the status the contract names."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from memories.errors import DomainError


def error_response(code: str, detail: Any, status_code: int, field: str | None = None) -> Response:
    body: dict[str, Any] = {"error": code, "detail": detail}
    if field:
        body["field"] = field
    return Response(body, status=status_code)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return error_response(exc.code, exc.detail, exc.status_code, exc.field)
    if isinstance(exc, Http404):
        return error_response("not_found", str(exc) or "not found", status.HTTP_404_NOT_FOUND)
    if isinstance(exc, exceptions.ParseError):
        return error_response("invalid_json", str(exc.detail), status.HTTP_400_BAD_REQUEST, "body")
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail
        field = next(iter(detail), None) if isinstance(detail, dict) else None
        return error_response("invalid", detail, status.HTTP_400_BAD_REQUEST, field)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.APIException):
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "error"
        response.data = {"error": code, "detail": str(exc.detail)}
    return response
