"""The fast writes of memories.bulk: batching and key forms of `write_rows`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from memories import bulk
from memories.bulk import write_rows
from memories.models import Edge, EdgeType, Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def test_write_rows_stores_what_a_model_save_would(workspace: Workspace) -> None:
    m = Memory.objects.create(workspace=workspace, content="x")
    when = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    metadata = {"a": [1, 2.5, "é"], "b": {"c": None}}
    assert (
        write_rows(Memory, ["retention_score", "metadata", "last_accessed"], [(0.123456789, metadata, when, str(m.id))])
        == 1
    )
    m.refresh_from_db()
    assert m.retention_score == 0.123456789
    assert m.metadata == metadata
    assert m.last_accessed == when


def test_writes_convert_by_column_across_batches_whatever_form_the_ids_take(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "WRITE_BATCH", 2)
    memories = Memory.objects.bulk_create(Memory(workspace=workspace, content=f"m{k}") for k in range(5))
    forms = [str(memories[0].id), memories[1].id, str(memories[2].id).upper(), memories[3].id.hex, str(memories[4].id)]
    rows = [(k / 10, {"k": k}, form) for k, form in enumerate(forms)]
    assert write_rows(Memory, ["retention_score", "metadata"], rows) == 5
    # A scores-only write, keys in every form, sorted as stored.
    scores = [(0.5 + k / 10, form) for k, form in enumerate(reversed(forms))]
    assert write_rows(Memory, ["retention_score"], scores) == 5
    got = {m.id: (m.retention_score, m.metadata) for m in Memory.objects.select_related("score")}
    assert [got[m.id] for m in memories] == [(0.5 + (4 - k) / 10, {"k": k}) for k in range(5)]
    with pytest.raises(ValueError):
        write_rows(Memory, ["metadata"], [({}, str(memories[0].id)), ({}, str(memories[1].id), "extra")])


def test_a_large_write_in_table_order_changes_exactly_the_rows_it_names(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "ROWID_ORDER_MIN", 2)
    memories = Memory.objects.bulk_create(Memory(workspace=workspace, content=f"m{k}") for k in range(6))
    a, b = Edge.objects.bulk_create(
        Edge(workspace=workspace, source=memories[k], target=memories[k + 1], edge_type=EdgeType.CO_RETRIEVED)
        for k in range(2)
    )
    # Mixed id forms, an id that does not exist, and an order unrelated to the table's.
    rows = [(0.5, str(memories[4].id)), (0.25, memories[1].id), (0.75, str(uuid.uuid4())), (0.125, str(memories[0].id))]
    assert write_rows(Memory, ["retention_score"], rows) == 4
    assert write_rows(Edge, ["co_retrieval_count"], [(7, b.pk), (3, a.pk)]) == 2
    scores = dict(Memory.objects.values_list("id", "score__retention_score"))
    assert [scores[m.id] for m in memories] == [0.125, 0.25, 1.0, 1.0, 0.5, 1.0]
    assert dict(Edge.objects.values_list("id", "co_retrieval_count")) == {a.pk: 3, b.pk: 7}
