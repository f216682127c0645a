"""Idempotency-Key on memory create, bulk create and conversation ingest: a retry answers as the first
request did and writes nothing; the key cannot be reused for another request."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from memories.models import IdempotencyKey, Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

MEMORIES = "/api/v1/workspaces/acme/memories/"
BULK = "/api/v1/workspaces/acme/memories/bulk/"
CONVERSATIONS = "/api/v1/workspaces/acme/conversations/"
ONE = {"content": "We picked JWT", "memory_type": "decision", "tags": ["auth"]}
MANY = {"items": [{"content": f"note {i}"} for i in range(50)]}
TALK = {"sessions": [{"started_at": "2026-01-05T10:00:00Z", "turns": [{"speaker": "Ann", "text": "Hi Bob"}] * 3}]}


def post(api: APIClient, url: str, body: Any, key: str | None = "retry-1") -> Any:
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return api.post(url, json.dumps(body), content_type="application/json", **headers)


@pytest.mark.parametrize(("url", "body"), [(MEMORIES, ONE), (BULK, MANY), (CONVERSATIONS, TALK)])
def test_a_retry_with_the_same_key_answers_the_first_answer_and_writes_nothing(
    api: APIClient, workspace: Workspace, url: str, body: Any
) -> None:
    first = post(api, url, body)
    assert first.status_code == 201, first.content
    count = Memory.objects.filter(workspace=workspace).count()
    again = post(api, url, body)
    assert again.status_code == 201
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert Memory.objects.filter(workspace=workspace).count() == count


def test_the_same_json_spaced_or_ordered_otherwise_is_the_same_request(api: APIClient, workspace: Workspace) -> None:
    first = api.post(
        MEMORIES, '{"content": "x", "tags": ["a"]}', content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    again = api.post(
        MEMORIES, '{"tags":["a"],"content":"x"}', content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert again.content == first.content
    assert Memory.objects.filter(workspace=workspace).count() == 1


def test_the_same_key_with_another_body_is_a_422_naming_the_header(api: APIClient, workspace: Workspace) -> None:
    assert post(api, MEMORIES, ONE).status_code == 201
    refused = post(api, MEMORIES, {**ONE, "content": "We picked sessions"})
    assert refused.status_code == 422
    body = refused.json()
    assert (body["error"], body["field"]) == ("idempotency_key_reused", "Idempotency-Key")
    assert body["detail"].startswith("Idempotency-Key: 'retry-1' was used for another request")
    assert Memory.objects.filter(workspace=workspace).count() == 1


def test_the_same_key_on_another_endpoint_is_another_request(api: APIClient, workspace: Workspace) -> None:
    assert post(api, MEMORIES, {"content": "a"}).status_code == 201
    assert post(api, BULK, {"items": [{"content": "a"}]}).status_code == 422
    assert Memory.objects.filter(workspace=workspace).count() == 1


def test_without_a_key_every_request_writes(api: APIClient, workspace: Workspace) -> None:
    assert [post(api, MEMORIES, ONE, key=None).status_code for _ in range(2)] == [201, 201]
    assert Memory.objects.filter(workspace=workspace).count() == 2
    assert not IdempotencyKey.objects.exists()


def test_keys_belong_to_a_user_and_a_workspace(
    api: APIClient, workspace: Workspace, member: Callable[[str], Any], client_for: Callable[[Any], APIClient]
) -> None:
    from memories import services

    editor = client_for(member("editor"))
    assert post(api, MEMORIES, ONE).status_code == 201
    assert "Idempotent-Replayed" not in post(editor, MEMORIES, ONE)
    services.workspace_create(owner=workspace.memberships.get(role="owner").user, slug="beta", name="Beta")
    assert "Idempotent-Replayed" not in post(api, "/api/v1/workspaces/beta/memories/", ONE)
    assert Memory.objects.count() == 3


def test_a_refused_request_keeps_nothing_and_its_corrected_retry_writes(api: APIClient, workspace: Workspace) -> None:
    bad = post(api, BULK, {"items": [{"content": "fine"}, {"content": ""}]})
    assert bad.status_code == 400
    assert not IdempotencyKey.objects.exists() and not Memory.objects.exists()
    fixed = post(api, BULK, {"items": [{"content": "fine"}, {"content": "also fine"}]})
    assert fixed.status_code == 201 and len(fixed.json()["ids"]) == 2


def test_after_its_lifetime_a_key_writes_again(api: APIClient, workspace: Workspace) -> None:
    first = post(api, MEMORIES, ONE)
    IdempotencyKey.objects.update(expires_at=IdempotencyKey.objects.get().created_at - timedelta(seconds=1))
    again = post(api, MEMORIES, ONE)
    assert again.status_code == 201 and again.json()["id"] != first.json()["id"]
    assert IdempotencyKey.objects.count() == 1  # the expired one was purged


def test_a_key_lives_for_the_configured_hours(api: APIClient, workspace: Workspace, settings: Any) -> None:
    settings.IDEMPOTENCY_KEY_HOURS = 2
    post(api, MEMORIES, ONE)
    record = IdempotencyKey.objects.get()
    assert record.expires_at - record.created_at == timedelta(hours=2)
    assert (record.key, record.endpoint, record.status_code) == ("retry-1", "memories", 201)


@pytest.mark.parametrize("key", ["", "k" * 256, "clé", "tab\there"])
def test_a_malformed_key_is_a_400_naming_the_header(api: APIClient, workspace: Workspace, key: str) -> None:
    response = api.post(
        MEMORIES, json.dumps(ONE), content_type="application/json", HTTP_IDEMPOTENCY_KEY=key.encode().decode("latin-1")
    )
    assert response.status_code == 400
    assert response.json()["field"] == "Idempotency-Key"
    assert not Memory.objects.exists()


def test_a_viewer_with_a_key_is_still_refused(
    workspace: Workspace, viewer: Any, client_for: Callable[[Any], APIClient]
) -> None:
    response = post(client_for(viewer), MEMORIES, ONE)
    assert response.status_code == 403
    assert not IdempotencyKey.objects.exists()
