"""The fast writes of memories.bulk store what Model.save stores.

Properties over generated field values (hypothesis), on every database the suite runs on: a memory
inserted by `bulk_insert` reads back, through the ORM and as raw columns, exactly like the same values
saved with `Model.save()`; so does a memory updated by `write_rows` against one updated by
`save(update_fields=...)`. Then the batching and key-form cases of `write_rows`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memories import bulk, services
from memories.bulk import bulk_insert, new_instance, write_rows
from memories.inputs import MemoryInput
from memories.models import Edge, EdgeType, Memory, MemoryScore, MemoryType, Status, Tier, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

# Any Unicode text UTF-8 can carry (astral planes included; no lone surrogate) but NUL, which PostgreSQL
# text and jsonb cannot hold.
text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=10,
)
offsets = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))
# Aware datetimes in any offset, half of them on a whole second (str() of those has no fraction).
moments = st.builds(
    lambda moment, whole: moment.replace(microsecond=0) if whole else moment,
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=offsets),
    st.booleans(),
)
# A UUID in each form callers hand over: the object, canonical text, upper case, 32 bare digits.
uuid_forms = st.builds(lambda u, form: [u, str(u), str(u).upper(), u.hex][form], st.uuids(), st.integers(0, 3))
counts = st.integers(0, 2**31 - 1)
MEMORY_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "memory_type": st.sampled_from(MemoryType.values),
    "content": text,
    "subject": text,
    "tags": st.lists(text, max_size=5),
    "metadata": st.dictionaries(text, json_values, max_size=5),
    "snapshots": st.lists(st.dictionaries(text, json_values, max_size=3), max_size=2),
    "confidence": st.floats(allow_nan=False),
    "status": st.sampled_from(Status.values),
    "tier": st.sampled_from(Tier.values),
    "pinned": st.booleans(),
    "activation_score": st.floats(allow_nan=False),
    "activation_last_boost_at": st.none() | moments,
    "access_count": counts,
    "last_accessed": st.none() | moments,
    "summarized_by": st.none() | uuid_forms,
    "superseded_by": st.none() | uuid_forms,
    "embedding": st.none() | st.binary(max_size=64),
    "embedded_at": st.none() | moments,
    "created_at": moments,
    "updated_at": moments,
    "valid_from": st.none() | moments,
    "retention_score": st.floats(allow_nan=False),
    "retrieval_profile": st.dictionaries(text, json_values, max_size=3),
}
memory_values = st.fixed_dictionaries(MEMORY_FIELDS)
# Fields an update writes, a subset of memory_values (scores included: they go to MemoryScore).
UPDATED = [
    "content",
    "tags",
    "metadata",
    "confidence",
    "access_count",
    "last_accessed",
    "summarized_by",
    "embedding",
    "retention_score",
    "retrieval_profile",
]
updates = st.fixed_dictionaries({name: MEMORY_FIELDS[name] for name in UPDATED})

# Every stored column but the primary key and search_indexed: on SQLite the fast insert writes the
# full-text rows itself and marks the memory so the trigger does not (tests/memories/test_fts.py).
COLUMNS = [f for f in Memory._meta.concrete_fields if not f.primary_key and f.attname != "search_indexed"]
FIELDS = [*(f.attname for f in COLUMNS), "score__retention_score", "score__retrieval_profile"]
ROWID_ORDER_MIN = bulk.ROWID_ORDER_MIN
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def stored(pk: uuid.UUID) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The memory as the ORM reads it back (scores included), and its raw columns as the driver returns them."""
    values = Memory.objects.filter(pk=pk).values(*FIELDS).get()
    meta_pk = Memory._meta.pk
    assert meta_pk is not None
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(qn(f.column) for f in COLUMNS)} FROM {qn(Memory._meta.db_table)} "
            f"WHERE {qn(meta_pk.column)} = %s",
            [meta_pk.get_db_prep_value(pk, connection)],
        )
        raw = cursor.fetchone()
    assert raw is not None
    # bytea comes back as a memoryview on PostgreSQL; compare the bytes.
    values["embedding"] = None if values["embedding"] is None else bytes(values["embedding"])
    return values, tuple(bytes(v) if isinstance(v, memoryview) else v for v in raw)


def saved_memory(workspace: Workspace, values: dict[str, Any]) -> Memory:
    """A memory saved by the ORM: its own fields, and its scores row given as `memory.score`."""
    memory = Memory(workspace_id=workspace.pk, **{k: v for k, v in values.items() if k not in Memory.SCORE_FIELDS})
    memory.score = MemoryScore(**{k: v for k, v in values.items() if k in Memory.SCORE_FIELDS})
    memory.save()
    return memory


@SETTINGS
@given(values=memory_values)
def test_a_memory_inserted_by_the_fast_path_reads_back_as_a_saved_one(
    workspace: Workspace, values: dict[str, Any]
) -> None:
    fast = new_instance(Memory, {"workspace_id": workspace.pk, **values})
    bulk_insert(Memory, [fast])
    saved = saved_memory(workspace, values)
    assert stored(fast.pk) == stored(saved.pk)


@SETTINGS
@given(start=memory_values, changes=updates, key_form=st.integers(0, 2), in_rowid_order=st.booleans())
def test_a_memory_updated_by_write_rows_reads_back_as_one_saved_with_update_fields(
    workspace: Workspace,
    monkeypatch: pytest.MonkeyPatch,
    start: dict[str, Any],
    changes: dict[str, Any],
    key_form: int,
    in_rowid_order: bool,
) -> None:
    # A write of one row takes the path of large writes too when the threshold is 1: by rowid on SQLite, as
    # one UPDATE over column arrays on PostgreSQL.
    monkeypatch.setattr(bulk, "ROWID_ORDER_MIN", 1 if in_rowid_order else ROWID_ORDER_MIN)
    monkeypatch.setattr(bulk, "PG_ARRAY_MIN", 1 if in_rowid_order else bulk.PG_ARRAY_MIN)
    fast, saved = (saved_memory(workspace, start) for _ in range(2))
    key = [str(fast.pk), fast.pk, str(fast.pk).upper()][key_form]
    assert write_rows(Memory, UPDATED, [(*(changes[name] for name in UPDATED), key)]) == 1
    for name, value in changes.items():
        setattr(saved.score if name in Memory.SCORE_FIELDS else saved, name, value)
    saved.save(update_fields=[n for n in UPDATED if n not in Memory.SCORE_FIELDS])
    saved.score.save(update_fields=[n for n in UPDATED if n in Memory.SCORE_FIELDS])
    assert stored(fast.pk) == stored(saved.pk)


def test_write_rows_stores_what_a_model_save_would(workspace: Workspace) -> None:
    m = Memory.objects.create(workspace=workspace, content="x")
    when = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    metadata = {"a": [1, 2.5, "é"], "b": {"c": None}}
    assert (
        write_rows(Memory, ["retention_score", "metadata", "last_accessed"], [(0.123456789, metadata, when, str(m.id))])
        == 1
    )
    m.refresh_from_db()
    assert m.score.retention_score == 0.123456789
    assert m.metadata == metadata
    assert m.last_accessed == when


def test_writes_convert_by_column_across_batches_whatever_form_the_ids_take(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "WRITE_BATCH", 2)
    memories = [Memory(workspace=workspace, content=f"m{k}") for k in range(5)]
    bulk_insert(Memory, memories)
    forms = [str(memories[0].id), memories[1].id, str(memories[2].id).upper(), memories[3].id.hex, str(memories[4].id)]
    rows = [(k / 10, {"k": k}, form) for k, form in enumerate(forms)]
    assert write_rows(Memory, ["retention_score", "metadata"], rows) == 5
    # A scores-only write, keys in every form, sorted as stored.
    scores = [(0.5 + k / 10, form) for k, form in enumerate(reversed(forms))]
    assert write_rows(Memory, ["retention_score"], scores) == 5
    got = {m.id: (m.score.retention_score, m.metadata) for m in Memory.objects.select_related("score")}
    assert [got[m.id] for m in memories] == [(0.5 + (4 - k) / 10, {"k": k}) for k in range(5)]
    with pytest.raises(ValueError):
        write_rows(Memory, ["metadata"], [({}, str(memories[0].id)), ({}, str(memories[1].id), "extra")])


def test_a_large_write_in_table_order_changes_exactly_the_rows_it_names(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "ROWID_ORDER_MIN", 2)
    memories = [Memory(workspace=workspace, content=f"m{k}") for k in range(6)]
    bulk_insert(Memory, memories)
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


def test_a_bulk_import_that_grows_the_memory_table_refreshes_its_planner_statistics(
    workspace: Workspace, user: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    """PostgreSQL: ANALYZE after commit once bulk inserts grew a table by a fifth (SQLite has no such step)."""
    monkeypatch.setattr(bulk, "_grown", {})
    items = [MemoryInput(content=f"imported turn {i} about kafka") for i in range(1200)]
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        services.memories_create(workspace=workspace, actor=user, items=items)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT reltuples FROM pg_class WHERE oid = 'memories_memory'::regclass")
            assert cursor.fetchone()[0] >= 1200
        assert len(callbacks) >= 2  # the memory and the scores table
    else:
        assert bulk._grown == {}
