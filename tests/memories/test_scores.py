"""MemoryScore: every memory has exactly one scores row, read and written explicitly as `memory.score`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import FieldDoesNotExist
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from memories import selectors, services
from memories.bulk import bulk_insert, new_instance
from memories.inputs import MemoryInput
from memories.models import Memory, MemoryScore, Workspace
from memories.selectors import MemoryFilters

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def scores() -> dict[uuid.UUID, tuple[int, float, dict[str, Any]]]:
    return {
        mid: (ws, retention, profile)
        for mid, ws, retention, profile in MemoryScore.objects.values_list(
            "memory_id", "workspace_id", "retention_score", "retrieval_profile"
        )
    }


def with_score(memory: Memory, **values: Any) -> Memory:
    memory.score = MemoryScore(**values)
    return memory


def test_every_way_of_creating_a_memory_gives_it_one_scores_row(workspace: Workspace, user: Any) -> None:
    bulk = [
        Memory(workspace=workspace, content="bulk"),
        with_score(Memory(workspace=workspace, content="b"), retention_score=0.5),
    ]
    bulk_insert(Memory, bulk)
    given = with_score(Memory(workspace=workspace, content="given"), retention_score=0.25, retrieval_profile={"n": 1})
    given.save()
    created = [
        Memory.objects.create(workspace=workspace, content="create"),
        given,
        services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="service")),
        *services.memories_create(
            workspace=workspace, actor=user, items=[MemoryInput(content=f"batch {k}") for k in range(3)]
        ),
        *bulk,
    ]
    saved = with_score(Memory(workspace=workspace, content="saved"), retention_score=0.75)
    saved.save()
    created.append(saved)
    rows = scores()
    assert set(rows) == {m.id for m in created} == set(Memory.objects.values_list("id", flat=True))
    assert {ws for ws, _, _ in rows.values()} == {workspace.pk}
    assert rows[created[1].id][1:] == (0.25, {"n": 1})
    assert rows[created[-2].id][1] == 0.5
    assert rows[saved.id][1] == 0.75
    assert rows[created[0].id][1:] == (1.0, {})


def test_the_fast_bulk_path_keeps_scores_given_to_new_instances(workspace: Workspace) -> None:
    memories = [
        new_instance(Memory, {"workspace_id": workspace.pk, "content": "fast", "retention_score": 0.125}),
        new_instance(Memory, {"workspace_id": workspace.pk, "content": "default"}),
    ]
    bulk_insert(Memory, memories)
    rows = scores()
    assert [rows[m.id][1] for m in memories] == [0.125, 1.0]
    with pytest.raises(TypeError, match="no field 'retention'"):
        new_instance(Memory, {"workspace_id": workspace.pk, "content": "typo", "retention": 0.5})


def test_a_memory_has_no_score_attributes_of_its_own_the_scores_row_is_read_and_saved_explicitly(
    make_memory: Callable[..., Memory], django_assert_num_queries: Any
) -> None:
    memory = make_memory("original")
    fresh = Memory.objects.get(id=memory.id)
    assert not hasattr(Memory, "retention_score") and not hasattr(Memory, "retrieval_profile")
    with django_assert_num_queries(1):  # `memory.score` is the reverse one-to-one: one read, then cached
        assert fresh.score.retention_score == 1.0
        assert fresh.score.retrieval_profile == {}
    fresh.score.retention_score = 0.3
    fresh.score.retrieval_profile = {"total": 2}
    fresh.content = "not saved"
    fresh.score.save()
    loaded = Memory.objects.select_related("score").get(id=memory.id)
    with django_assert_num_queries(0):
        assert (loaded.content, loaded.score.retention_score, loaded.score.retrieval_profile) == (
            "original",
            0.3,
            {"total": 2},
        )
    with pytest.raises(FieldDoesNotExist):  # a score is not a field of the memory
        Memory.objects.filter(id=memory.id).update(retention_score=0.1)


def test_django_s_bulk_create_is_refused_for_memories(workspace: Workspace) -> None:
    with pytest.raises(TypeError, match="bulk_insert"):
        Memory.objects.bulk_create([Memory(workspace=workspace, content="x")])
    assert not Memory.objects.exists() and not MemoryScore.objects.exists()


def test_bulk_writes_refuse_to_skip_conflicting_memories(workspace: Workspace) -> None:
    with pytest.raises(ValueError, match="does not skip conflicts"):
        bulk_insert(Memory, [Memory(workspace=workspace, content="x")], ignore_conflicts=True)
    assert not Memory.objects.exists() and not MemoryScore.objects.exists()


def test_deleting_memories_deletes_their_scores(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, _ = make_memory("a"), make_memory("b")
    kept = make_memory("kept", ws=other_workspace)
    a.delete()
    assert len(scores()) == 2
    workspace.delete()
    assert list(scores()) == [kept.id]


def test_sorting_by_retention_pages_every_memory_once(workspace: Workspace, other_workspace: Workspace) -> None:
    values = [0.5, 0.1, 0.9, 0.5, 0.3]
    for k, value in enumerate(values):
        with_score(Memory(workspace=workspace, content=f"m{k}"), retention_score=value).save()
    with_score(Memory(workspace=other_workspace, content="elsewhere"), retention_score=0.2).save()
    seen: list[float] = []
    cursor = None
    while True:
        page = selectors.memory_list(
            workspace=workspace, filters=MemoryFilters(), ordering="retention", cursor=cursor, limit=2
        )
        seen.extend(m.score.retention_score for m in page.results)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == sorted(values)


@pytest.mark.parametrize("ordering", ["retention", "-retention"])
def test_sorting_by_retention_walks_the_score_index(workspace: Workspace, ordering: str) -> None:
    queries: list[tuple[str, Any]] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        queries.append((sql, params))
        return execute(sql, params, many, context)

    for k in range(3):
        with_score(Memory(workspace=workspace, content=f"m{k}"), retention_score=k / 4).save()
    with connection.execute_wrapper(keep):
        first = selectors.memory_list(workspace=workspace, filters=MemoryFilters(), ordering=ordering, limit=1)
        selectors.memory_list(
            workspace=workspace, filters=MemoryFilters(), ordering=ordering, cursor=first.next_cursor, limit=1
        )
    pages = [(sql, params) for sql, params in queries if "ORDER BY" in sql]
    assert len(pages) == 2
    for sql, params in pages:  # the first page and one resumed from a cursor
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                # Three rows: without these the planner would rightly sort them instead of using an index.
                cursor.execute("SET LOCAL enable_sort = off")
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute(f"EXPLAIN {sql}", params)
            else:
                cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = " | ".join(str(row[-1] if connection.vendor == "sqlite" else row[0]) for row in cursor.fetchall())
        assert "score_ws_retention" in plan, plan
        assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_scores_out_and_back_without_losing_them(workspace: Workspace) -> None:
    a = with_score(Memory(workspace=workspace, content="a"), retention_score=0.25, retrieval_profile={"n": 3})
    a.save()
    b = Memory.objects.create(workspace=workspace, content="b")
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate([("memories", "0004_drop_redundant_fk_indexes")])
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, retention_score, retrieval_profile FROM memories_memory ORDER BY content")
            rows = [(str(mid), ret, prof) for mid, ret, prof in cursor.fetchall()]
        assert [(ret, prof if isinstance(prof, dict) else json.loads(prof)) for _, ret, prof in rows] == [
            (0.25, {"n": 3}),
            (1.0, {}),
        ]
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
    assert scores() == {a.id: (workspace.pk, 0.25, {"n": 3}), b.id: (workspace.pk, 1.0, {})}
