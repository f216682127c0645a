"""REST errors: always 400/403/404/409 with {"error", "detail"} naming the field, and never a partial write."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from history.models import EvolutionRecord
from memories.models import Edge, Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

BASE = "/api/v1/workspaces/acme/"


def assert_error(response: Any, status: int, field: str | None = None, error: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body: dict[str, Any] = response.json()
    assert set(body) >= {"error", "detail"}
    assert isinstance(body["error"], str) and body["error"]
    assert isinstance(body["detail"], str) and body["detail"]
    if field is not None:
        assert body.get("field") == field
        assert field in body["detail"]
    if error is not None:
        assert body["error"] == error
    return body


@pytest.fixture
def memory(make_memory: Callable[..., Memory]) -> Memory:
    return make_memory("We picked JWT", tags=("auth",))


def nothing_written(workspace: Workspace, memories: int = 0) -> None:
    assert Memory.objects.filter(workspace=workspace).count() == memories
    assert not Edge.objects.exists()
    assert not EvolutionRecord.objects.exists()


# -- malformed bodies -----------------------------------------------------------------------------

WRITES = [
    ("post", "/api/v1/workspaces/"),
    ("post", BASE + "memories/"),
    ("post", BASE + "memories/bulk/"),
    ("post", BASE + "edges/"),
    ("post", BASE + "conversations/"),
    ("patch", BASE + "memories/{id}/"),
]


@pytest.mark.parametrize(("method", "path"), WRITES)
def test_invalid_json_is_a_400_naming_the_body(
    api: APIClient, workspace: Workspace, memory: Memory, method: str, path: str
) -> None:
    response = getattr(api, method)(
        path.format(id=memory.id), data='{"content": "unterminated', content_type="application/json"
    )
    assert_error(response, 400, field="body", error="invalid_json")
    nothing_written(workspace, memories=1)
    assert Workspace.objects.count() == 1


@pytest.mark.parametrize(("method", "path"), WRITES)
def test_a_body_in_another_format_is_a_400_naming_the_body(
    api: APIClient, workspace: Workspace, memory: Memory, method: str, path: str
) -> None:
    response = getattr(api, method)(path.format(id=memory.id), data="content=hello", content_type="text/plain")
    assert_error(response, 400, field="body")
    nothing_written(workspace, memories=1)


@pytest.mark.parametrize(("method", "path"), WRITES)
def test_a_json_array_body_is_a_400(
    api: APIClient, workspace: Workspace, memory: Memory, method: str, path: str
) -> None:
    response = getattr(api, method)(path.format(id=memory.id), [1, 2], format="json")
    assert_error(response, 400)
    nothing_written(workspace, memories=1)


# -- bad values name their field ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"type": "nonsense"}, "type"),
        ({"status": "sleeping"}, "status"),
        ({"tier": "lukewarm"}, "tier"),
        ({"compression_tier": "zipped"}, "compression_tier"),
        ({"pinned": "maybe"}, "pinned"),
        ({"has_conflicts": "perhaps"}, "has_conflicts"),
        ({"created_after": "last tuesday"}, "created_after"),
        ({"created_before": "2026-99-99"}, "created_before"),
        ({"ordering": "content"}, "ordering"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
    ],
)
def test_bad_list_parameters_name_the_parameter(
    api: APIClient, memory: Memory, params: dict[str, str], field: str
) -> None:
    assert_error(api.get(BASE + "memories/", params), 400, field=field, error="invalid")


def test_a_cursor_from_another_ordering_is_a_400(api: APIClient, make_memory: Callable[..., Memory]) -> None:
    for i in range(3):
        make_memory(f"m{i}")
    cursor = api.get(BASE + "memories/", {"limit": 1, "ordering": "-created"}).json()["next"]
    assert cursor
    for ordering in ("activation", "-retention", "accessed"):
        response = api.get(BASE + "memories/", {"limit": 1, "ordering": ordering, "cursor": cursor})
        assert_error(response, 400, field="cursor")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"content": "x", "memory_type": "dream"}, "memory_type"),
        ({"content": "x", "confidence": 2}, "confidence"),
        ({"content": "x", "tags": "auth"}, "tags"),
        ({"content": "x", "created_at": "once upon a time"}, "created_at"),
        ({"content": "x", "metadata": [1]}, "metadata"),
        ({"content": "x", "origin": "nobody"}, "origin"),
        ({"content": "x", "unknown_field": 1}, "unknown_field"),
    ],
)
def test_bad_memory_bodies_name_the_field(
    api: APIClient, workspace: Workspace, body: dict[str, Any], field: str
) -> None:
    assert_error(api.post(BASE + "memories/", body, format="json"), 400, field=field, error="invalid")
    nothing_written(workspace)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body"),
        ({"origin": "user:me"}, "origin"),
        ({"content": "   "}, "content"),
        ({"status": "forgotten"}, "status"),
        ({"tags": [1]}, "tags"),
        ({"valid_from": "2026-02-01T00:00:00Z", "valid_to": "2026-01-01T00:00:00Z"}, "valid_to"),
    ],
)
def test_bad_patches_name_the_field_and_change_nothing(
    api: APIClient, memory: Memory, body: dict[str, Any], field: str
) -> None:
    before = Memory.objects.filter(id=memory.id).values().get()
    response = api.patch(BASE + f"memories/{memory.id}/", body, format="json")
    assert_error(response, 400, field=field)
    assert Memory.objects.filter(id=memory.id).values().get() == before
    assert not EvolutionRecord.objects.exists()


def test_a_malformed_memory_id_in_the_url_names_it(api: APIClient, workspace: Workspace) -> None:
    assert_error(api.get(BASE + "memories/not-a-uuid/"), 400, field="id")


def test_a_hard_delete_confirmation_must_be_a_boolean(api: APIClient, memory: Memory) -> None:
    assert_error(api.delete(BASE + f"memories/{memory.id}/?confirm=sure"), 400, field="confirm")
    assert Memory.objects.get(id=memory.id).status == "active"


@pytest.mark.parametrize("text", ["nul \x00 inside", "ok"])
def test_a_nul_character_is_refused_on_every_backend(api: APIClient, workspace: Workspace, text: str) -> None:
    for body, field in (
        ({"content": text if "\x00" in text else "fine", "subject": "x"}, "content"),
        ({"content": "fine", "subject": text}, "subject"),
        ({"content": "fine", "tags": [text]}, "tags"),
        ({"content": "fine", "metadata": {"note": text}}, "metadata"),
    ):
        response = api.post(BASE + "memories/", body, format="json")
        if "\x00" in text:
            assert_error(response, 400, field=field)
        else:
            assert response.status_code == 201
    assert Memory.objects.filter(workspace=workspace).count() == (0 if "\x00" in text else 4)


# -- 403 / 404 / 409 ------------------------------------------------------------------------------


def test_a_stranger_gets_the_same_404_as_for_a_missing_workspace(
    client_for: Callable[[Any], APIClient], make_user: Callable[..., Any], memory: Memory
) -> None:
    stranger = client_for(make_user("eve"))
    hidden = stranger.get(BASE + "memories/")
    missing = stranger.get("/api/v1/workspaces/acme-nope/memories/")
    assert_error(hidden, 404, field="workspace", error="not_found")
    assert_error(missing, 404, field="workspace", error="not_found")
    assert hidden.json()["detail"].replace("acme", "X") == missing.json()["detail"].replace("acme-nope", "X")
    for method, path in (
        ("get", f"memories/{memory.id}/"),
        ("patch", f"memories/{memory.id}/"),
        ("delete", f"memories/{memory.id}/?confirm=true"),
        ("get", f"memories/{memory.id}/edges/"),
        ("post", "memories/bulk/"),
        ("post", "edges/"),
        ("post", "conversations/"),
    ):
        response = getattr(stranger, method)(BASE + path, {"content": "x"}, format="json")
        assert_error(response, 404)
        assert "JWT" not in response.content.decode()
    assert Memory.objects.get(id=memory.id).content == "We picked JWT"


def test_a_memory_of_another_workspace_is_404_for_every_method(
    api: APIClient, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    foreign = make_memory("their plan", ws=other_workspace)
    for method in ("get", "patch", "delete"):
        response = getattr(api, method)(
            BASE + f"memories/{foreign.id}/?confirm=true", {"content": "mine"}, format="json"
        )
        assert_error(response, 404, field="id", error="not_found")
        assert "their plan" not in response.content.decode()
    assert Memory.objects.get(id=foreign.id).content == "their plan"
    assert_error(api.get(BASE + f"memories/{uuid.uuid4()}/"), 404, field="id")


def test_a_viewer_may_read_but_every_write_is_403(
    client_for: Callable[[Any], APIClient], viewer: Any, memory: Memory, workspace: Workspace
) -> None:
    client = client_for(viewer)
    assert client.get(BASE + f"memories/{memory.id}/").status_code == 200
    assert client.get(BASE + "memories/").status_code == 200
    for method, path, body in (
        ("post", "memories/", {"content": "x"}),
        ("post", "memories/bulk/", {"items": [{"content": "x"}]}),
        ("patch", f"memories/{memory.id}/", {"content": "x"}),
        ("delete", f"memories/{memory.id}/", None),
        ("delete", f"memories/{memory.id}/?confirm=true", None),
        ("post", "edges/", {"source": str(memory.id), "target": str(memory.id), "type": "RELATED"}),
        ("post", "conversations/", {"sessions": []}),
    ):
        assert_error(getattr(client, method)(BASE + path, body, format="json"), 403, error="forbidden")
    nothing_written(workspace, memories=1)
    assert Memory.objects.get(id=memory.id).status == "active"


def test_conflicts_are_409(api: APIClient, workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    a, b = make_memory("a"), make_memory("b")
    edge = {"source": str(a.id), "target": str(b.id), "type": "RELATED"}
    api.post(BASE + "edges/", edge, format="json")
    assert_error(api.post(BASE + "edges/", edge, format="json"), 409, error="edge_exists")
    assert_error(api.post("/api/v1/workspaces/", {"slug": "acme", "name": "x"}, format="json"), 409, field="slug")
    assert Edge.objects.count() == 1


# -- all or nothing -------------------------------------------------------------------------------


def test_a_bad_item_anywhere_in_a_bulk_request_writes_nothing(api: APIClient, workspace: Workspace) -> None:
    items: list[dict[str, Any]] = [{"content": f"item {i}"} for i in range(50)]
    items.append({"content": "last", "confidence": "very"})
    assert_error(api.post(BASE + "memories/bulk/", {"items": items}, format="json"), 400, field="items[50].confidence")
    nothing_written(workspace)


def test_a_bad_later_session_writes_no_earlier_session(api: APIClient, workspace: Workspace) -> None:
    good = {"started_at": "2026-01-01T00:00:00Z", "turns": [{"speaker": "A", "text": "Kafka is up"}]}
    bad = {"started_at": "2026-01-02T00:00:00Z", "turns": [{"speaker": "", "text": "hm"}]}
    response = api.post(BASE + "conversations/", {"sessions": [good, good, bad]}, format="json")
    assert_error(response, 400, field="sessions[2].turns[0].speaker")
    nothing_written(workspace)
