"""Django admin: the changelists of the memory and evolution models render, filter and search."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from evolution.models import Proposal
from history.audit import record_build, records_save
from history.models import Action
from memories import services
from memories.models import EdgeType, Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


@pytest.fixture
def admin_client(db: None) -> Client:
    admin = get_user_model().objects.create_superuser(username="root", email="", password="pw")
    client = Client()
    client.force_login(admin)
    return client


@pytest.fixture
def story(
    workspace: Workspace, other_workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> dict[str, Any]:
    # Two workspaces: the admin hides a workspace filter with a single choice.
    jwt = make_memory("We picked JWT for the API", memory_type="decision", tier="hot")
    lunch = make_memory("Lunch is at noon", memory_type="fact")
    edge = services.edge_link(workspace=workspace, source=jwt, target=lunch, edge_type=EdgeType.RELATED)
    (record,) = records_save(
        [
            record_build(
                workspace=workspace,
                evolver="ExponentialDecay",
                action=Action.DECAY,
                reason="decayed after a quiet month",
                input_ids=[jwt.id],
            )
        ]
    )
    proposal = Proposal.objects.create(
        workspace=workspace, kind="summary", title="Summarise the auth thread", rationale="five related notes"
    )
    return {"jwt": jwt, "lunch": lunch, "edge": edge, "record": record, "proposal": proposal}


CHANGELISTS = [
    "/admin/memories/workspace/",
    "/admin/memories/memory/",
    "/admin/memories/edge/",
    "/admin/history/evolutionrecord/",
    "/admin/evolution/proposal/",
]


@pytest.mark.parametrize("url", CHANGELISTS)
def test_changelists_render_for_a_superuser(admin_client: Client, story: dict[str, Any], url: str) -> None:
    response = admin_client.get(url)
    assert response.status_code == 200
    assert b'id="result_list"' in response.content


@pytest.mark.parametrize("url", CHANGELISTS[1:])
def test_changelists_offer_filters(admin_client: Client, story: dict[str, Any], url: str) -> None:
    page = admin_client.get(url).content.decode()
    assert 'id="changelist-filter"' in page
    assert "By workspace" in page


@pytest.mark.parametrize("url", CHANGELISTS)
def test_changelists_are_closed_to_members_who_are_not_staff(user: Any, url: str) -> None:
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_memories_filter_by_type_status_tier_and_workspace(
    admin_client: Client, story: dict[str, Any], workspace: Workspace
) -> None:
    def shown(**params: str) -> tuple[bool, bool]:
        page = admin_client.get("/admin/memories/memory/", params).content.decode()
        return "We picked JWT" in page, "Lunch is at noon" in page

    assert shown(memory_type__exact="decision") == (True, False)
    assert shown(memory_type__exact="fact") == (False, True)
    assert shown(tier__exact="hot") == (True, False)
    assert shown(status__exact="active") == (True, True)
    assert shown(status__exact="archived") == (False, False)
    assert shown(workspace__id__exact=str(workspace.pk)) == (True, True)


def test_memories_are_searched_by_content(admin_client: Client, story: dict[str, Any]) -> None:
    page = admin_client.get("/admin/memories/memory/", {"q": "JWT"}).content.decode()
    assert "We picked JWT" in page
    assert "Lunch is at noon" not in page


def test_a_memory_change_page_shows_audit_fields_read_only(admin_client: Client, story: dict[str, Any]) -> None:
    jwt = story["jwt"]
    response = admin_client.get(f"/admin/memories/memory/{jwt.id}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'name="content"' in page
    for audit_field in ("origin", "activation_score", "replace_log", "created_at"):
        assert f'name="{audit_field}"' not in page
    assert 'name="embedding"' not in page


def test_evolution_records_cannot_be_added_or_edited_by_hand(admin_client: Client, story: dict[str, Any]) -> None:
    record = story["record"]
    assert admin_client.get("/admin/history/evolutionrecord/add/").status_code == 403
    page = admin_client.get(f"/admin/history/evolutionrecord/{record.pk}/change/").content.decode()
    assert "decayed after a quiet month" in page
    assert 'name="reason"' not in page


def test_edges_and_proposals_filter_by_type_and_status(admin_client: Client, story: dict[str, Any]) -> None:
    edges = admin_client.get("/admin/memories/edge/", {"edge_type__exact": "RELATED"})
    assert edges.status_code == 200 and "RELATED" in edges.content.decode()
    pending = admin_client.get("/admin/evolution/proposal/", {"status__exact": "pending"}).content.decode()
    rejected = admin_client.get("/admin/evolution/proposal/", {"status__exact": "rejected"}).content.decode()
    assert "Summarise the auth thread" in pending
    assert "Summarise the auth thread" not in rejected


def _counters(workspace: Workspace) -> tuple[int, int]:
    row = Workspace.objects.values_list("graph_generation", "graph_rewrites").get(pk=workspace.pk)
    return int(row[0]), int(row[1])


def test_editing_or_deleting_an_edge_by_hand_makes_graph_snapshots_rebuild(
    admin_client: Client, story: dict[str, Any], workspace: Workspace
) -> None:
    edge = story["edge"]
    generation, rewrites = _counters(workspace)
    response = admin_client.post(
        f"/admin/memories/edge/{edge.pk}/change/",
        {
            "workspace": workspace.pk,
            "source": str(edge.source_id),
            "target": str(edge.target_id),
            "edge_type": "RELATED",
            "weight": "3.5",
            "metadata": "{}",
        },
    )
    assert response.status_code == 302
    assert _counters(workspace) == (generation + 1, rewrites + 1)
    response = admin_client.post(f"/admin/memories/edge/{edge.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert _counters(workspace) == (generation + 2, rewrites + 2)


def test_deleting_memories_by_hand_makes_graph_snapshots_rebuild(
    admin_client: Client, story: dict[str, Any], workspace: Workspace
) -> None:
    generation, rewrites = _counters(workspace)
    response = admin_client.post(
        "/admin/memories/memory/",
        {"action": "delete_selected", "_selected_action": [str(story["lunch"].id)], "post": "yes"},
    )
    assert response.status_code == 302
    assert not Memory.objects.filter(pk=story["lunch"].pk).exists()
    assert _counters(workspace) == (generation + 1, rewrites + 1)


def test_workspace_graph_counters_are_read_only(
    admin_client: Client, story: dict[str, Any], workspace: Workspace
) -> None:
    page = admin_client.get(f"/admin/memories/workspace/{workspace.pk}/change/").content.decode()
    assert 'name="graph_generation"' not in page
    assert 'name="graph_rewrites"' not in page
