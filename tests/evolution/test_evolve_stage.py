"""The write-time evolve stage: once an ingestion commits, a full working buffer is consolidated by a queued
run of EnhancedWorkingToEpisodic; below the threshold, for other types, when off or busy, nothing runs; a
failing stage never fails the ingestion."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from evolution import evolve_stage, jobs
from evolution.models import EvolutionRun, RunStatus
from memories import services
from memories.inputs import MemoryInput
from memories.models import Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def working(n: int, text: str = "deploy of the billing service on thursday") -> list[MemoryInput]:
    return [MemoryInput(content=f"{text} step {k}", memory_type="working") for k in range(n)]


def ingest(workspace: Workspace, user: Any, items: list[MemoryInput], capture: Any) -> list[Memory]:
    with capture(execute=True):
        return services.memories_create(workspace=workspace, actor=user, items=items)


def buffer(workspace: Workspace) -> list[Memory]:
    return list(Memory.objects.filter(workspace=workspace, memory_type="working", status="active"))


def test_a_full_working_buffer_is_consolidated_as_the_last_stage_of_ingestion(
    api: APIClient, workspace: Workspace, django_capture_on_commit_callbacks: Any
) -> None:
    # 40 fresh items of ~45 characters: the adaptive threshold is int(40 * (1 - 0.3 * (0.45 + 1) / 2)) = 31.
    body = [
        {"content": f"deploy of the billing service on thursday step {k}", "memory_type": "working"} for k in range(40)
    ]
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/workspaces/acme/memories/bulk/", {"items": body}, format="json")
    assert response.status_code == 201, response.content
    (run,) = EvolutionRun.objects.filter(workspace=workspace)
    assert run.evolvers == ["EnhancedWorkingToEpisodic"] and run.status == RunStatus.COMPLETED and not run.dry_run
    assert buffer(workspace) == []
    (episode,) = Memory.objects.filter(workspace=workspace, memory_type="episodic")
    assert episode.origin == "evolver:EnhancedWorkingToEpisodic"


def test_a_buffer_below_its_threshold_is_left_to_grow(
    workspace: Workspace, user: Any, django_capture_on_commit_callbacks: Any
) -> None:
    ingest(workspace, user, working(9), django_capture_on_commit_callbacks)
    ingest(workspace, user, working(20), django_capture_on_commit_callbacks)
    assert not EvolutionRun.objects.exists()
    assert len(buffer(workspace)) == 29
    # The item that fills it (threshold 31 for this buffer) sets the stage off.
    ingest(workspace, user, working(2), django_capture_on_commit_callbacks)
    assert EvolutionRun.objects.count() == 1 and buffer(workspace) == []


def test_a_batch_without_working_memories_costs_the_stage_no_query(
    workspace: Workspace, django_assert_num_queries: Any
) -> None:
    rows = [Memory(workspace=workspace, content="a fact", memory_type="fact") for _ in range(5000)]
    with django_assert_num_queries(0):
        assert evolve_stage.evolve_stage(workspace, rows, timezone.now()) is None


def test_a_working_batch_costs_one_query_while_the_buffer_is_not_full(
    workspace: Workspace, user: Any, django_assert_num_queries: Any
) -> None:
    rows = services.memories_create(workspace=workspace, actor=user, items=working(12))
    with django_assert_num_queries(1):
        assert evolve_stage.evolve_stage(workspace, rows, timezone.now()) is None


def test_the_stage_is_a_workspace_setting(
    workspace: Workspace, user: Any, django_capture_on_commit_callbacks: Any
) -> None:
    workspace.evolution_settings = {"evolve_at_ingest": False}
    workspace.save()
    ingest(workspace, user, working(40), django_capture_on_commit_callbacks)
    assert not EvolutionRun.objects.exists() and len(buffer(workspace)) == 40


def test_an_open_applied_run_leaves_the_buffer_to_it(
    workspace: Workspace, user: Any, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    settings.EVOLUTION_WORKER = "external"
    busy = jobs.run_enqueue(workspace=workspace, actor=user, evolvers=None, dry_run=False)
    created = ingest(workspace, user, working(40), django_capture_on_commit_callbacks)
    assert len(created) == 40
    assert list(EvolutionRun.objects.all()) == [busy]


def test_a_failing_stage_never_fails_the_committed_ingestion(
    workspace: Workspace,
    user: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(**_: Any) -> None:
        raise RuntimeError("queue down")

    monkeypatch.setattr(jobs, "run_enqueue", broken)
    with caplog.at_level(logging.ERROR):
        created = ingest(workspace, user, working(40), django_capture_on_commit_callbacks)
    assert len(created) == 40 and len(buffer(workspace)) == 40
    assert "queue down" in caplog.text
