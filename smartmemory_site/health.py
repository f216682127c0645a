"""GET /healthz: 200 when the database and every configured backend answer, 503 naming what failed."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _redis() -> None:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()


def _neo4j() -> None:
    from graph.store import graph_store

    graph_store().ping()


def _checks() -> dict[str, Callable[[], None]]:
    checks: dict[str, Callable[[], None]] = {"database": _database}
    if settings.REDIS_URL:
        checks["redis"] = _redis
    if settings.GRAPH_BACKEND == "neo4j":
        checks["neo4j"] = _neo4j
    return checks


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    results: dict[str, dict[str, object]] = {}
    healthy = True
    for name, check in _checks().items():
        started = time.perf_counter()
        try:
            check()
            results[name] = {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 1)}
        except Exception as exc:  # every failure is reported, none is raised
            healthy = False
            results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "checks": results}, status=200 if healthy else 503
    )
