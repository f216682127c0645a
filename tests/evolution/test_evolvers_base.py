"""The registry, the update batches and the records evolvers share."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from core.errors import InvalidInput
from evolution.evolvers import base
from evolution.evolvers.base import (
    EVOLVERS,
    EvolutionResult,
    MemoryUpdates,
    default_cycle,
    register,
    resolve_names,
    save_records,
    update_records,
)
from history.models import EvolutionRecord, RecordLink
from memories.bulk import insert_rows
from memories.models import Edge, EdgeType, Memory, Workspace


def make_evolver(evolver_name: str) -> type[Any]:
    class Custom:
        name: ClassVar[str] = evolver_name

        def evolve(self, workspace: Workspace, *, dry_run: bool, run: Any, now: datetime) -> EvolutionResult:
            return EvolutionResult(evolver=self.name, dry_run=dry_run)

    return Custom


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "EVOLVERS", dict(EVOLVERS))
    monkeypatch.setattr(base, "_DEFAULT", list(base._DEFAULT))


def test_register_appends_in_cycle_order_and_named_only_evolvers_stay_out_of_the_default(
    isolated_registry: None,
) -> None:
    first = register(make_evolver("ZetaSweep"))
    register(make_evolver("OnDemand"), default=False)
    assert list(base.EVOLVERS)[-2:] == ["ZetaSweep", "OnDemand"]
    assert default_cycle()[-1] == "ZetaSweep"
    assert "OnDemand" not in default_cycle()
    assert register(first) is first
    assert resolve_names(["OnDemand", "zetasweepevolver"]) == ["ZetaSweep", "OnDemand"]


def test_a_second_class_under_a_taken_name_is_refused(isolated_registry: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(make_evolver("ExponentialDecay"))


def test_resolve_names_defaults_and_rejects_unknown_or_non_strings() -> None:
    assert resolve_names(None) == default_cycle()
    assert resolve_names([]) == default_cycle()
    assert resolve_names(["HebbianCoRetrieval", "hebbiancoretrieval"]) == ["HebbianCoRetrieval"]
    with pytest.raises(InvalidInput, match="'Nope'"):
        resolve_names(["Nope"])
    with pytest.raises(InvalidInput):
        resolve_names([3])  # type: ignore[list-item]


def test_memory_updates_keep_only_real_changes_and_normalise_ids() -> None:
    updates = MemoryUpdates("E", "decay", "summary")
    mid = uuid.uuid4()
    updates.add(mid, {"retention_score": (0.5, 0.5)}, "no change")
    updates.add(mid, {"retention_score": (0.5, 0.4), "status": ("active", "active")}, "one change")
    assert updates.ids == [str(mid)]
    assert updates.changes == [{"retention_score": (0.5, 0.4)}]
    assert len(updates) == 1


def test_update_records_chunk_and_encode(workspace: Workspace) -> None:
    updates = MemoryUpdates("E", "decay", "retention moved")
    ids = [str(uuid.uuid4()) for _ in range(5)]
    when = datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    for k, mid in enumerate(ids):
        updates.add(mid, {"retention_score": (1.0, k / 10), "last_accessed": (None, when)}, f"memory {k}")
    records = update_records(updates, workspace=workspace, run=None, dry_run=False, now=when, chunk=2)
    assert [len(r.input_ids) for r in records] == [2, 2, 1]
    assert records[0].reason == "retention moved (2 memories, part 1/3)"
    assert records[2].after[ids[4]] == {"retention_score": 0.4, "last_accessed": when.isoformat()}
    assert records[2].before[ids[4]] == {"retention_score": 1.0, "last_accessed": None}
    assert records[2].after["reasons"] == {ids[4]: "memory 4"}


@pytest.mark.django_db
@pytest.mark.api
def test_insert_rows_and_save_records_link_every_memory(workspace: Workspace) -> None:
    a = Memory.objects.create(workspace=workspace, content="a")
    b = Memory.objects.create(workspace=workspace, content="b")
    when = datetime(2025, 1, 2, tzinfo=UTC)
    insert_rows(
        Edge,
        ["workspace", "source", "target", "edge_type", "weight", "co_retrieval_count", "created_at", "metadata"],
        [(workspace.pk, str(a.id), b.id, EdgeType.CO_RETRIEVED, 1.0, 4, when, {})],
    )
    edge = Edge.objects.get()
    assert (edge.source_id, edge.target_id, edge.co_retrieval_count, edge.created_at) == (a.id, b.id, 4, when)
    record = EvolutionRecord(
        workspace=workspace,
        evolver="E",
        action="boost",
        input_ids=[str(a.id)],
        output_ids=[],
        before={str(b.id): {"retention_score": 1.0}, "edges": {}},
        after={},
    )
    (saved,) = save_records([record])
    assert saved.pk is not None
    assert set(RecordLink.objects.filter(record=saved).values_list("memory_id", flat=True)) == {a.id, b.id}


def test_memory_keys_are_the_canonical_ids_as_stored_in_order() -> None:
    ids = [uuid.uuid4() for _ in range(4)]
    canonical = [str(i) for i in ids]
    assert base._memory_keys(canonical) == [i.hex for i in ids]
    mixed = [canonical[0], "edges", canonical[1].upper(), "x" * 36, canonical[2], "reasons", ids[3].hex]
    assert base._memory_keys(mixed) == [ids[0].hex, ids[1].hex, ids[2].hex]
    broken = f"{canonical[0][:17]}\n{canonical[0][18:]}"
    assert len(broken) == 36
    assert base._memory_keys([broken, canonical[1]]) == [ids[1].hex]
    assert base._memory_keys([canonical[2], canonical[2].upper()]) == [ids[2].hex]
    assert base._memory_keys([]) == []


@pytest.mark.django_db
@pytest.mark.api
def test_save_records_links_each_memory_once_per_record(workspace: Workspace) -> None:
    a, b = sorted((Memory.objects.create(workspace=workspace, content=c) for c in "ab"), key=lambda m: m.id.hex)
    records = [
        EvolutionRecord(
            workspace=workspace,
            evolver="E",
            action="boost",
            input_ids=[str(a.id), str(b.id)],
            output_ids=[str(b.id)],
            before={str(a.id): {}, str(b.id).upper(): {}, "edges": {}},
            after={},
        )
        for _ in range(2)
    ]
    first, second = save_records(records)
    links = list(RecordLink.objects.order_by("memory_id", "record").values_list("memory_id", "record"))
    assert links == [(a.id, first.pk), (a.id, second.pk), (b.id, first.pk), (b.id, second.pk)]
