"""GET /healthz: 200 when the database and every configured backend answer, else 503 naming what failed."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from graph.store import graph_store, set_graph_store

pytestmark = [pytest.mark.django_db, pytest.mark.api]

# The Redis that pytest starts for the tests marked `services` (tests/services.py): the real server.
LIVE_REDIS = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
# FalkorDB's Bolt listener, also started by `make test`.
LIVE_BOLT = os.environ.get("TEST_NEO4J_URI", "bolt://127.0.0.1:7688")


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_healthy_with_the_embedded_defaults(client: Client, settings: Any) -> None:
    settings.REDIS_URL = ""
    settings.GRAPH_BACKEND = "sql"
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert list(body["checks"]) == ["database"]
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["database"]["ms"] >= 0


def test_a_redis_that_does_not_answer_is_named_in_a_503(client: Client, settings: Any) -> None:
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["redis"]["ok"] is False
    assert "ConnectionError" in body["checks"]["redis"]["error"]


@pytest.mark.services
def test_a_configured_redis_that_answers_is_healthy(client: Client, settings: Any) -> None:
    settings.REDIS_URL = LIVE_REDIS
    response = client.get("/healthz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"]["redis"]["ok"] is True


def test_health_answers_only_get(client: Client) -> None:
    assert client.post("/healthz").status_code == 405


@pytest.fixture
def neo4j_backend(settings: Any) -> Iterator[Any]:
    """Switch to the Bolt graph store; the store is per process, so it is rebuilt around the test."""
    settings.REDIS_URL = ""
    settings.GRAPH_BACKEND = "neo4j"
    set_graph_store(None)
    yield settings
    store = graph_store() if settings.GRAPH_BACKEND == "neo4j" else None
    close = getattr(store, "close", None)
    if callable(close):
        close()
    set_graph_store(None)


def test_a_bolt_graph_store_that_does_not_answer_is_named_in_a_503(client: Client, neo4j_backend: Any) -> None:
    neo4j_backend.NEO4J_URI = f"bolt://127.0.0.1:{closed_port()}"
    response = client.get("/healthz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"]["ok"] is True
    assert checks["neo4j"]["ok"] is False
    assert checks["neo4j"]["error"]


@pytest.mark.services
def test_a_bolt_graph_store_that_answers_is_healthy(client: Client, neo4j_backend: Any) -> None:
    neo4j_backend.NEO4J_URI = LIVE_BOLT
    response = client.get("/healthz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"]["neo4j"]["ok"] is True
