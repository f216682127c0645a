"""Writes too large to embed inline store memories without a vector; the embed job gives them theirs.

EMBED_INLINE_MAX stands in for a slow model here: the hashing embedder is exact and fast, and the rule is
the same whichever model a workspace uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from evolution.locks import DatabaseJobLocks
from evolution.models import ScheduledJob
from evolution.scheduler import Scheduler, default_jobs
from memories import embedding_service, services
from memories.algorithms.embedding import from_bytes
from memories.embeddings import INLINE_DEFAULTS, default_embedder, inline_limit
from memories.inputs import MemoryInput
from memories.models import Memory, Workspace
from memories.selectors import lexical_search
from memories.vectorindex import vector_search

pytestmark = [pytest.mark.django_db, pytest.mark.api]

TEXTS = ["the billing service moved to Frankfurt", "Dana prefers dark roast coffee", "the cat is called Miso"]


@pytest.fixture
def inline_two(settings: Any) -> None:
    settings.EMBED_INLINE_MAX = 2


def create(workspace: Workspace, user: Any, texts: Sequence[str], **fields: Any) -> list[Memory]:
    items = [MemoryInput(content=text, **fields) for text in texts]
    return services.memories_create(workspace=workspace, actor=user, items=items)


def stored(memories: Sequence[Memory]) -> list[Memory]:
    by_id = Memory.objects.in_bulk([m.id for m in memories])
    return [by_id[m.id] for m in memories]


def vector_of(text: str) -> np.ndarray[Any, Any]:
    return default_embedder().embed([text])[0]


def nearest(workspace: Workspace, text: str) -> list[Any]:
    embedder = default_embedder()
    return [mid for mid, _ in vector_search(workspace=workspace, vector=vector_of(text), model=embedder.name)]


def test_minilm_embeds_a_few_memories_inline_and_leaves_a_bulk_write_to_the_job(settings: Any) -> None:
    settings.EMBED_INLINE_MAX = None

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

    assert inline_limit(Named("minilm")) == INLINE_DEFAULTS["minilm"] == 16  # type: ignore[arg-type]
    assert inline_limit(Named("hashing:256")) is None  # type: ignore[arg-type]
    settings.EMBED_INLINE_MAX = 0
    assert inline_limit(Named("hashing:256")) == 0  # type: ignore[arg-type]


def test_a_write_within_the_limit_is_embedded_at_once(workspace: Workspace, user: Any, inline_two: None) -> None:
    made = stored(create(workspace, user, TEXTS[:2]))
    assert all(m.embedding is not None and m.embedded_at is not None for m in made)
    assert not embedding_service.has_pending_vectors(workspace=workspace)


def test_a_larger_write_waits_for_the_job_and_is_found_by_words_meanwhile(
    workspace: Workspace, user: Any, inline_two: None
) -> None:
    generation = Workspace.objects.get(pk=workspace.pk).vector_generation
    made = stored(create(workspace, user, TEXTS))
    assert [(m.embedding, m.embedding_model, m.embedded_at) for m in made] == [(None, "", None)] * 3
    assert Workspace.objects.get(pk=workspace.pk).vector_generation == generation  # no vector written
    assert embedding_service.has_pending_vectors(workspace=workspace)
    assert made[1].id in [mid for mid, _ in lexical_search(workspace=workspace, query="dark roast", limit=5)]
    assert made[1].id not in nearest(workspace, TEXTS[1])

    result = embedding_service.embed_pending(workspace=workspace)

    assert (result.embedded, result.left, result.model) == (3, 0, default_embedder().name)
    after = stored(made)
    dim = default_embedder().dim
    for memory, text in zip(after, TEXTS, strict=True):
        assert memory.embedding_model == default_embedder().name and memory.embedded_at is not None
        np.testing.assert_allclose(from_bytes(memory.embedding, dim).reshape(-1), vector_of(text), atol=1e-6)
    assert Workspace.objects.get(pk=workspace.pk).vector_generation > generation
    assert nearest(workspace, TEXTS[1])[0] == made[1].id
    assert not embedding_service.has_pending_vectors(workspace=workspace)
    assert embedding_service.embed_pending(workspace=workspace).embedded == 0


def test_the_job_works_in_batches_within_its_budget_and_reports_what_is_left(
    workspace: Workspace, user: Any, settings: Any
) -> None:
    settings.EMBED_INLINE_MAX = 0
    create(workspace, user, [f"note number {n} about the roadmap" for n in range(7)])
    seen: list[tuple[int, int]] = []
    result = embedding_service.embed_pending(
        workspace=workspace, batch=3, progress=lambda p: seen.append((p.done, p.total))
    )
    assert seen == [(3, 7), (6, 7), (7, 7)] and (result.embedded, result.left) == (7, 0)
    create(workspace, user, ["one more note"])
    assert embedding_service.embed_pending(workspace=workspace, budget_seconds=0).as_dict()["left"] == 1


def test_a_memory_edited_while_its_vector_is_computed_keeps_the_vector_of_its_new_content(
    workspace: Workspace, user: Any, inline_two: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = create(workspace, user, TEXTS)
    real = embedding_service.compressed_originals

    def edit_meanwhile(**kwargs: Any) -> Any:
        monkeypatch.setattr(embedding_service, "compressed_originals", real)
        services.memory_update(
            workspace=workspace, memory=stored(made)[0], actor=user, changes={"content": "the cat sleeps all day"}
        )
        return real(**kwargs)

    monkeypatch.setattr(embedding_service, "compressed_originals", edit_meanwhile)
    result = embedding_service.embed_pending(workspace=workspace)
    assert (result.embedded, result.left) == (2, 0)
    edited = stored(made)[0]
    np.testing.assert_allclose(
        from_bytes(edited.embedding, default_embedder().dim).reshape(-1), vector_of("the cat sleeps all day"), atol=1e-6
    )


def test_a_replaced_preference_waits_with_its_new_content_and_gets_its_vector(
    workspace: Workspace, user: Any, settings: Any
) -> None:
    settings.EMBED_INLINE_MAX = 0
    (first,) = create(workspace, user, ["uses vim"], memory_type="preference", subject="editor")
    embedding_service.embed_pending(workspace=workspace)
    create(workspace, user, ["uses emacs"], memory_type="preference", subject="editor")
    holder = Memory.objects.get(id=first.id)
    assert (holder.content, holder.embedding, holder.embedded_at) == ("uses emacs", None, None)
    embedding_service.embed_pending(workspace=workspace)
    holder = Memory.objects.get(id=first.id)
    np.testing.assert_allclose(
        from_bytes(holder.embedding, default_embedder().dim).reshape(-1), vector_of("uses emacs"), atol=1e-6
    )


def test_the_scheduler_embeds_a_workspace_only_while_memories_wait(
    workspace: Workspace, other_workspace: Workspace, user: Any, inline_two: None
) -> None:
    clock: Callable[[], Any] = timezone.now
    jobs = [job for job in default_jobs() if job.name == "embed"]
    scheduler = Scheduler(worker="w1", now=clock, locks=DatabaseJobLocks(), jobs=jobs, lease=timedelta(seconds=60))
    assert scheduler.tick() == []
    made = create(workspace, user, TEXTS)
    (worked,) = scheduler.tick()
    assert (worked.workspace_id, worked.job, worked.status) == (workspace.pk, "embed", "ok")
    assert worked.stats["embedded"] == 3 and worked.stats["left"] == 0
    assert all(m.embedded_at is not None for m in stored(made))
    assert ScheduledJob.objects.get(workspace=workspace, job="embed").runs == 1
    assert scheduler.tick() == []  # nothing waits any more


@pytest.mark.django_db(transaction=True)
def test_a_deferred_write_wakes_the_embedded_worker_instead_of_waiting_for_its_next_check(
    workspace: Workspace, user: Any, inline_two: None, settings: Any
) -> None:
    import time

    from evolution import jobs

    settings.EVOLUTION_WORKER = "thread"
    settings.SCHEDULER_ENABLED = True
    settings.SCHEDULER_CHECK_SECONDS = 3600  # only the wake-up can bring the embed job round in time
    try:
        assert jobs.start_thread_worker()
        time.sleep(0.5)  # its first tick, with nothing waiting yet
        made = create(workspace, user, [f"imported line {k}" for k in range(5)])
        assert all(m.embedded_at is None for m in made)
        deadline = time.monotonic() + 20
        while embedding_service.has_pending_vectors(workspace=workspace) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not embedding_service.has_pending_vectors(workspace=workspace)
    finally:
        jobs.stop_thread_worker(timeout=10)
