"""Evolution runs as background jobs: queued by the API, claimed by exactly one worker, cancellable, one
applied run per workspace at a time, and taken over from a dead worker without loss or double application."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from evolution import jobs, runner
from evolution.models import EvolutionRun, RunStatus
from history.models import EvolutionRecord
from memories.models import Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

RUNS = "/api/v1/workspaces/acme/evolution/runs/"


@pytest.fixture
def external(settings: Any) -> None:
    """Nothing in this process works runs: they stay queued until a test claims them."""
    settings.EVOLUTION_WORKER = "external"


def old_episodes(kit: Any, n: int = 2) -> list[Memory]:
    return [
        kit.mem(
            f"an old episode {i}",
            memory_type="episodic",
            age_days=400,
            last_accessed=timezone.now() - timedelta(days=30),
        )
        for i in range(n)
    ]


def test_the_api_queues_a_run_and_answers_202_before_any_work(api: APIClient, kit: Any, external: None) -> None:
    old_episodes(kit)
    response = api.post(RUNS, {"evolvers": ["ExponentialDecay"], "dry_run": False}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "queued" and body["records_count"] == 0
    assert api.get(RUNS + body["run_id"] + "/").json()["status"] == "queued"
    assert not EvolutionRecord.objects.exists()


def test_a_worker_works_the_queued_run_to_the_end(api: APIClient, kit: Any, external: None) -> None:
    old_episodes(kit)
    run_id = api.post(RUNS, {"evolvers": ["ExponentialDecay"], "dry_run": False}, format="json").json()["run_id"]
    out = StringIO()
    call_command("run_workers", "--once", stdout=out)
    assert "worked 1 evolution run(s)" in out.getvalue()
    done = api.get(RUNS + run_id + "/").json()
    assert done["status"] == "completed" and done["records_count"] >= 1
    assert EvolutionRun.objects.get(pk=run_id).worker


def test_one_applied_run_at_a_time_per_workspace_while_previews_may_queue(
    api: APIClient, kit: Any, external: None, other_workspace: Workspace
) -> None:
    first = api.post(RUNS, {"dry_run": False}, format="json").json()["run_id"]
    refused = api.post(RUNS, {"dry_run": False}, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"] == "run_in_progress" and first in refused.json()["detail"]
    assert api.post(RUNS, {"dry_run": True}, format="json").status_code == 202
    # Another workspace's applied run is its own business.
    jobs.run_enqueue(workspace=other_workspace, actor=None, evolvers=None, dry_run=False)
    assert api.post(RUNS + first + "/cancel/").json()["status"] == "cancelled"
    assert api.post(RUNS, {"dry_run": False}, format="json").status_code == 202


def test_cancelling_a_queued_run_ends_it_and_a_finished_run_cannot_be_cancelled(
    api: APIClient, kit: Any, external: None
) -> None:
    old_episodes(kit)
    run_id = api.post(RUNS, {"evolvers": ["ExponentialDecay"], "dry_run": False}, format="json").json()["run_id"]
    cancelled = api.post(RUNS + run_id + "/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert jobs.work_available("w1") == 0
    again = api.post(RUNS + run_id + "/cancel/")
    assert again.status_code == 409 and again.json()["error"] == "run_finished"
    assert not EvolutionRecord.objects.exists()


def test_a_viewer_can_neither_start_nor_cancel_a_run(
    api: APIClient, viewer: Any, client_for: Callable[[Any], APIClient], external: None
) -> None:
    run_id = api.post(RUNS, {"dry_run": True}, format="json").json()["run_id"]
    client = client_for(viewer)
    assert client.post(RUNS, {"dry_run": True}, format="json").status_code == 403
    assert client.post(RUNS + run_id + "/cancel/").status_code == 403
    assert EvolutionRun.objects.get(pk=run_id).status == RunStatus.QUEUED


def test_another_workspace_run_is_not_found(api: APIClient, external: None, other_workspace: Workspace) -> None:
    theirs = jobs.run_enqueue(workspace=other_workspace, actor=None, evolvers=None, dry_run=True)
    assert api.post(RUNS + str(theirs.id) + "/cancel/").status_code == 404
    assert EvolutionRun.objects.get(pk=theirs.id).status == RunStatus.QUEUED


def test_exactly_one_of_two_workers_claims_a_run(kit: Any, external: None) -> None:
    run = jobs.run_enqueue(workspace=kit.workspace, actor=None, evolvers=["ExponentialDecay"], dry_run=True)
    first = jobs.claim(run.pk, "w1")
    second = jobs.claim(run.pk, "w2")
    assert first is not None and first.worker == "w1" and second is None
    assert jobs.claim(None, "w2") is None


def test_a_running_run_asked_to_stop_stops_before_its_next_evolver(kit: Any, external: None) -> None:
    old_episodes(kit)
    run = jobs.run_enqueue(
        workspace=kit.workspace, actor=None, evolvers=["ExponentialDecay", "RetrievalBasedStrengthening"], dry_run=False
    )
    claimed = jobs.claim(run.pk, "w1")
    assert claimed is not None
    jobs.run_cancel(workspace=kit.workspace, run=claimed, actor=None)
    done = jobs.work(claimed)
    assert done.status == RunStatus.CANCELLED and done.summary["evolvers"] == []
    assert not EvolutionRecord.objects.exists()


def test_a_dead_worker_run_is_taken_over_and_resumes_after_what_committed(kit: Any, external: None) -> None:
    """The first evolver committed (its summary entry with it), then the worker died: another worker takes
    the run once the lease ran out, skips that evolver and works the rest, so nothing is applied twice."""
    old_episodes(kit)
    run = jobs.run_enqueue(
        workspace=kit.workspace, actor=None, evolvers=["ExponentialDecay", "RetrievalBasedStrengthening"], dry_run=False
    )
    claimed = jobs.claim(run.pk, "dead")
    assert claimed is not None
    # What the dead worker managed: the first evolver only (its records and its summary entry committed).
    runner.cycle_run(run=claimed, names=["ExponentialDecay"], now=claimed.started_at)
    decay_records = EvolutionRecord.objects.filter(run=run).count()
    assert decay_records >= 1
    EvolutionRun.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, finished_at=None, heartbeat_at=timezone.now() - jobs.lease() - timedelta(seconds=1)
    )
    taken = jobs.claim(None, "alive")
    assert taken is not None and taken.pk == run.pk and taken.worker == "alive"
    done = jobs.work(taken)
    assert done.status == RunStatus.COMPLETED
    names = [entry["name"] for entry in done.summary["evolvers"]]
    assert names == ["ExponentialDecay", "RetrievalBasedStrengthening"]
    assert EvolutionRecord.objects.filter(run=run, evolver="ExponentialDecay").count() == decay_records


def test_a_live_worker_run_is_not_taken_over(kit: Any, external: None) -> None:
    run = jobs.run_enqueue(workspace=kit.workspace, actor=None, evolvers=["ExponentialDecay"], dry_run=True)
    assert jobs.claim(run.pk, "w1") is not None
    assert jobs.claim(None, "w2") is None


@pytest.mark.django_db(transaction=True)
def test_the_worker_thread_of_the_web_process_works_a_queued_run(kit: Any, settings: Any) -> None:
    settings.EVOLUTION_WORKER = "thread"
    old_episodes(kit)
    run = jobs.run_enqueue(workspace=kit.workspace, actor=None, evolvers=["ExponentialDecay"], dry_run=True)
    finished = threading.Event()
    for _ in range(600):
        run.refresh_from_db()
        if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            finished.set()
            break
        finished.wait(0.05)
    assert finished.is_set() and run.status == RunStatus.COMPLETED
    assert any(t.name == "evolution-worker" for t in threading.enumerate())
    jobs.stop_thread_worker(timeout=10)
    assert not any(t.name == "evolution-worker" for t in threading.enumerate())


# -- the per-workspace schedule ---------------------------------------------------------------------


def test_a_workspace_schedule_queues_one_applied_cycle_per_period(
    api: APIClient, kit: Any, external: None, other_workspace: Workspace
) -> None:
    """Set through the settings API; looked at twice (two workers) it queues once; due again a period
    later (the clock is passed in, so the test ages the workspace instead of waiting)."""
    patched = api.patch("/api/v1/workspaces/acme/settings/", {"evolution": {"cycle_every_hours": 6}}, format="json")
    assert patched.status_code == 200, patched.content
    start = timezone.now()
    (first,) = jobs.schedule_due(start)
    assert first.scheduled and not first.dry_run and first.status == RunStatus.QUEUED
    assert jobs.schedule_due(start) == []  # a second worker looking at the same time
    assert jobs.work_available("w1") == 1
    assert jobs.schedule_due(start + timedelta(hours=5)) == []
    (second,) = jobs.schedule_due(start + timedelta(hours=6, seconds=1))
    assert second.workspace_id == kit.workspace.pk
    assert not EvolutionRun.objects.filter(workspace=other_workspace).exists()


def test_a_schedule_waits_while_an_applied_run_is_open(api: APIClient, kit: Any, external: None) -> None:
    api.patch("/api/v1/workspaces/acme/settings/", {"evolution": {"cycle_every_hours": 1}}, format="json")
    jobs.run_enqueue(workspace=kit.workspace, actor=None, evolvers=None, dry_run=False)
    assert jobs.schedule_due() == []


@pytest.mark.parametrize("bad", [-1, "6", True, 10**6])
def test_a_schedule_outside_zero_to_a_year_of_hours_is_refused(
    api: APIClient, workspace: Workspace, bad: object
) -> None:
    response = api.patch("/api/v1/workspaces/acme/settings/", {"evolution": {"cycle_every_hours": bad}}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "evolution.cycle_every_hours"


def test_the_worker_threads_give_way_to_requests_on_a_busy_cpu(settings: Any) -> None:
    """A worker thread lowers its own priority only: the process's other threads (requests) keep theirs.
    (Linux, where the project runs and tests: a thread has a nice value of its own there.)"""
    assert sys.platform.startswith("linux"), "the worker threads' priority is a Linux thread's nice value"
    settings.EVOLUTION_WORKER_NICE = 5
    seen: dict[str, int] = {}

    def worker() -> None:
        before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        seen["applied"] = jobs.lower_priority()
        seen["delta"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) - before

    main_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["applied"] == seen["delta"] and 0 < seen["delta"] <= 5  # at most up to 19
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_before
    assert jobs.lower_priority(0) == 0
