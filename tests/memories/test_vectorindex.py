"""The workspace vector index: nearest memories, incremental catch-up, model and workspace isolation, files."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.db import connections, transaction
from django.utils import timezone

from memories import services
from memories.algorithms.embedding import to_bytes
from memories.algorithms.vectorindex import HnswEngine
from memories.embedding_service import vectors_touch
from memories.embeddings import default_embedder, embedder_for
from memories.inputs import MemoryInput
from memories.models import Memory, Workspace
from memories.vectorindex import (
    cached_indexes,
    vector_index,
    vector_index_clear,
    vector_index_settle,
    vector_search,
)

pytestmark = [pytest.mark.django_db, pytest.mark.api]

TOPICS = [
    "the deploy pipeline runs on fridays after the review",
    "kafka consumers lag when the partition count is too low",
    "grandma's apple pie needs cinnamon and a hot oven",
    "the tennis club meets on tuesday evenings at seven",
    "postgres vacuum settings for a write heavy table",
]


def fresh(workspace: Workspace) -> Workspace:
    """The workspace as the next request reads it (with its current vector generation)."""
    return Workspace.objects.get(pk=workspace.pk)


def fresh_memory(memory: Memory) -> Memory:
    return Memory.objects.get(id=memory.id)


def query(text: str) -> np.ndarray:
    return default_embedder().embed([text])[0]


def search(workspace: Workspace, text: str, limit: int = 10) -> list[tuple[Any, float]]:
    ws = fresh(workspace)
    return vector_search(workspace=ws, vector=query(text), model=embedder_for(ws).name, limit=limit)


def create(workspace: Workspace, user: Any, texts: list[str]) -> list[Memory]:
    return services.memories_create(workspace=workspace, actor=user, items=[MemoryInput(content=t) for t in texts])


def test_search_returns_the_nearest_memories_best_first(workspace: Workspace, user: Any) -> None:
    memories = create(workspace, user, TOPICS)
    hits = search(workspace, TOPICS[2])
    assert hits[0][0] == memories[2].id
    assert hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert {h[0] for h in hits} == {m.id for m in memories}


def test_a_current_index_answers_without_a_query(
    workspace: Workspace, user: Any, django_assert_num_queries: Callable[..., Any]
) -> None:
    create(workspace, user, TOPICS)
    ws = fresh(workspace)
    vector = query(TOPICS[0])
    vector_search(workspace=ws, vector=vector, model=embedder_for(ws).name)
    with django_assert_num_queries(0):
        vector_search(workspace=ws, vector=vector, model=embedder_for(ws).name)


def test_memories_written_after_the_build_are_caught_up_by_one_read_of_the_new_rows(
    workspace: Workspace, user: Any, django_assert_num_queries: Callable[..., Any]
) -> None:
    create(workspace, user, TOPICS * 20)
    search(workspace, "anything")
    ws = fresh(workspace)
    index = vector_index(workspace=ws, model=embedder_for(ws).name, dim=default_embedder().dim)
    assert (len(index), index.rows_read) == (100, 100)
    (late,) = create(workspace, user, ["a brand new memory about sailing boats"])
    ws = fresh(workspace)
    with django_assert_num_queries(1):
        hits = vector_search(workspace=ws, vector=query(late.content), model=embedder_for(ws).name, limit=1)
    assert hits[0][0] == late.id
    # The catch-up read the one new row, not the workspace again, into the same index.
    assert vector_index(workspace=ws, model=embedder_for(ws).name, dim=default_embedder().dim) is index
    assert (len(index), index.rows_read) == (101, 101)


def test_a_vector_written_by_a_host_whose_clock_lags_is_still_caught_up(workspace: Workspace, user: Any) -> None:
    create(workspace, user, TOPICS)
    search(workspace, "anything")
    # Another host's clock ran an hour ahead when it wrote last: stamps keep increasing from its stamp.
    ahead = timezone.now() + timedelta(hours=1)
    Workspace.objects.filter(pk=workspace.pk).update(vector_stamped_at=ahead)
    Memory.objects.filter(workspace=workspace).update(embedded_at=ahead)
    (late,) = create(workspace, user, ["written by a host with a slow clock"])
    assert fresh_memory(late).embedded_at == ahead + timedelta(microseconds=1)
    assert search(workspace, late.content, limit=1)[0][0] == late.id


def test_an_edit_that_reembeds_replaces_the_vector(workspace: Workspace, user: Any) -> None:
    memories = create(workspace, user, TOPICS)
    search(workspace, "anything")
    services.memory_update(
        workspace=fresh(workspace), memory=memories[0], actor=user, changes={"content": "sourdough starter feeding"}
    )
    hits = search(workspace, "sourdough starter feeding", limit=1)
    assert hits[0] == (memories[0].id, pytest.approx(1.0, abs=1e-5))
    old = dict(search(workspace, TOPICS[0], limit=5))
    assert old.get(memories[0].id, 0.0) < 0.5


def test_vectors_of_another_model_are_never_returned(workspace: Workspace, user: Any) -> None:
    memories = create(workspace, user, TOPICS)
    Memory.objects.filter(id=memories[1].id).update(embedding_model="hashing:128")
    assert memories[1].id not in {h[0] for h in search(workspace, TOPICS[1])}


def test_a_memory_moved_to_another_model_leaves_the_index_at_the_next_catch_up(workspace: Workspace, user: Any) -> None:
    memories = create(workspace, user, TOPICS)
    assert memories[1].id in {h[0] for h in search(workspace, TOPICS[1])}
    with transaction.atomic():
        stamp, _ = vectors_touch(workspace=workspace)
        Memory.objects.filter(id=memories[1].id).update(
            embedding=to_bytes(np.ones(128) / np.sqrt(128)), embedding_model="hashing:128", embedded_at=stamp
        )
    assert memories[1].id not in {h[0] for h in search(workspace, TOPICS[1])}


def test_another_workspace_is_never_returned(workspace: Workspace, other_workspace: Workspace, user: Any) -> None:
    mine = create(workspace, user, TOPICS[:2])
    theirs = create(other_workspace, user, TOPICS)
    assert {h[0] for h in search(workspace, TOPICS[3])} == {m.id for m in mine}
    assert {h[0] for h in search(other_workspace, TOPICS[3])} == {m.id for m in theirs}


def test_the_cache_keeps_the_most_recently_used_indexes(settings: Any, user: Any) -> None:
    settings.VECTOR_INDEX_CACHE = 2
    spaces = [services.workspace_create(owner=user, slug=f"ws{k}", name="w") for k in range(3)]
    for ws in spaces:
        create(ws, user, TOPICS[:1])
        search(ws, "x")
    dim = default_embedder().dim
    model = default_embedder().name
    assert cached_indexes() == [(spaces[1].pk, model, dim), (spaces[2].pk, model, dim)]


def test_a_large_index_is_hnsw_persisted_and_loaded_then_caught_up(
    settings: Any, tmp_path: Path, workspace: Workspace, user: Any
) -> None:
    settings.VECTOR_INDEX_EXACT_MAX = 50
    settings.VECTOR_INDEX_DIR = tmp_path
    memories = create(workspace, user, [f"{t} number {k}" for k in range(20) for t in TOPICS])
    # Found at once, while the graph is still being merged in the background.
    assert search(workspace, memories[7].content, limit=1)[0][0] == memories[7].id
    assert vector_index_settle(60)
    (path,) = tmp_path.iterdir()
    vector_index_clear()  # as a new process would start
    (late,) = create(workspace, user, ["a brand new memory about sailing boats"])
    assert search(workspace, late.content, limit=1)[0][0] == late.id
    ws = fresh(workspace)
    index = vector_index(workspace=ws, model=embedder_for(ws).name, dim=default_embedder().dim)
    assert isinstance(index.graph, HnswEngine)
    assert len(index) == 101
    # The new one went to the buffer, then into the graph in the background.
    assert vector_index_settle(60)
    assert (len(index.graph), index.pending) == (101, 0)
    # Loaded from the file: only the row stamped after its watermark was read.
    assert index.rows_read == 1
    assert path.exists()


def test_memories_deleted_while_a_file_was_on_disk_are_dropped_when_it_is_loaded(
    settings: Any, tmp_path: Path, workspace: Workspace, user: Any
) -> None:
    settings.VECTOR_INDEX_EXACT_MAX = 10
    settings.VECTOR_INDEX_DIR = tmp_path
    memories = create(workspace, user, [f"{t} {k}" for k in range(4) for t in TOPICS])
    search(workspace, "x")
    assert vector_index_settle(60)
    vector_index_clear()
    services.memory_delete_hard(workspace=workspace, memory=memories[3], actor=user)
    hits = search(workspace, memories[3].content, limit=20)
    assert memories[3].id not in {h[0] for h in hits}
    assert len(hits) == 19


def test_a_corrupt_index_file_is_rebuilt_from_the_database_with_a_log_line(
    settings: Any, tmp_path: Path, workspace: Workspace, user: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.VECTOR_INDEX_EXACT_MAX = 10
    settings.VECTOR_INDEX_DIR = tmp_path
    memories = create(workspace, user, [f"{t} {k}" for k in range(4) for t in TOPICS])
    search(workspace, "x")
    assert vector_index_settle(60)
    (path,) = tmp_path.iterdir()
    path.write_bytes(b"not an index")
    vector_index_clear()
    with caplog.at_level(logging.WARNING, logger="memories.vectorindex"):
        assert search(workspace, memories[3].content, limit=1)[0][0] == memories[3].id
    assert "rebuilt from the database" in caplog.text
    assert vector_index_settle(60)
    assert path.read_bytes() != b"not an index"


@pytest.mark.django_db(transaction=True)
def test_threads_racing_for_a_cold_index_build_it_once_and_get_the_same_answer(
    workspace: Workspace, user: Any, caplog: pytest.LogCaptureFixture
) -> None:
    memories = create(workspace, user, [f"{t} {k}" for k in range(10) for t in TOPICS])
    ws = fresh(workspace)
    vector = query(memories[12].content)
    results: list[list[tuple[Any, float]]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for _ in range(5):
                results.append(vector_search(workspace=ws, vector=vector, model=embedder_for(ws).name, limit=5))
        except BaseException as exc:  # reported by the assertion below, with the thread's error
            errors.append(exc)
        finally:
            connections.close_all()

    with caplog.at_level(logging.INFO, logger="memories.vectorindex"):
        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert len(results) == 20 and all(r == results[0] for r in results)
    assert results[0][0][0] == memories[12].id
    assert caplog.text.count("built:") == 1


def test_the_merger_stops_between_chunks_at_exit_and_takes_no_more_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """At interpreter exit (atexit) the merger finishes the chunk in hand and ends: a thread left inside the
    index's native code when the process exits is aborted by the C++ runtime (exit status 134)."""
    from memories import vectorindex

    merging = threading.Event()
    chunks: list[int] = []

    class SlowIndex:
        pending = True

        def merge(self, limit: int) -> int:
            chunks.append(limit)
            merging.set()
            threading.Event().wait(0.05)
            return limit

    merger = vectorindex._Merger()
    slot = vectorindex._Slot(index=SlowIndex())  # type: ignore[arg-type]
    monkeypatch.setattr(vectorindex._cache, "holds", lambda key, held: held is slot)
    merger.schedule((1, "m", 8), slot, Path("/nonexistent/index"))
    assert merging.wait(10)
    merger.stop(timeout=10)
    assert merger._thread is not None and not merger._thread.is_alive()
    done = len(chunks)
    merger.schedule((1, "m", 8), slot, Path("/nonexistent/index"))
    assert not merger._thread.is_alive() and len(chunks) == done
