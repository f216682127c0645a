"""Writes: workspaces, memories (all-or-nothing, audited edits), hard deletes and edges."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from core.errors import Conflict, InvalidInput
from history.models import Action, EvolutionRecord, RecordLink
from memories import selectors, services
from memories.algorithms.sortkey import activation_sort_key
from memories.inputs import MemoryInput
from memories.models import Edge, EdgeType, Membership, Memory, MemoryType, Role, Status, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def generation(workspace: Workspace) -> int:
    return Workspace.objects.get(pk=workspace.pk).graph_generation


# -- workspaces -----------------------------------------------------------------------------------


def test_the_creator_of_a_workspace_becomes_its_owner(user: Any) -> None:
    workspace = services.workspace_create(owner=user, slug="team", name="Team")
    assert Membership.objects.get(workspace=workspace, user=user).role == Role.OWNER


def test_a_slug_taken_by_others_is_only_unavailable_and_creates_nothing(
    workspace: Workspace, make_user: Callable[..., Any]
) -> None:
    with pytest.raises(InvalidInput) as info:
        services.workspace_create(owner=make_user("bob"), slug="acme", name="Other Acme")
    assert (info.value.status_code, info.value.code, info.value.field) == (400, "slug_unavailable", "slug")
    assert Workspace.objects.count() == 1
    assert Membership.objects.count() == 1


def test_membership_set_changes_a_role_in_place(workspace: Workspace, make_user: Callable[..., Any]) -> None:
    bob = make_user("bob")
    services.membership_set(workspace=workspace, user=bob, role=Role.VIEWER)
    services.membership_set(workspace=workspace, user=bob, role=Role.EDITOR)
    assert list(Membership.objects.filter(user=bob).values_list("role", flat=True)) == [Role.EDITOR]


def test_membership_set_refuses_an_unknown_role(workspace: Workspace, make_user: Callable[..., Any]) -> None:
    with pytest.raises(InvalidInput) as info:
        services.membership_set(workspace=workspace, user=make_user("bob"), role="admin")
    assert info.value.field == "role"


# -- creating memories ----------------------------------------------------------------------------


def test_created_memories_carry_the_actor_as_origin(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="x"))
    assert memory.origin == "api:alice"
    assert memory.origin_tier == 1
    anonymous = services.memory_create(workspace=workspace, actor=None, item=MemoryInput(content="y"), channel="cli")
    assert anonymous.origin == "cli:"


def test_an_explicit_origin_decides_the_origin_tier(workspace: Workspace, user: Any) -> None:
    item = MemoryInput(content="derived", origin="evolver:Summary")
    memory = services.memory_create(workspace=workspace, actor=user, item=item)
    stored = Memory.objects.get(id=memory.id)
    assert (stored.origin, stored.origin_tier) == ("evolver:Summary", 2)


def test_imported_history_keeps_its_creation_time_and_decays_from_it(workspace: Workspace, user: Any) -> None:
    then = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="old", created_at=then))
    stored = Memory.objects.get(id=memory.id)
    assert stored.created_at == then
    assert stored.updated_at == then
    assert stored.activation_last_boost_at == then
    assert stored.activation_sort_key == pytest.approx(activation_sort_key(0.5, then, 720.0))


def test_every_field_of_the_input_is_stored(workspace: Workspace, user: Any) -> None:
    item = MemoryInput(
        content="We picked JWT",
        memory_type=MemoryType.DECISION,
        subject="api-auth",
        tags=("auth", "architecture"),
        confidence=0.9,
        tier="hot",
        status=Status.ARCHIVED,
        pinned=True,
        valid_from=datetime(2026, 1, 1, tzinfo=UTC),
        valid_to=datetime(2026, 6, 1, tzinfo=UTC),
        metadata={"ticket": "ATL-1", "nested": {"n": 1}},
    )
    memory = services.memory_create(workspace=workspace, actor=user, item=item)
    stored = Memory.objects.get(id=memory.id)
    assert (stored.content, stored.memory_type, stored.subject) == ("We picked JWT", "decision", "api-auth")
    assert stored.tags == ["auth", "architecture"]
    assert (stored.confidence, stored.tier, stored.status, stored.pinned) == (0.9, "hot", "archived", True)
    assert stored.valid_from == datetime(2026, 1, 1, tzinfo=UTC)
    assert stored.valid_to == datetime(2026, 6, 1, tzinfo=UTC)
    assert stored.metadata == {"ticket": "ATL-1", "nested": {"n": 1}}
    assert stored.embedding is not None


def test_bulk_created_memories_are_searchable_at_once(workspace: Workspace, user: Any) -> None:
    items = [MemoryInput(content=f"note {i} about kubernetes") for i in range(3)] + [MemoryInput(content="lunch")]
    created = services.memories_create(workspace=workspace, actor=user, items=items)
    hits = selectors.lexical_search(workspace=workspace, query="kubernetes", limit=10)
    assert {mid for mid, _ in hits} == {m.id for m in created[:3]}


def test_memories_create_is_all_or_nothing(workspace: Workspace, user: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_policy(ws: Workspace, memories: list[Memory], now: datetime) -> None:
        raise RuntimeError("policy failed after the insert")

    monkeypatch.setattr(services, "_write_policies", [failing_policy])
    with pytest.raises(RuntimeError):
        services.memories_create(
            workspace=workspace, actor=user, items=[MemoryInput(content=f"m{i}") for i in range(5)]
        )
    assert not Memory.objects.exists()
    assert selectors.lexical_search(workspace=workspace, query="m0", limit=5) == []


def test_write_policies_see_every_new_memory_once(
    workspace: Workspace, user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def policy(ws: Workspace, memories: list[Memory], now: datetime) -> None:
        assert ws == workspace
        seen.extend(m.content for m in memories)

    monkeypatch.setattr(services, "_write_policies", [policy])
    services.memories_create(workspace=workspace, actor=user, items=[MemoryInput(content=c) for c in "abc"])
    assert seen == ["a", "b", "c"]


# -- updating -------------------------------------------------------------------------------------


def test_a_user_edit_makes_the_content_theirs(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(
        workspace=workspace, actor=None, item=MemoryInput(content="derived", origin="evolver:Summary")
    )
    old_embedding = bytes(Memory.objects.get(id=memory.id).embedding or b"")
    services.memory_update(workspace=workspace, memory=memory, actor=user, changes={"content": "corrected by hand"})
    stored = Memory.objects.get(id=memory.id)
    assert stored.content == "corrected by hand"
    assert (stored.origin, stored.origin_tier, stored.version) == ("user:alice", 1, 2)
    assert bytes(stored.embedding or b"") != old_embedding


def test_an_edit_is_audited_with_the_exact_before_and_after(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="x", tags=("a",)))
    services.memory_update(
        workspace=workspace, memory=memory, actor=user, changes={"tags": ["a", "b"], "confidence": 0.4}
    )
    record = EvolutionRecord.objects.get(workspace=workspace)
    assert (record.evolver, record.action, record.actor) == ("user", Action.UPDATE, user)
    key = str(memory.id)
    assert record.before[key]["tags"] == ["a"] and record.after[key]["tags"] == ["a", "b"]
    assert record.before[key]["confidence"] == 1.0 and record.after[key]["confidence"] == 0.4
    assert "embedding" not in record.after[key]
    assert RecordLink.objects.filter(record=record, memory_id=memory.id).exists()


def test_an_edit_that_changes_nothing_writes_nothing(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="same"))
    before = Memory.objects.get(id=memory.id).updated_at
    services.memory_update(workspace=workspace, memory=memory, actor=user, changes={"content": "same"})
    assert not EvolutionRecord.objects.exists()
    assert Memory.objects.get(id=memory.id).updated_at == before


def test_lifecycle_states_cannot_be_set_by_hand(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="x"))
    for state in (Status.FORGOTTEN, Status.SUPERSEDED, Status.RESOLVED):
        with pytest.raises(InvalidInput) as info:
            services.memory_update(workspace=workspace, memory=memory, actor=user, changes={"status": state})
        assert info.value.field == "status"
    assert Memory.objects.get(id=memory.id).status == Status.ACTIVE


def test_a_goal_can_be_resolved_by_hand(workspace: Workspace, user: Any) -> None:
    goal = services.memory_create(
        workspace=workspace, actor=user, item=MemoryInput(content="ship it", memory_type=MemoryType.GOAL)
    )
    services.memory_update(workspace=workspace, memory=goal, actor=user, changes={"status": Status.RESOLVED})
    assert Memory.objects.get(id=goal.id).status == Status.RESOLVED


def test_fields_outside_the_editable_set_are_refused(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="x"))
    with pytest.raises(InvalidInput) as info:
        services.memory_update(workspace=workspace, memory=memory, actor=user, changes={"origin_tier": 3})
    assert info.value.field == "origin_tier"


def test_an_edit_cannot_end_validity_before_it_starts(workspace: Workspace, user: Any) -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="x", valid_from=start))
    with pytest.raises(InvalidInput) as info:
        services.memory_update(
            workspace=workspace, memory=memory, actor=user, changes={"valid_to": start - timedelta(days=1)}
        )
    assert info.value.field == "valid_to"
    assert Memory.objects.get(id=memory.id).valid_to is None


def test_archiving_is_audited_once_and_idempotent(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="x"))
    services.memory_archive(workspace=workspace, memory=memory, actor=user)
    services.memory_archive(workspace=workspace, memory=memory, actor=user)
    assert Memory.objects.get(id=memory.id).status == Status.ARCHIVED
    assert list(EvolutionRecord.objects.values_list("action", flat=True)) == [Action.ARCHIVE]


def test_restoring_an_archived_memory_is_recorded_as_a_restore(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="x"))
    services.memory_archive(workspace=workspace, memory=memory, actor=user)
    services.memory_update(workspace=workspace, memory=memory, actor=user, changes={"status": Status.ACTIVE})
    assert list(EvolutionRecord.objects.order_by("id").values_list("action", flat=True)) == [
        Action.ARCHIVE,
        Action.RESTORE,
    ]


# -- hard delete ----------------------------------------------------------------------------------


def test_a_hard_delete_keeps_the_content_in_the_audit_log(
    workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    memory = make_memory("the secret recipe", tags=("food",))
    other = make_memory("other")
    services.edge_link(workspace=workspace, source=memory, target=other, edge_type=EdgeType.RELATED)
    mid = memory.id
    services.memory_delete_hard(workspace=workspace, memory=memory, actor=user)
    assert not Memory.objects.filter(id=mid).exists()
    assert not Edge.objects.exists()
    # One audit row: the delete record keeps what was deleted, and who did it.
    record = EvolutionRecord.objects.get(workspace=workspace, action=Action.DELETE)
    assert record.actor == user
    assert record.input_ids == [str(mid)]
    assert record.before["deleted"][str(mid)]["content"] == "the secret recipe"
    assert record.before["deleted"][str(mid)]["tags"] == ["food"]
    assert RecordLink.objects.filter(record=record, memory_id=mid).exists()


def test_a_hard_delete_invalidates_graph_snapshots_only_when_edges_went(
    workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    lonely = make_memory("lonely")
    start = generation(workspace)
    services.memory_delete_hard(workspace=workspace, memory=lonely, actor=user)
    assert generation(workspace) == start
    a, b = make_memory("a"), make_memory("b")
    services.edge_link(workspace=workspace, source=b, target=a, edge_type=EdgeType.RELATED)
    linked = generation(workspace)
    services.memory_delete_hard(workspace=workspace, memory=a, actor=user)
    assert generation(workspace) == linked + 1


# -- edges ----------------------------------------------------------------------------------------


def test_linking_creates_an_edge_and_invalidates_snapshots(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b = make_memory("a"), make_memory("b")
    start = generation(workspace)
    edge = services.edge_link(workspace=workspace, source=a, target=b, edge_type=EdgeType.RELATED, weight=0.5)
    assert (edge.source_id, edge.target_id, edge.edge_type, edge.weight) == (a.id, b.id, "RELATED", 0.5)
    assert generation(workspace) == start + 1


def test_a_duplicate_edge_is_a_conflict_that_changes_nothing(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b = make_memory("a"), make_memory("b")
    services.edge_link(workspace=workspace, source=a, target=b, edge_type=EdgeType.RELATED)
    start = generation(workspace)
    with pytest.raises(Conflict) as info:
        services.edge_link(workspace=workspace, source=a, target=b, edge_type=EdgeType.RELATED, weight=9)
    assert (info.value.status_code, info.value.code) == (409, "edge_exists")
    assert list(Edge.objects.values_list("weight", flat=True)) == [1.0]
    assert generation(workspace) == start


def test_an_edge_cannot_join_a_memory_to_itself(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    a = make_memory("a")
    with pytest.raises(InvalidInput) as info:
        services.edge_link(workspace=workspace, source=a, target=a, edge_type=EdgeType.RELATED)
    assert info.value.field == "target"


def test_an_edge_cannot_cross_workspaces(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    mine, theirs = make_memory("mine"), make_memory("theirs", ws=other_workspace)
    with pytest.raises(InvalidInput):
        services.edge_link(workspace=workspace, source=mine, target=theirs, edge_type=EdgeType.RELATED)
    assert not Edge.objects.exists()


def test_bulk_linking_skips_existing_triples_and_bumps_the_generation_once(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c = make_memory("a"), make_memory("b"), make_memory("c")
    services.edge_link(workspace=workspace, source=a, target=b, edge_type=EdgeType.RELATED)
    start = generation(workspace)
    services.edges_bulk_link(
        workspace=workspace,
        edges=[
            Edge(workspace=workspace, source=a, target=b, edge_type=EdgeType.RELATED),
            Edge(workspace=workspace, source=b, target=c, edge_type=EdgeType.RELATED),
            Edge(workspace=workspace, source=b, target=c, edge_type=EdgeType.RELATED),
            Edge(workspace=workspace, source=c, target=a, edge_type=EdgeType.FOLLOWS),
        ],
    )
    assert Edge.objects.count() == 3
    assert generation(workspace) == start + 1
    services.edges_bulk_link(workspace=workspace, edges=[])
    assert generation(workspace) == start + 1


def test_new_memories_decay_from_their_creation(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="x"))
    assert memory.activation_last_boost_at is not None
    assert abs((timezone.now() - memory.activation_last_boost_at).total_seconds()) < 60
    assert math.isfinite(memory.activation_sort_key)


def test_a_long_username_still_fits_the_origin(workspace: Workspace, make_user: Callable[..., Any]) -> None:
    long_name = make_user("u" * 150)
    services.membership_set(workspace=workspace, user=long_name, role=Role.EDITOR)
    memory = services.memory_create(workspace=workspace, actor=long_name, item=MemoryInput(content="x"))
    services.memory_update(workspace=workspace, memory=memory, actor=long_name, changes={"content": "y"})
    stored = Memory.objects.get(id=memory.id)
    assert stored.origin.startswith("user:uuu")
    assert len(stored.origin) <= 120


def test_a_taken_slug_is_a_conflict_for_a_member(workspace: Workspace, user: Any) -> None:
    with pytest.raises(Conflict) as info:
        services.workspace_create(owner=user, slug="acme", name="Acme again")
    assert info.value.code == "slug_taken"
