"""GET /api/schema/ describes the REST contract as OpenAPI 3."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.api]

CONTRACT = {
    "/api/v1/workspaces/": {"get", "post"},
    "/api/v1/workspaces/{ws}/memories/": {"get", "post"},
    "/api/v1/workspaces/{ws}/memories/bulk/": {"post"},
    "/api/v1/workspaces/{ws}/memories/{memory_id}/": {"get", "patch", "delete"},
    "/api/v1/workspaces/{ws}/memories/{memory_id}/edges/": {"get"},
    "/api/v1/workspaces/{ws}/edges/": {"post"},
    "/api/v1/workspaces/{ws}/conversations/": {"post"},
}


@pytest.fixture
def schema(client: Client) -> dict[str, Any]:
    response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def test_the_schema_is_openapi_3_and_needs_no_login(schema: dict[str, Any]) -> None:
    assert schema["openapi"].startswith("3.")
    assert schema["info"]["title"] == "SmartMemory site API"


def test_every_contract_path_and_method_is_described(schema: dict[str, Any]) -> None:
    for path, methods in CONTRACT.items():
        assert path in schema["paths"], path
        assert methods <= set(schema["paths"][path]), (path, set(schema["paths"][path]))


def test_the_memory_shape_lists_the_contract_fields(schema: dict[str, Any]) -> None:
    memory = schema["components"]["schemas"]["MemoryOut"]["properties"]
    assert {
        "id",
        "workspace",
        "content",
        "memory_type",
        "subject",
        "tags",
        "origin",
        "confidence",
        "status",
        "tier",
        "compression_tier",
        "activation",
        "retention_score",
        "access_count",
        "created_at",
        "updated_at",
        "conflicts_with",
        "replace_log",
        "replace_count",
        "drift_flags",
        "summarizes",
        "summarized_by",
        "metadata",
    } <= set(memory)


def test_errors_are_documented_with_the_error_shape(schema: dict[str, Any]) -> None:
    create = schema["paths"]["/api/v1/workspaces/{ws}/memories/"]["post"]["responses"]
    assert {"201", "400", "403", "404"} <= set(create)
    ref = create["400"]["content"]["application/json"]["schema"]["$ref"]
    assert set(schema["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]) >= {"error", "detail"}


def test_token_authentication_is_declared(schema: dict[str, Any]) -> None:
    assert "tokenAuth" in schema["components"]["securitySchemes"]


def test_conflicts_are_documented_where_they_happen(schema: dict[str, Any]) -> None:
    assert "409" in schema["paths"]["/api/v1/workspaces/"]["post"]["responses"]
    assert "409" in schema["paths"]["/api/v1/workspaces/{ws}/edges/"]["post"]["responses"]
