"""REST: linking memories and reading a memory's edges."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from memories.models import Edge, Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

EDGES = "/api/v1/workspaces/acme/edges/"


def memory_edges(memory: Memory, ws: str = "acme") -> str:
    return f"/api/v1/workspaces/{ws}/memories/{memory.id}/edges/"


@pytest.fixture
def pair(make_memory: Callable[..., Memory]) -> tuple[Memory, Memory]:
    return make_memory("We picked JWT"), make_memory("The balancer has no sticky sessions")


def test_linking_two_memories_returns_the_edge(api: APIClient, pair: tuple[Memory, Memory]) -> None:
    a, b = pair
    response = api.post(EDGES, {"source": str(a.id), "target": str(b.id), "type": "derived_from"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    edge = Edge.objects.get()
    assert body["id"] == edge.pk
    assert (body["source"], body["target"], body["type"], body["weight"]) == (
        str(a.id),
        str(b.id),
        "DERIVED_FROM",
        1.0,
    )
    assert body["co_retrieval_count"] == 0


def test_a_weight_can_be_given(api: APIClient, pair: tuple[Memory, Memory]) -> None:
    a, b = pair
    response = api.post(
        EDGES, {"source": str(a.id), "target": str(b.id), "type": "RELATED", "weight": 2.5}, format="json"
    )
    assert response.status_code == 201
    assert Edge.objects.get().weight == 2.5


def test_a_duplicate_edge_is_a_conflict(api: APIClient, pair: tuple[Memory, Memory]) -> None:
    a, b = pair
    payload = {"source": str(a.id), "target": str(b.id), "type": "RELATED"}
    assert api.post(EDGES, payload, format="json").status_code == 201
    response = api.post(EDGES, {**payload, "weight": 5}, format="json")
    assert response.status_code == 409
    assert response.json()["error"] == "edge_exists"
    assert list(Edge.objects.values_list("weight", flat=True)) == [1.0]


def test_the_reverse_edge_and_another_type_are_distinct(api: APIClient, pair: tuple[Memory, Memory]) -> None:
    a, b = pair
    for source, target, kind in ((a, b, "RELATED"), (b, a, "RELATED"), (a, b, "MENTIONS")):
        payload = {"source": str(source.id), "target": str(target.id), "type": kind}
        assert api.post(EDGES, payload, format="json").status_code == 201
    assert Edge.objects.count() == 3


def test_a_memory_of_another_workspace_cannot_be_linked(
    api: APIClient, pair: tuple[Memory, Memory], other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, _ = pair
    foreign = make_memory("their secret", ws=other_workspace)
    for payload, field in (
        ({"source": str(a.id), "target": str(foreign.id), "type": "RELATED"}, "target"),
        ({"source": str(foreign.id), "target": str(a.id), "type": "RELATED"}, "source"),
    ):
        response = api.post(EDGES, payload, format="json")
        assert response.status_code == 404
        assert response.json()["field"] == field
        assert "secret" not in response.content.decode()
    assert not Edge.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"source": None}, "source"),
        ({"target": None}, "target"),
        ({"type": None}, "type"),
        ({"source": "not-a-uuid"}, "source"),
        ({"target": 42}, "target"),
        ({"type": "LOVES"}, "type"),
        ({"weight": 0}, "weight"),
        ({"weight": "heavy"}, "weight"),
        ({"target": "SELF"}, "target"),
    ],
)
def test_bad_edge_input_names_the_field(
    api: APIClient, pair: tuple[Memory, Memory], change: dict[str, Any], field: str
) -> None:
    a, b = pair
    payload: dict[str, Any] = {"source": str(a.id), "target": str(b.id), "type": "RELATED"}
    for key, value in change.items():
        if value is None:
            del payload[key]
        else:
            payload[key] = str(a.id) if value == "SELF" else value
    response = api.post(EDGES, payload, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == field
    assert field in body["detail"]
    assert not Edge.objects.exists()


def test_a_missing_memory_is_not_found(api: APIClient, pair: tuple[Memory, Memory]) -> None:
    a, _ = pair
    response = api.post(EDGES, {"source": str(a.id), "target": str(uuid.uuid4()), "type": "RELATED"}, format="json")
    assert response.status_code == 404
    assert response.json()["field"] == "target"


def test_viewers_cannot_link_and_strangers_cannot_see_the_workspace(
    client_for: Callable[[Any], APIClient],
    viewer: Any,
    make_user: Callable[..., Any],
    pair: tuple[Memory, Memory],
) -> None:
    a, b = pair
    payload = {"source": str(a.id), "target": str(b.id), "type": "RELATED"}
    as_viewer = client_for(viewer).post(EDGES, payload, format="json")
    assert as_viewer.status_code == 403
    assert as_viewer.json()["error"] == "forbidden"
    as_stranger = client_for(make_user("eve")).post(EDGES, payload, format="json")
    assert as_stranger.status_code == 404
    assert not Edge.objects.exists()


def test_an_editor_can_link(
    client_for: Callable[[Any], APIClient], member: Callable[[str], Any], pair: tuple[Memory, Memory]
) -> None:
    a, b = pair
    response = client_for(member("editor")).post(
        EDGES, {"source": str(a.id), "target": str(b.id), "type": "RELATED"}, format="json"
    )
    assert response.status_code == 201


def test_a_memorys_edges_are_listed_in_both_directions(
    api: APIClient, pair: tuple[Memory, Memory], make_memory: Callable[..., Memory]
) -> None:
    a, b = pair
    c, unrelated = make_memory("c"), make_memory("unrelated")
    api.post(EDGES, {"source": str(a.id), "target": str(b.id), "type": "RELATED"}, format="json")
    api.post(EDGES, {"source": str(c.id), "target": str(a.id), "type": "FOLLOWS"}, format="json")
    api.post(EDGES, {"source": str(b.id), "target": str(unrelated.id), "type": "RELATED"}, format="json")
    response = api.get(memory_edges(a))
    assert response.status_code == 200
    assert [(e["type"], e["source"], e["target"]) for e in response.json()["results"]] == [
        ("FOLLOWS", str(c.id), str(a.id)),
        ("RELATED", str(a.id), str(b.id)),
    ]


def test_viewers_can_read_edges_but_strangers_get_404(
    api: APIClient,
    client_for: Callable[[Any], APIClient],
    viewer: Any,
    make_user: Callable[..., Any],
    pair: tuple[Memory, Memory],
) -> None:
    a, b = pair
    api.post(EDGES, {"source": str(a.id), "target": str(b.id), "type": "RELATED"}, format="json")
    assert len(client_for(viewer).get(memory_edges(a)).json()["results"]) == 1
    assert client_for(make_user("eve")).get(memory_edges(a)).status_code == 404


def test_edges_of_a_memory_in_another_workspace_are_not_found(
    api: APIClient, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    foreign = make_memory("theirs", ws=other_workspace)
    assert api.get(memory_edges(foreign)).status_code == 404
    assert api.get(memory_edges(foreign, ws="other")).status_code == 404
