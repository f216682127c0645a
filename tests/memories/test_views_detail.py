"""The memory detail page and its actions: edit in place, charts, history, edges, graph, rehydrate, delete."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from history.models import Action, EvolutionRecord
from memories import services
from memories.inputs import MemoryInput
from memories.models import CompressionTier, Edge, Memory, RetrievalEvent, Role, Status, Workspace

# Also run on PostgreSQL by `make test`: the pages drive the bulk, revert and rehydrate services.
pytestmark = [pytest.mark.django_db, pytest.mark.api]


@pytest.fixture
def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(memory: Memory, suffix: str = "") -> str:
    return f"/w/acme/memories/{memory.id}/{suffix}"


@pytest.fixture
def linked(workspace: Workspace, make_memory: Callable[..., Memory]) -> tuple[Memory, list[Memory]]:
    """A decision with two neighbours of different edge types, and a second-hop memory."""
    center = make_memory("Decision: we picked JWT access tokens", memory_type="decision", origin="import:wiki")
    incident = make_memory("Incident: sticky sessions dropped at the load balancer", memory_type="event")
    rfc = make_memory("RFC 7519 defines JSON Web Token", memory_type="fact")
    far = make_memory("The load balancer is HAProxy 2.8", memory_type="fact")
    services.edge_link(workspace=workspace, source=center, target=incident, edge_type="DERIVED_FROM")
    services.edge_link(workspace=workspace, source=rfc, target=center, edge_type="RELATED", weight=0.5)
    services.edge_link(workspace=workspace, source=incident, target=far, edge_type="MENTIONS")
    return center, [incident, rfc, far]


def test_detail_shows_content_metadata_charts_edges_and_graph(
    browser: Client, linked: tuple[Memory, list[Memory]]
) -> None:
    center, _ = linked
    html = browser.get(url(center)).content.decode()
    assert "Decision: we picked JWT access tokens" in html
    assert "import:wiki" in html
    assert f'id="act-{center.id}"' in html
    # Decay projection: 90 daily points in one polyline.
    decay = re.search(r'<desc id="decay-d">.*?</svg>', html, re.S)
    assert decay is not None
    points = re.search(r'<polyline class="s-act" points="([^"]+)"', decay.group(0))
    assert points is not None and len(points.group(1).split()) == 90
    assert "Activation and retention over time" in html
    # Edges grouped by type, each with the neighbour's content and direction.
    derived = html.index(">DERIVED_FROM<")
    related = html.index(">RELATED<")
    assert derived < html.index("Incident: sticky sessions") < related < html.index("RFC 7519 defines")
    assert f'data-src="/w/acme/memories/{center.id}/graph.json"' in html
    assert "Delete permanently" in html


def test_detail_query_count_is_fixed(
    browser: Client, linked: tuple[Memory, list[Memory]], django_assert_num_queries: Any
) -> None:
    center, _ = linked
    # session, user, membership, navigation, pending proposals, memory, history, retrievals, edges.
    with django_assert_num_queries(9):
        browser.get(url(center))
    browser.post(url(center, "edit/"), {"content": "Decision: JWT with refresh tokens"})
    browser.post(url(center, "pin/"), {"pinned": "true"})
    now = timezone.now()
    RetrievalEvent.objects.bulk_create(
        RetrievalEvent(
            workspace=center.workspace,
            memory=center,
            result_set=center.id,
            rank=1,
            source="search",
            created_at=now - timedelta(hours=i),
        )
        for i in range(30)
    )
    with django_assert_num_queries(9):
        html = browser.get(url(center)).content.decode()
    assert "retrievals (30)" in html


def test_edit_in_place_swaps_the_content_and_history_and_makes_it_the_users(
    browser: Client, linked: tuple[Memory, list[Memory]]
) -> None:
    center, _ = linked
    form = browser.get(url(center, "edit/"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET="memory-content")
    assert form.content.decode().lstrip().startswith('<section id="memory-content"')
    assert "<textarea" in form.content.decode()
    response = browser.post(
        url(center, "edit/"),
        {"content": "Decision: JWT with rotating refresh tokens"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="memory-content",
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="memory-content"')
    assert '<section id="memory-history"' in html and 'hx-swap-oob="true"' in html
    assert "Decision: JWT with rotating refresh tokens" in html
    center.refresh_from_db()
    assert center.content == "Decision: JWT with rotating refresh tokens"
    assert center.origin == "user:alice"
    assert center.origin_tier == 1


def test_edit_without_javascript_is_a_full_page_round_trip(
    browser: Client, linked: tuple[Memory, list[Memory]]
) -> None:
    center, _ = linked
    assert browser.get(url(center, "edit/"))["Location"].endswith("?edit=1#memory-content")
    page = browser.get(url(center) + "?edit=1").content.decode()
    assert '<textarea name="content"' in page
    response = browser.post(url(center, "edit/"), {"content": "Edited without JS"})
    assert response.status_code == 302
    assert "Content saved." in browser.get(url(center)).content.decode()


def test_empty_edit_is_refused_with_the_reason(browser: Client, linked: tuple[Memory, list[Memory]]) -> None:
    center, _ = linked
    response = browser.post(
        url(center, "edit/"), {"content": "   "}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="memory-content"
    )
    assert response.status_code == 400
    assert "archive it instead" in response.content.decode()
    center.refresh_from_db()
    assert center.content.startswith("Decision")


def test_history_timeline_lists_records_newest_first_and_reverts_one(
    browser: Client, linked: tuple[Memory, list[Memory]]
) -> None:
    center, _ = linked
    browser.post(url(center, "edit/"), {"content": "first edit"})
    browser.post(url(center, "edit/"), {"content": "second edit"})
    html = browser.get(url(center)).content.decode()
    ids = [int(i) for i in re.findall(r'<li id="record-(\d+)"', html)]
    assert len(ids) == 2 and ids[0] > ids[1]
    assert "second edit" in html[html.index(f'id="record-{ids[0]}"') :]
    # Reverting the newest edit brings the first one back.
    response = browser.post(f"/w/acme/records/{ids[0]}/revert/", {"next": url(center)})
    assert response["Location"] == url(center)
    center.refresh_from_db()
    assert center.content == "first edit"
    html = browser.get(url(center)).content.decode()
    assert "reverted" in html[html.index(f'id="record-{ids[0]}"') :]


def test_history_chart_plots_recorded_values_and_retrieval_ticks(
    browser: Client, workspace: Workspace, linked: tuple[Memory, list[Memory]]
) -> None:
    from history import audit

    center, _ = linked
    now = timezone.now()
    audit.records_save(
        [
            audit.record_build(
                workspace=workspace,
                evolver="DecayEvolver",
                action="decay",
                reason="decay sweep",
                input_ids=[center.id],
                before={str(center.id): {"retention_score": 1.0}},
                after={str(center.id): {"retention_score": 0.8}},
                now=now - timedelta(days=3),
            )
        ]
    )
    RetrievalEvent.objects.create(
        workspace=workspace, memory=center, result_set=center.id, rank=2, source="search", query="why jwt"
    )
    html = browser.get(url(center)).content.decode()
    chart = html[html.index('<desc id="hist-d">') : html.index("</svg>", html.index('<desc id="hist-d">'))]
    assert chart.count('<line class="marker"') == 1
    assert "search #2" in chart and "why jwt" in chart
    assert "retention 0.80" in chart


def test_rehydrate_restores_the_full_snapshot_and_is_revertible(
    browser: Client, linked: tuple[Memory, list[Memory]]
) -> None:
    center, _ = linked
    full = center.content
    Memory.objects.filter(pk=center.pk).update(
        content="[compressed: 37 chars original]",
        compression_tier=CompressionTier.TOMBSTONE,
        snapshots=[
            {"tier": 0, "content": full, "at": "2026-01-01T00:00:00+00:00"},
            {"tier": 1, "content": "JWT picked", "at": "2026-02-01T00:00:00+00:00"},
        ],
    )
    html = browser.get(url(center)).content.decode()
    assert "Rehydrate to full content" in html
    assert "JWT picked" in html
    assert browser.post(url(center, "rehydrate/")).status_code == 302
    center.refresh_from_db()
    assert center.content == full
    assert center.compression_tier == CompressionTier.FULL
    assert center.snapshots == []
    record = EvolutionRecord.objects.get(action="rehydrate")
    browser.post(f"/w/acme/records/{record.pk}/revert/")
    center.refresh_from_db()
    assert center.compression_tier == CompressionTier.TOMBSTONE
    assert center.content == "[compressed: 37 chars original]"
    assert len(center.snapshots) == 2


def test_rehydrate_without_a_full_snapshot_explains_why(browser: Client, linked: tuple[Memory, list[Memory]]) -> None:
    center, _ = linked
    Memory.objects.filter(pk=center.pk).update(compression_tier=CompressionTier.SUMMARY, snapshots=[])
    assert "cannot be rehydrated" in browser.get(url(center)).content.decode()
    browser.post(url(center, "rehydrate/"))
    assert "Not rehydrated" in browser.get(url(center)).content.decode()


def test_hard_delete_needs_the_first_words_and_leaves_an_audit_entry(
    browser: Client, workspace: Workspace, linked: tuple[Memory, list[Memory]]
) -> None:
    center, _ = linked
    html = browser.get(url(center)).content.decode()
    assert '<strong class="phrase">Decision: we picked</strong>' in html
    wrong = browser.post(url(center, "delete/"), {"confirm_text": "Decision: we"})
    assert wrong.status_code == 400
    assert "exactly to delete" in wrong.content.decode()
    assert Memory.objects.filter(pk=center.pk).exists()
    right = browser.post(url(center, "delete/"), {"confirm_text": "  decision:   WE picked "})
    assert right["Location"] == "/w/acme/"
    assert not Memory.objects.filter(pk=center.pk).exists()
    record = EvolutionRecord.objects.get(workspace=workspace, action=Action.DELETE)
    assert record.input_ids == [str(center.id)]
    assert record.before["deleted"][str(center.id)]["content"] == "Decision: we picked JWT access tokens"


def test_graph_json_has_two_hops_as_cytoscape_elements(browser: Client, linked: tuple[Memory, list[Memory]]) -> None:
    center, (incident, rfc, far) = linked
    data = browser.get(url(center, "graph.json")).json()
    hops = {n["data"]["id"]: n["data"]["hops"] for n in data["nodes"]}
    assert hops == {str(center.id): 0, str(incident.id): 1, str(rfc.id): 1, str(far.id): 2}
    assert {(e["data"]["source"], e["data"]["target"], e["data"]["type"]) for e in data["edges"]} == {
        (str(center.id), str(incident.id), "DERIVED_FROM"),
        (str(rfc.id), str(center.id), "RELATED"),
        (str(incident.id), str(far.id), "MENTIONS"),
    }
    assert data["truncated"] is False


def test_graph_is_capped_and_says_so(browser: Client, workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    center = make_memory("hub")
    spokes = [make_memory(f"spoke {i}") for i in range(45)]
    Edge.objects.bulk_create(Edge(workspace=workspace, source=center, target=s, edge_type="RELATED") for s in spokes)
    data = browser.get(url(center, "graph.json")).json()
    assert len(data["nodes"]) == 40
    assert len(data["edges"]) == 39
    assert data["truncated"] is True


def test_archive_restore_and_pin_from_the_detail_page(browser: Client, linked: tuple[Memory, list[Memory]]) -> None:
    center, _ = linked
    assert browser.post(url(center, "archive/"))["Location"] == url(center)
    center.refresh_from_db()
    assert center.status == Status.ARCHIVED
    assert "Memory archived." in browser.get(url(center)).content.decode()
    browser.post(url(center, "restore/"))
    browser.post(url(center, "pin/"), {"pinned": "true"})
    center.refresh_from_db()
    assert center.status == Status.ACTIVE and center.pinned
    assert [r.action for r in EvolutionRecord.objects.order_by("pk")] == ["archive", "restore", "update"]


def test_archive_from_a_list_row_returns_the_row_partial(browser: Client, linked: tuple[Memory, list[Memory]]) -> None:
    center, _ = linked
    response = browser.post(url(center, "archive/"), HTTP_HX_REQUEST="true", HTTP_HX_TARGET=f"row-{center.id}")
    html = response.content.decode()
    assert html.lstrip().startswith(f'<tr id="row-{center.id}"')
    assert ">Restore<" in html


def test_create_form_saves_a_memory_written_by_the_user(browser: Client, workspace: Workspace) -> None:
    assert 'for="id_content"' in browser.get("/w/acme/memories/new/").content.decode()
    bad = browser.post("/w/acme/memories/new/", {"content": " ", "memory_type": "fact"})
    assert bad.status_code == 400
    response = browser.post(
        "/w/acme/memories/new/",
        {"content": "Dana prefers short answers", "memory_type": "preference", "tags": "dana, style, dana"},
    )
    memory = Memory.objects.get(workspace=workspace)
    assert response["Location"] == url(memory)
    assert memory.origin == "user:alice" and memory.origin_tier == 1
    assert memory.tags == ["dana", "style"]
    assert memory.memory_type == "preference"


def test_viewer_sees_everything_but_no_edit_controls_and_gets_403_on_writes(
    workspace: Workspace, member: Callable[[str], Any], linked: tuple[Memory, list[Memory]]
) -> None:
    center, _ = linked
    client = Client()
    client.force_login(member(Role.VIEWER))
    html = client.get(url(center)).content.decode()
    assert "Decision: we picked JWT" in html
    for control in ('id="edit-content"', "Delete permanently", ">Archive<", ">Revert<", ">Pin<"):
        assert control not in html
    for suffix, data in (
        ("edit/", {"content": "hijack"}),
        ("archive/", {}),
        ("pin/", {"pinned": "true"}),
        ("rehydrate/", {}),
        ("delete/", {"confirm_text": "Decision: we picked"}),
    ):
        assert client.post(url(center, suffix), data).status_code == 403, suffix
    assert client.get("/w/acme/memories/new/").status_code == 403
    center.refresh_from_db()
    assert center.content.startswith("Decision") and center.status == Status.ACTIVE


def test_memory_of_another_workspace_is_404(browser: Client, workspace: Workspace, other_workspace: Workspace) -> None:
    from memories.inputs import MemoryInput

    foreign = services.memory_create(workspace=other_workspace, actor=None, item=MemoryInput(content="secret"))
    assert browser.get(f"/w/acme/memories/{foreign.id}/").status_code == 404
    assert browser.get(f"/w/acme/memories/{foreign.id}/graph.json").status_code == 404
    assert browser.post(f"/w/acme/memories/{foreign.id}/archive/").status_code == 404


def test_a_hub_shows_its_first_200_edges_and_says_there_are_more(
    browser: Client, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    hub = make_memory("an entity mentioned everywhere", memory_type="entity")
    turns = services.memories_create(
        workspace=workspace, actor=None, items=[MemoryInput(content=f"turn {i}") for i in range(205)]
    )
    Edge.objects.bulk_create(Edge(workspace=workspace, source=t, target=hub, edge_type="MENTIONS") for t in turns)
    html = browser.get(url(hub)).content.decode()
    assert html.count('<span class="dir"') == 200
    assert "(first 200)" in html
    assert "More edges exist" in html
