"""REST: ingesting a conversation returns the turn ids and builds the episode graph."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from memories.models import Edge, Memory, MemoryType, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

URL = "/api/v1/workspaces/acme/conversations/"

CONVERSATION: dict[str, Any] = {
    "sessions": [
        {
            "started_at": "2026-01-05T09:30:00Z",
            "turns": [
                {"speaker": "Dana", "text": "Why not session cookies with Redis?", "ref": "D1:1"},
                {"speaker": "Lee", "text": "Every request would hit Redis.", "ref": "D1:2"},
                {"speaker": "Dana", "text": "Then JWT it is."},
            ],
        },
        {"started_at": "2026-01-09T16:00:00+01:00", "turns": [{"speaker": "Lee", "text": "JWT shipped."}]},
    ]
}


def test_ingesting_returns_one_id_per_turn_in_order(api: APIClient, workspace: Workspace) -> None:
    response = api.post(URL, CONVERSATION, format="json")
    assert response.status_code == 201, response.content
    ids = response.json()["ids"]
    assert len(ids) == 4
    turns = [api.get(f"/api/v1/workspaces/acme/memories/{i}/").json() for i in ids]
    assert [t["content"] for t in turns] == [
        "Dana: Why not session cookies with Redis?",
        "Lee: Every request would hit Redis.",
        "Dana: Then JWT it is.",
        "Lee: JWT shipped.",
    ]
    assert {t["memory_type"] for t in turns} == {"episodic"}
    assert [t["created_at"] for t in turns] == ["2026-01-05T09:30:00Z"] * 3 + ["2026-01-09T15:00:00Z"]
    assert [t["metadata"].get("ref") for t in turns] == ["D1:1", "D1:2", None, None]


def test_the_api_shows_the_conversation_graph(api: APIClient, workspace: Workspace) -> None:
    ids = api.post(URL, CONVERSATION, format="json").json()["ids"]
    edges = api.get(f"/api/v1/workspaces/acme/memories/{ids[1]}/edges/").json()["results"]
    kinds = {(e["type"], e["source"] == ids[1]) for e in edges}
    assert ("PART_OF", True) in kinds
    assert ("FOLLOWS", True) in kinds and ("FOLLOWS", False) in kinds
    assert ("MENTIONS", True) in kinds
    follows = {(e["source"], e["target"]) for e in edges if e["type"] == "FOLLOWS"}
    assert follows == {(ids[1], ids[0]), (ids[2], ids[1])}
    redis = Memory.objects.get(memory_type=MemoryType.ENTITY, subject="redis")
    mentions = set(Edge.objects.filter(target=redis, edge_type="MENTIONS").values_list("source_id", flat=True))
    assert {str(m) for m in mentions} == {ids[0], ids[1]}


def test_viewers_cannot_ingest_and_strangers_cannot_see_the_workspace(
    client_for: Callable[[Any], APIClient], viewer: Any, make_user: Callable[..., Any]
) -> None:
    as_viewer = client_for(viewer).post(URL, CONVERSATION, format="json")
    assert as_viewer.status_code == 403
    as_stranger = client_for(make_user("eve")).post(URL, CONVERSATION, format="json")
    assert as_stranger.status_code == 404
    assert not Memory.objects.exists()


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda c: c.pop("sessions"), "sessions"),
        (lambda c: c["sessions"][1].update(started_at=None), "sessions[1].started_at"),
        (lambda c: c["sessions"][1].update(started_at="next week"), "sessions[1].started_at"),
        (lambda c: c["sessions"][1].update(turns=[]), "sessions[1].turns"),
        (lambda c: c["sessions"][1]["turns"][0].pop("speaker"), "sessions[1].turns[0].speaker"),
        (lambda c: c["sessions"][0]["turns"][2].update(text=""), "sessions[0].turns[2].text"),
        (lambda c: c["sessions"][0]["turns"].append("hello"), "sessions[0].turns[3]"),
    ],
)
def test_bad_conversations_name_the_field_and_write_nothing(
    api: APIClient, workspace: Workspace, mutate: Callable[[dict[str, Any]], Any], field: str
) -> None:
    body = copy.deepcopy(CONVERSATION)
    mutate(body)
    response = api.post(URL, body, format="json")
    assert response.status_code == 400, response.content
    payload = response.json()
    assert payload["error"] == "invalid"
    assert payload["field"] == field
    assert field in payload["detail"]
    assert not Memory.objects.exists()
    assert not Edge.objects.exists()
