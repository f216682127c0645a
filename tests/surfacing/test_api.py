from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from memories import services as memory_services
from memories.inputs import SessionInput, TurnInput
from memories.models import Memory, Role, Workspace
from memories.signalbus import LocalSignalBus
from surfacing.settings import DEFAULTS

pytestmark = [pytest.mark.django_db, pytest.mark.api, pytest.mark.usefixtures("stores")]

Make = Callable[..., Memory]
BREAKDOWN_KEYS = {
    "factors",
    "subject_match",
    "time_cue",
    "activation",
    "relevance",
    "recency",
    "centrality",
    "anchor_forced",
    "session_pin_boost",
    "freshness_boost",
}


def url(ws: str, *parts: str) -> str:
    return "/api/v1/workspaces/" + ws + "/" + "".join(p + "/" for p in parts)


def pin_url(ws: str, sid: str, memory_id: Any) -> str:
    return url(ws, "sessions", sid, "pins", str(memory_id))


@pytest.fixture
def graph(workspace: Workspace, make_memory: Make) -> dict[str, Memory]:
    decision = make_memory("We picked JWT for authentication", memory_type="decision")
    balancer = make_memory("The load balancer has no sticky sessions")
    anchor = make_memory("Answer in English", memory_type="anchor")
    memory_services.edge_link(workspace=workspace, source=decision, target=balancer, edge_type="RELATED")
    return {"decision": decision, "balancer": balancer, "anchor": anchor}


def test_context_returns_the_contract_shape(
    api: APIClient, workspace: Workspace, graph: dict[str, Memory], fresh_signal_bus: LocalSignalBus
) -> None:
    response = api.post(
        url("acme", "context"),
        {"session_id": "s1", "query": "why did we pick JWT?", "k": 10, "mode": "router"},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {
        "decision_id",
        "strategy_used",
        "confidence",
        "reasons",
        "settings",
        "items",
        "tokens_used",
        "drift_warnings",
    }
    assert uuid.UUID(body["decision_id"])
    assert body["strategy_used"] == "deep:multi-hop"
    assert body["confidence"] == 0.75
    assert body["reasons"][0] == "keyword:why"
    assert body["settings"]["mode"] == "router"
    assert body["settings"]["recency_time_constant_hours"] == DEFAULTS.recency_time_constant_hours
    assert body["settings"]["score_profile"] == "calibrated"
    kinds = {item["id"]: item["provenance"]["kind"] for item in body["items"]}
    assert kinds == {
        str(graph["anchor"].id): "anchor",
        str(graph["decision"].id): "lexical",
        str(graph["balancer"].id): "context",  # what the decision links to
    }
    for item in body["items"]:
        assert set(item) == {"id", "content", "memory_type", "score", "score_breakdown", "provenance"}
        assert set(item["score_breakdown"]) == BREAKDOWN_KEYS
        assert set(item["provenance"]) == {"kind", "seed", "edge_type", "hops", "path"}
    assert body["tokens_used"] == sum(max(1, -(-len(item["content"]) // 4)) for item in body["items"])
    assert fresh_signal_bus.pending() > 0  # boosts and events queued


def test_context_of_a_point_query_names_the_entity_in_the_provenance(
    api: APIClient, workspace: Workspace, user: Any
) -> None:
    turn = memory_services.conversation_ingest(
        workspace=workspace,
        actor=user,
        sessions=[SessionInput(started_at=timezone.now(), turns=(TurnInput(speaker="Ana", text="pg is up"),))],
    )[0]
    entity = Memory.objects.get(workspace=workspace, memory_type="entity", subject="postgresql")
    response = api.post(url("acme", "context"), {"query": "PostgreSQL", "mode": "router"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["strategy_used"] == "factual:point-query"
    kinds = {item["id"]: (item["provenance"]["kind"], item["provenance"]["seed"]) for item in body["items"]}
    assert kinds == {str(entity.id): ("entity", None), str(turn): ("spread", str(entity.id))}


def test_context_of_a_point_query_on_a_popular_entity_has_a_bounded_query_count(
    api: APIClient, workspace: Workspace, user: Any, django_assert_max_num_queries: Any
) -> None:
    turns = tuple(TurnInput(speaker="Ana", text=f"pg shard {i} moved") for i in range(60))
    memory_services.conversation_ingest(
        workspace=workspace, actor=user, sessions=[SessionInput(started_at=timezone.now(), turns=turns)]
    )
    body = {"query": "PostgreSQL", "mode": "router", "k": 3}
    api.post(url("acme", "context"), body, format="json")  # builds the graph snapshot once
    # token, membership, pins, lexical, candidate rows, entity memories, graph generation, the most
    # recent mentions, their rows, details: 10, whatever the number of mentions.
    with django_assert_max_num_queries(10):
        response = api.post(url("acme", "context"), body, format="json")
    assert response.status_code == 200
    assert response.json()["reasons"][-1] == "entity_mentions:15_of_60"


def test_context_explain_adds_declined_candidates(api: APIClient, workspace: Workspace, make_memory: Make) -> None:
    for i in range(3):
        make_memory(f"incident report number {i}")
    body = api.post(url("acme", "context"), {"query": "incident report", "k": 1, "explain": True}, format="json").json()
    assert len(body["items"]) == 1
    assert len(body["declined"]) == 2
    assert {d["factor"] for d in body["declined"]} <= {"low_activation", "low_relevance", "recency", "interference"}
    assert [d["rank"] for d in body["declined"]] == [2, 3]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "x", "k": 0}, "k"),
        ({"query": "x", "k": 101}, "k"),
        ({"query": "x", "strategy": "deep"}, "strategy"),
        ({"query": "x", "mode": "legacy", "strategy": "deep:multi-hop"}, "strategy"),
        ({"query": "x", "mode": "fast"}, "mode"),
        ({"k": 5}, "query"),
        ({"query": "x", "colour": "red"}, "colour"),
        ({"query": "x", "max_tokens": "many"}, "max_tokens"),
    ],
)
def test_context_bad_input_is_a_400_naming_the_field(
    api: APIClient, workspace: Workspace, body: dict[str, Any], field: str
) -> None:
    response = api.post(url("acme", "context"), body, format="json")
    assert response.status_code == 400
    payload = response.json()
    assert payload["field"] == field
    assert payload["error"] and payload["detail"]


def test_context_max_tokens_below_the_smallest_anchor_is_a_400(
    api: APIClient, workspace: Workspace, make_memory: Make
) -> None:
    make_memory("Always answer in English, politely.", memory_type="anchor")  # 9 tokens
    response = api.post(url("acme", "context"), {"query": "x", "max_tokens": 5}, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == "max_tokens_below_anchor"
    assert api.post(url("acme", "context"), {"query": "x", "max_tokens": 9}, format="json").status_code == 200


def test_viewer_reads_context_search_and_settings_but_cannot_change_settings(
    viewer: Any, client_for: Callable[[Any], APIClient], workspace: Workspace, make_memory: Make
) -> None:
    make_memory("kafka consumer lag alert")
    client = client_for(viewer)
    assert client.post(url("acme", "context"), {"query": "kafka"}, format="json").status_code == 200
    assert client.post(url("acme", "search"), {"query": "kafka"}, format="json").status_code == 200
    assert client.get(url("acme", "settings")).status_code == 200
    response = client.patch(url("acme", "settings"), {"surfacing": {"mode": "router"}}, format="json")
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"


def test_non_members_get_404_everywhere(
    workspace: Workspace, make_memory: Make, make_user: Callable[..., Any], client_for: Callable[[Any], APIClient]
) -> None:
    memory = make_memory("kafka consumer lag alert")
    outsider = client_for(make_user("eve"))
    for response in (
        outsider.post(url("acme", "context"), {"query": "kafka"}, format="json"),
        outsider.post(url("acme", "search"), {"query": "kafka"}, format="json"),
        outsider.get(url("acme", "settings")),
        outsider.patch(url("acme", "settings"), {"surfacing": {"mode": "router"}}, format="json"),
        outsider.put(pin_url("acme", "s", memory.id), {}, format="json"),
        outsider.delete(pin_url("acme", "s", memory.id)),
    ):
        assert response.status_code == 404
        assert "kafka" not in response.content.decode()
    assert APIClient().post(url("acme", "context"), {"query": "kafka"}, format="json").status_code in (401, 403)


def test_search_returns_memories_with_scores(api: APIClient, workspace: Workspace, make_memory: Make) -> None:
    best = make_memory("redis eviction policy is allkeys-lru")
    make_memory("lunch menu")
    response = api.post(url("acme", "search"), {"query": "redis eviction", "k": 3}, format="json")
    assert response.status_code == 200
    (hit,) = response.json()["results"]
    assert hit["id"] == str(best.id)
    assert 0.0 < hit["score"] <= 1.0
    assert hit["activation"]["score"] == pytest.approx(0.5, abs=1e-3)
    assert api.post(url("acme", "search"), {"query": "redis", "k": 500}, format="json").json()["field"] == "k"


def test_settings_get_and_patch_echo_the_effective_values(api: APIClient, workspace: Workspace) -> None:
    body = api.get(url("acme", "settings")).json()
    assert body["surfacing"]["mode"] == "legacy"
    assert body["evolution"] == {
        "compression_enabled": False,
        "cycle_every_hours": 0.0,
        "dream_every_hours": 0.0,
        "evolve_at_ingest": True,
        "forget_after_days": 180.0,
        "forgotten_enabled": False,
    }

    response = api.patch(
        url("acme", "settings"),
        {
            "surfacing": {"mode": "router", "recency_time_constant_hours": 720},
            "evolution": {"compression_enabled": True},
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["surfacing"]["mode"] == "router"
    assert body["surfacing"]["recency_time_constant_hours"] == 720.0
    assert body["surfacing"]["pin_multiplier"] == 0.3
    assert body["evolution"]["compression_enabled"] is True
    assert api.get(url("acme", "settings")).json() == body
    echoed = api.post(url("acme", "context"), {"query": "anything"}, format="json").json()["settings"]
    assert echoed == body["surfacing"]

    reset = api.patch(url("acme", "settings"), {"surfacing": {"mode": None}}, format="json").json()
    assert reset["surfacing"]["mode"] == "legacy"
    assert reset["surfacing"]["recency_time_constant_hours"] == 720.0


def test_settings_patch_with_a_bad_value_is_a_400_and_changes_nothing(api: APIClient, workspace: Workspace) -> None:
    response = api.patch(
        url("acme", "settings"), {"surfacing": {"mode": "router", "pin_multiplier": -1}}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["field"] == "surfacing.pin_multiplier"
    assert api.get(url("acme", "settings")).json()["surfacing"]["mode"] == "legacy"
    assert api.patch(url("acme", "settings"), {"colour": {}}, format="json").json()["field"] == "colour"


def test_pin_put_and_delete(api: APIClient, workspace: Workspace, make_memory: Make) -> None:
    hit = make_memory("kafka consumer lag alert")
    pinned = make_memory("project requirements document")
    api.patch(url("acme", "settings"), {"surfacing": {"mode": "router"}}, format="json")

    response = api.put(pin_url("acme", "chat", pinned.id), {"weight": 2.0}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["weight"] == 2.0
    assert response.json()["memory_id"] == str(pinned.id)
    body = api.post(url("acme", "context"), {"session_id": "chat", "query": "kafka lag"}, format="json").json()
    assert [i["id"] for i in body["items"]] == [str(pinned.id), str(hit.id)]
    assert body["items"][0]["score_breakdown"]["session_pin_boost"] == pytest.approx(0.6)

    assert api.delete(pin_url("acme", "chat", pinned.id)).status_code == 204
    body = api.post(url("acme", "context"), {"session_id": "chat", "query": "kafka lag"}, format="json").json()
    assert [i["id"] for i in body["items"]] == [str(hit.id)]


def test_pin_input_errors(api: APIClient, workspace: Workspace, make_memory: Make) -> None:
    memory = make_memory("a")
    assert api.put(pin_url("acme", "chat", memory.id), {"weight": -1}, format="json").json()["field"] == "weight"
    assert api.put(pin_url("acme", "chat", memory.id), {"weight": "x"}, format="json").json()["field"] == "weight"
    assert api.put(pin_url("acme", "chat", "not-a-uuid"), {}, format="json").status_code == 400
    assert api.put(pin_url("acme", "chat", uuid.uuid4()), {}, format="json").status_code == 404


def test_a_session_id_is_a_workspaces_own_and_pins_never_leak(
    api: APIClient, workspace: Workspace, other_workspace: Workspace, make_memory: Make, user: Any
) -> None:
    memory_services.membership_set(workspace=other_workspace, user=user, role=Role.EDITOR)
    mine = make_memory("roadmap for the mobile app")
    theirs = make_memory("roadmap for the mobile app, other team", ws=other_workspace)
    assert api.put(pin_url("acme", "shared", mine.id), {}, format="json").status_code == 200

    # The same id in another workspace is another session: no 409 telling that it is in use elsewhere.
    response = api.put(pin_url("other", "shared", theirs.id), {}, format="json")
    assert response.status_code == 200, response.content
    assert api.delete(pin_url("other", "shared", theirs.id)).status_code == 204
    # A memory of another workspace through this workspace's URL is simply not found.
    assert api.put(pin_url("acme", "shared", theirs.id), {}, format="json").status_code == 404

    other = api.post(
        url("other", "context"), {"session_id": "shared", "query": "mobile roadmap", "mode": "router"}, format="json"
    ).json()
    assert [i["id"] for i in other["items"]] == [str(theirs.id)]
    mine_ctx = api.post(
        url("acme", "context"), {"session_id": "shared", "query": "mobile roadmap", "mode": "router"}, format="json"
    ).json()
    assert [i["id"] for i in mine_ctx["items"]] == [str(mine.id)]
    results = api.post(url("acme", "search"), {"query": "mobile roadmap"}, format="json").json()["results"]
    assert [r["id"] for r in results] == [str(mine.id)]


def test_context_query_count_is_bounded(
    api: APIClient,
    workspace: Workspace,
    graph: dict[str, Memory],
    make_memory: Make,
    django_assert_max_num_queries: Any,
) -> None:
    for i in range(30):
        make_memory(f"authentication note {i} about JWT", subject="auth")
    api.put(pin_url("acme", "s1", graph["balancer"].id), {}, format="json")
    body = {"session_id": "s1", "query": "why did we pick JWT?", "k": 20, "mode": "router", "explain": True}
    api.post(url("acme", "context"), body, format="json")  # builds the graph snapshot once
    # token, membership, anchors, pins, the full-text index's newest row (are its statistics the
    # workspace's?), lexical, candidate rows, graph generation, spread rows, details, anchor drift: 11 at
    # most, whatever the number of candidates. Without the graph walk: the spread rows go and the
    # generation check stays (co-retrieved partners), 9; a point query also looks up the entity memories
    # the query may name, 10.
    with django_assert_max_num_queries(11):
        response = api.post(url("acme", "context"), body, format="json")
    assert response.status_code == 200
    for strategy, most in (("fast:recency", 9), ("factual:point-query", 10)):
        with django_assert_max_num_queries(most):
            assert api.post(url("acme", "context"), {**body, "strategy": strategy}, format="json").status_code == 200
