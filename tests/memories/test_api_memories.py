from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from memories.models import Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def url(ws: str, *parts: str) -> str:
    return "/api/v1/workspaces/" + ws + "/" + "".join(p + "/" for p in parts)


def test_create_memory_returns_contract_shape(api: APIClient, workspace: Workspace) -> None:
    response = api.post(url("acme", "memories"), {"content": "We picked JWT", "memory_type": "decision"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["content"] == "We picked JWT"
    assert body["memory_type"] == "decision"
    assert body["workspace"] == "acme"
    assert set(body["activation"]) >= {"score", "last_boost_at", "half_life_hours", "boost_count"}
    assert body["activation"]["score"] == pytest.approx(0.5, abs=1e-6)
    assert body["origin"] == "api:alice"
    memory = Memory.objects.get(id=body["id"])
    assert memory.embedding is not None


def test_memory_of_another_workspace_is_404(api: APIClient, workspace: Workspace, other_workspace: Workspace) -> None:
    from memories import services
    from memories.inputs import MemoryInput

    foreign = services.memory_create(workspace=other_workspace, actor=None, item=MemoryInput(content="secret plan"))
    response = api.get(url("acme", "memories", str(foreign.id)))
    assert response.status_code == 404
    assert "secret" not in response.content.decode()
    assert api.get(url("other", "memories", str(foreign.id))).status_code == 404


def test_bulk_create_is_all_or_nothing(api: APIClient, workspace: Workspace) -> None:
    items: list[dict[str, Any]] = [{"content": "one"}, {"content": "two", "memory_type": "nonsense"}]
    response = api.post(url("acme", "memories", "bulk"), {"items": items}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid"
    assert body["field"] == "items[1].memory_type"
    assert Memory.objects.filter(workspace=workspace).count() == 0


def test_bulk_create_returns_ids_in_order(api: APIClient, workspace: Workspace) -> None:
    items = [{"content": f"item {i}"} for i in range(5)]
    response = api.post(url("acme", "memories", "bulk"), {"items": items}, format="json")
    assert response.status_code == 201
    ids = response.json()["ids"]
    contents = dict(Memory.objects.filter(id__in=ids).values_list("id", "content"))
    assert [contents[uuid.UUID(i)] for i in ids] == [f"item {i}" for i in range(5)]


def test_list_search_finds_by_full_text(api: APIClient, workspace: Workspace) -> None:
    api.post(url("acme", "memories"), {"content": "The load balancer has no sticky sessions"}, format="json")
    api.post(url("acme", "memories"), {"content": "Lunch is at noon"}, format="json")
    response = api.get(url("acme", "memories"), {"q": "balancer"})
    assert response.status_code == 200
    assert [r["content"] for r in response.json()["results"]] == ["The load balancer has no sticky sessions"]


def test_keyset_pagination_visits_every_memory_once(api: APIClient, workspace: Workspace) -> None:
    api.post(url("acme", "memories", "bulk"), {"items": [{"content": f"m{i}"} for i in range(23)]}, format="json")
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 10, **({"cursor": cursor} if cursor else {})}
        body = api.get(url("acme", "memories"), params).json()
        seen.extend(r["id"] for r in body["results"])
        cursor = body["next"]
        if not cursor:
            break
    assert len(seen) == 23 == len(set(seen))


def test_viewer_cannot_create(client_for: Any, viewer: Any, workspace: Workspace) -> None:
    response = client_for(viewer).post(url("acme", "memories"), {"content": "x"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"


def test_delete_archives_unless_confirmed(api: APIClient, workspace: Workspace) -> None:
    mid = api.post(url("acme", "memories"), {"content": "temp"}, format="json").json()["id"]
    assert api.delete(url("acme", "memories", mid)).json()["status"] == "archived"
    assert Memory.objects.filter(id=mid).exists()
    assert api.delete(url("acme", "memories", mid) + "?confirm=true").status_code == 204
    assert not Memory.objects.filter(id=mid).exists()


def test_unauthenticated_is_rejected(workspace: Workspace) -> None:
    response = APIClient().get(url("acme", "memories"))
    assert response.status_code in (401, 403)
    assert "error" in response.json()


def test_the_memory_list_costs_the_same_queries_for_any_page_size(
    api: APIClient, workspace: Workspace, django_assert_num_queries: Any
) -> None:
    items = [{"content": f"kafka note {i}", "tags": ["infra"], "metadata": {"i": i}} for i in range(40)]
    api.post(url("acme", "memories", "bulk"), {"items": items}, format="json")
    # token lookup, membership + workspace, the page
    # A search in a date order (best match: tests/memories/test_list_search.py); on SQLite with the page's
    # probes: the type's share, the words the search's prefixes begin, the search's share.
    searched = {"limit": 40, "q": "kafka", "type": "semantic", "tag": "infra", "ordering": "-created"}
    probes = 3 if connection.vendor == "sqlite" else 0
    for params, queries in (({"limit": 1}, 3), ({"limit": 40}, 3), (searched, 3 + probes)):
        with django_assert_num_queries(queries):
            response = api.get(url("acme", "memories"), params)
        assert response.status_code == 200
        assert len(response.json()["results"]) == params["limit"]


def test_reading_one_memory_costs_three_queries(
    api: APIClient, workspace: Workspace, django_assert_num_queries: Any
) -> None:
    mid = api.post(url("acme", "memories"), {"content": "JWT"}, format="json").json()["id"]
    # token lookup, membership + workspace, the memory; the boost is queued, not written
    with django_assert_num_queries(3):
        response = api.get(url("acme", "memories", mid))
    assert response.status_code == 200
