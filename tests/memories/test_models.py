"""The stored shape: defaults, constraints, cascades and the small derived properties of the models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from memories import services
from memories.inputs import MemoryInput
from memories.models import (
    CompressionTier,
    Edge,
    EdgeType,
    Membership,
    Memory,
    MemoryType,
    RetrievalEvent,
    Role,
    Status,
    Tier,
    Workspace,
)

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def test_a_new_memory_starts_warm_full_and_half_active(workspace: Workspace) -> None:
    memory = Memory.objects.create(workspace=workspace, content="hello")
    memory.refresh_from_db()
    assert memory.memory_type == MemoryType.SEMANTIC
    assert memory.status == Status.ACTIVE
    assert memory.tier == Tier.WARM
    assert memory.compression_tier == CompressionTier.FULL
    assert memory.activation_score == 0.5
    assert memory.activation_half_life_hours == 720.0
    assert memory.activation_boost_count == 0
    assert memory.tags == [] and memory.metadata == {} and memory.conflicts_with == []
    assert memory.origin_tier == 1 and memory.is_user_authored


def test_memory_str_shows_type_and_the_start_of_the_content(workspace: Workspace) -> None:
    memory = Memory(workspace=workspace, memory_type=MemoryType.DECISION, content="x" * 100)
    assert str(memory) == "decision: " + "x" * 60


def test_memory_absolute_url_is_its_page_in_the_workspace(workspace: Workspace) -> None:
    memory = Memory.objects.create(workspace=workspace, content="hello")
    assert memory.get_absolute_url() == f"/w/acme/memories/{memory.id}/"
    assert workspace.get_absolute_url() == "/w/acme/"
    assert str(workspace) == "acme"


def test_an_evolver_derived_memory_is_not_user_authored(workspace: Workspace) -> None:
    memory = Memory(workspace=workspace, content="derived", origin="evolver:Summary", origin_tier=2)
    assert not memory.is_user_authored


def test_only_owners_and_editors_can_edit(workspace: Workspace, member: Callable[[str], Any]) -> None:
    roles = {role: Membership.objects.get(workspace=workspace, user=member(role)) for role in Role.values}
    assert roles[Role.OWNER].can_edit
    assert roles[Role.EDITOR].can_edit
    assert not roles[Role.VIEWER].can_edit


def test_a_user_has_one_membership_per_workspace(workspace: Workspace, user: Any) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(workspace=workspace, user=user, role=Role.VIEWER)


def test_workspace_slugs_are_unique(workspace: Workspace) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Workspace.objects.create(slug="acme", name="Another Acme")


def test_two_edges_of_the_same_type_between_the_same_memories_are_refused(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b = make_memory("a"), make_memory("b")
    Edge.objects.create(workspace=workspace, source=a, target=b, edge_type=EdgeType.RELATED)
    Edge.objects.create(workspace=workspace, source=a, target=b, edge_type=EdgeType.MENTIONS)
    Edge.objects.create(workspace=workspace, source=b, target=a, edge_type=EdgeType.RELATED)
    with pytest.raises(IntegrityError), transaction.atomic():
        Edge.objects.create(workspace=workspace, source=a, target=b, edge_type=EdgeType.RELATED)
    assert Edge.objects.count() == 3


def test_deleting_a_memory_removes_its_edges_and_retrieval_events(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c = make_memory("a"), make_memory("b"), make_memory("c")
    Edge.objects.create(workspace=workspace, source=a, target=b)
    Edge.objects.create(workspace=workspace, source=c, target=a)
    Edge.objects.create(workspace=workspace, source=b, target=c)
    RetrievalEvent.objects.create(
        workspace=workspace, memory=a, result_set="00000000-0000-0000-0000-000000000001", rank=1, source="get"
    )
    a.delete()
    assert list(Edge.objects.values_list("source_id", "target_id")) == [(b.id, c.id)]
    assert not RetrievalEvent.objects.exists()


def test_deleting_a_workspace_removes_everything_in_it(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b = make_memory("a"), make_memory("b")
    kept = make_memory("kept", ws=other_workspace)
    Edge.objects.create(workspace=workspace, source=a, target=b)
    workspace.delete()
    assert list(Memory.objects.all()) == [kept]
    assert not Edge.objects.exists()
    assert not Membership.objects.filter(workspace_id=workspace.pk).exists()


def test_json_fields_round_trip_nested_values(workspace: Workspace) -> None:
    metadata = {"ref": "t-1", "nested": {"list": [1, 2.5, None, "ü"], "flag": True}}
    memory = Memory.objects.create(workspace=workspace, content="x", tags=["a", "b"], metadata=metadata)
    fresh = Memory.objects.get(id=memory.id)
    assert fresh.metadata == metadata
    assert fresh.tags == ["a", "b"]


def test_embedding_is_stored_as_bytes(workspace: Workspace) -> None:
    memory = services.memory_create(workspace=workspace, actor=None, item=MemoryInput(content="vector me"))
    fresh = Memory.objects.get(id=memory.id)
    assert isinstance(fresh.embedding, bytes | memoryview)
    assert len(bytes(fresh.embedding)) > 0
    assert len(bytes(fresh.embedding)) % 4 == 0


# -- indexes --------------------------------------------------------------------------------------

# (table, column, composite index): the single-column index of the column was dropped because the composite
# index leads with it.
REDUNDANT_FK_INDEXES = [
    ("memories_edge", "workspace_id", "edge_ws_type"),
    ("memories_retrievalevent", "memory_id", "ret_mem_created"),
    ("memories_retrievalevent", "workspace_id", "ret_ws_created"),
    ("evolution_evolutionrecord", "run_id", "rec_run_id"),
    ("evolution_evolutionrecord", "workspace_id", "rec_ws_time"),
    ("evolution_evolutionrun", "workspace_id", "run_ws_started"),
    ("evolution_outcome", "workspace_id", "outcome_ws_created"),
    ("evolution_proposal", "workspace_id", "prop_ws_status"),
]


def _indexes(table: str) -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
    return {name: list(c["columns"]) for name, c in found.items() if c["index"] and not c["unique"]}


@pytest.mark.parametrize(("table", "column", "composite"), REDUNDANT_FK_INDEXES)
def test_a_key_that_leads_a_composite_index_has_no_index_of_its_own(table: str, column: str, composite: str) -> None:
    indexes = _indexes(table)
    assert indexes[composite][0] == column
    assert [column] not in indexes.values()


@pytest.mark.django_db(transaction=True)
def test_the_index_migrations_drop_and_restore_only_the_single_column_indexes() -> None:
    before = {table: _indexes(table) for table in {t for t, _, _ in REDUNDANT_FK_INDEXES}}
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate([("evolution", "0003_record_link_rowid_key"), ("memories", "0003_workspace_graph_rewrites")])
        restored = {table: _indexes(table) for table in before}
        for table, column, composite in REDUNDANT_FK_INDEXES:
            assert [column] in restored[table].values(), (table, column)
            assert restored[table][composite] == before[table][composite]
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
    assert {table: _indexes(table) for table in before} == before
