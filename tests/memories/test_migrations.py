"""Data migrations, run forwards and backwards on a real database."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = ("memories", "0003_workspace_graph_rewrites")
AFTER = ("memories", "0004_memory_embedding_table")


def _migrate(target: tuple[str, str]) -> object:
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    executor.loader.build_graph()
    return executor.loader.project_state([target]).apps


@pytest.mark.django_db(transaction=True)
def test_vectors_move_out_of_the_memory_row_and_back() -> None:
    old = _migrate(BEFORE)
    workspace = old.get_model("memories", "Workspace").objects.create(slug="mig", name="mig")
    memory_model = old.get_model("memories", "Memory")
    with_vector = memory_model.objects.create(id=uuid.uuid4(), workspace=workspace, content="a", embedding=b"\x01" * 16)
    without = memory_model.objects.create(id=uuid.uuid4(), workspace=workspace, content="b", embedding=None)
    try:
        new = _migrate(AFTER)
        stored = dict(new.get_model("memories", "MemoryEmbedding").objects.values_list("memory_id", "vector"))
        assert {k: bytes(v) for k, v in stored.items()} == {with_vector.id: b"\x01" * 16}
        assert not any(f.name == "embedding" for f in new.get_model("memories", "Memory")._meta.concrete_fields)

        back = _migrate(BEFORE)
        rows = dict(back.get_model("memories", "Memory").objects.values_list("id", "embedding"))
        assert {k: (bytes(v) if v is not None else None) for k, v in rows.items()} == {
            with_vector.id: b"\x01" * 16,
            without.id: None,
        }
    finally:
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
