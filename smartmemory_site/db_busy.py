"""A request that found the database locked answers 503 with Retry-After, never a 500.

A connection waits for a lock at most DATABASE_LOCK_TIMEOUT_SECONDS (core.db_locks says which errors mean
the wait ran out). The API's own handler answers those with its JSON error (memories.api_errors); this
module covers everything else: `DatabaseBusyMiddleware` the errors raised by views (pages, the login
form), and `server_error` (the project's handler500) the ones raised by middleware, such as the session
save after a login. Paths under /api/ get the API's JSON shape, pages a short page that reloads itself
after a GET. Both are rendered without touching the database, which is the one thing busy.
"""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from django.utils.deprecation import MiddlewareMixin
from django.views import defaults

from core.db_locks import BUSY_CODE, BUSY_DETAIL, RETRY_AFTER_SECONDS, is_database_busy


def busy_response(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After: JSON `{"error": "database_busy", "detail"}` under /api/, else the 503 page."""
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"error": BUSY_CODE, "detail": BUSY_DETAIL}, status=503)
    else:
        page = loader.get_template("503.html").render(
            {"retry_after": RETRY_AFTER_SECONDS, "reload": request.method in ("GET", "HEAD")}
        )
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class DatabaseBusyMiddleware(MiddlewareMixin):
    """Turns a view's lock timeout into `busy_response`, any other exception going on as it would (sync and
    async)."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return busy_response(request) if is_database_busy(exception) else None


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: Django calls it while the uncaught exception is being handled, so a lock timeout raised
    outside a view is still told apart from a fault (the 500 page for everything else)."""
    exc = sys.exc_info()[1]
    if exc is not None and is_database_busy(exc):
        return busy_response(request)
    return defaults.server_error(request)
