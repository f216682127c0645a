"""A large run's revert is a background job: the request checks it and queues it (202), one worker claims it
and undoes every record as the person who asked, a dead worker's revert is taken over, and a small run is
still reverted in the request (200, the same answer as ever)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from core.errors import Conflict
from evolution import jobs, services
from evolution.models import EvolutionRun, RunStatus
from history.models import EvolutionRecord
from memories import services as memory_services
from memories.models import Memory
from tests.evolution.test_services import busy_workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

RUNS = "/api/v1/workspaces/acme/evolution/runs/"


@pytest.fixture
def background(settings: Any) -> None:
    """Every revert of more than one record goes to a worker, and no worker works in this process: a queued
    revert stays queued until the test works it."""
    settings.EVOLUTION_REVERT_INLINE_RECORDS = 1
    settings.EVOLUTION_WORKER = "external"


def applied_run(kit: Any) -> tuple[EvolutionRun, dict[Any, Any], dict[Any, Any]]:
    """An applied cycle of many records, and the memory and edge rows as they were before it."""
    busy_workspace(kit)
    memories, edges = kit.memory_rows(observations=False), kit.edge_rows(observations=False)
    run = kit.run()
    assert EvolutionRecord.objects.filter(run=run).count() > 3
    assert kit.memory_rows(observations=False) != memories
    return run, memories, edges


def edit_the_episode(kit: Any) -> None:
    """A person edits the episode the run's first evolver created: the record that created it cannot be
    undone any more (revert_conflict), so neither can the run, all or nothing."""
    episode = Memory.objects.get(memory_type="episodic", origin__startswith="evolver:")
    memory_services.memory_update(
        workspace=kit.workspace, memory=episode, actor=kit.user, changes={"content": "edited by hand"}
    )


def undone(run: EvolutionRun) -> int:
    return EvolutionRecord.objects.filter(run=run, reverted_at__isnull=False).count()


def test_a_small_run_is_reverted_in_the_request_with_the_answer_it_always_had(
    api: APIClient, kit: Any, settings: Any
) -> None:
    run, memories, edges = applied_run(kit)
    records = sorted(EvolutionRecord.objects.filter(run=run).values_list("id", flat=True))
    settings.EVOLUTION_REVERT_INLINE_RECORDS = len(records)
    settings.EVOLUTION_WORKER = "external"  # nobody else could have done it
    response = api.post(f"{RUNS}{run.id}/revert/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"run_id", "status", "reverted_records", "revert_records"}
    assert body["run_id"] == str(run.id) and body["status"] == "reverted"
    assert sorted(body["reverted_records"]) == records
    assert len(body["revert_records"]) == len(records)
    assert kit.memory_rows(observations=False) == memories
    assert kit.edge_rows(observations=False) == edges
    run.refresh_from_db()
    assert run.status == RunStatus.REVERTED and run.revert_state == "reverted"
    assert run.summary["revert"]["requested_by"] == kit.user.pk


def test_a_large_run_is_queued_with_202_and_reverted_whole_by_a_worker(
    api: APIClient, kit: Any, background: None
) -> None:
    run, memories, edges = applied_run(kit)
    records = EvolutionRecord.objects.filter(run=run).count()
    applied = kit.memory_rows(observations=False)
    response = api.post(f"{RUNS}{run.id}/revert/")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["run_id"] == str(run.id) and body["status"] == "completed"
    assert body["revert"]["state"] == "queued"
    assert body["revert"]["records"] == records and body["revert"]["reverted"] == 0
    assert body["revert"]["requested_by"] == kit.user.pk
    # Nothing was undone by the request.
    assert undone(run) == 0
    assert kit.memory_rows(observations=False) == applied
    shown = api.get(f"{RUNS}{run.id}/").json()
    assert shown["status"] == "completed" and shown["summary"]["revert"]["state"] == "queued"

    assert jobs.work_available("w1") == 1
    assert undone(run) == records
    assert kit.memory_rows(observations=False) == memories
    assert kit.edge_rows(observations=False) == edges
    done = api.get(f"{RUNS}{run.id}/").json()
    assert done["status"] == "reverted"
    progress = done["summary"]["revert"]
    assert progress["state"] == "reverted" and progress["reverted"] == progress["records"] == records
    assert progress["requested_by"] == kit.user.pk and progress["transactions"] >= 1
    # Undone as the person who asked, not as nobody.
    actors = set(EvolutionRecord.objects.filter(action="revert").values_list("actor_id", flat=True))
    assert actors == {kit.user.pk}
    assert EvolutionRun.objects.get(pk=run.pk).worker == "w1"
    assert jobs.work_available("w1") == 0


def test_while_a_revert_is_queued_a_second_one_and_applied_runs_are_refused(
    api: APIClient, kit: Any, background: None
) -> None:
    run, _, _ = applied_run(kit)
    assert api.post(f"{RUNS}{run.id}/revert/").status_code == 202
    again = api.post(f"{RUNS}{run.id}/revert/")
    assert again.status_code == 409 and again.json()["error"] == "revert_in_progress"
    applied = api.post(RUNS, {"dry_run": False}, format="json")
    assert applied.status_code == 409 and applied.json()["error"] == "run_in_progress"
    assert "being reverted" in applied.json()["detail"]
    # The service refuses as the API does (a command reverting it in the calling process).
    with pytest.raises(Conflict) as caught:
        services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert caught.value.code == "revert_in_progress"
    assert api.post(RUNS, {"dry_run": True}, format="json").status_code == 202
    assert undone(run) == 0
    assert jobs.work_available("w1") >= 1
    run.refresh_from_db()
    assert run.status == RunStatus.REVERTED
    assert api.post(RUNS, {"dry_run": False}, format="json").status_code == 202


def test_a_revert_that_would_be_refused_is_refused_in_the_request_and_nothing_is_queued(
    api: APIClient, kit: Any, background: None
) -> None:
    run, _, _ = applied_run(kit)
    # A person's later edit of the episode the run's first evolver created: that record cannot be undone.
    edit_the_episode(kit)
    before = kit.memory_rows()
    response = api.post(f"{RUNS}{run.id}/revert/")
    assert response.status_code == 409, response.content
    assert response.json()["error"] == "revert_conflict"
    run.refresh_from_db()
    assert run.revert_state == "" and "revert" not in run.summary
    assert jobs.claim_revert(None, "w1") is None
    assert undone(run) == 0 and kit.memory_rows() == before


def test_a_revert_refused_by_the_worker_stops_with_the_reason_and_frees_the_workspace(
    api: APIClient, kit: Any, background: None
) -> None:
    """Checked in the request, queued, then the workspace changed before a worker came: the worker checks
    again, undoes nothing and says why."""
    run, _, _ = applied_run(kit)
    assert api.post(f"{RUNS}{run.id}/revert/").status_code == 202
    edit_the_episode(kit)
    before = kit.memory_rows()
    assert jobs.work_available("w1") == 1
    assert kit.memory_rows() == before
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.revert_state == "stopped"
    assert run.summary["revert"]["state"] == "stopped" and run.summary["revert"]["error"]
    assert undone(run) == 0
    assert jobs.reverting_run(kit.workspace) is None
    assert api.post(RUNS, {"dry_run": False}, format="json").status_code == 202


def test_a_viewer_and_a_stranger_queue_nothing(
    kit: Any,
    viewer: Any,
    make_user: Callable[[str], Any],
    client_for: Callable[[Any], APIClient],
    background: None,
) -> None:
    run, _, _ = applied_run(kit)
    assert client_for(viewer).post(f"{RUNS}{run.id}/revert/").status_code == 403
    assert client_for(make_user("eve")).post(f"{RUNS}{run.id}/revert/").status_code == 404
    run.refresh_from_db()
    assert run.revert_state == "" and "revert" not in run.summary
    assert jobs.work_available("w1") == 0 and undone(run) == 0


def test_exactly_one_of_two_workers_claims_a_queued_revert(kit: Any, background: None) -> None:
    run, _, _ = applied_run(kit)
    answer = services.run_revert_request(workspace=kit.workspace, run=run, actor=kit.user)
    assert answer.queued and answer.reverts == []
    first = jobs.claim_revert(run.pk, "w1")
    assert first is not None and first.worker == "w1" and first.revert_state == "reverting"
    assert jobs.claim_revert(run.pk, "w2") is None
    assert jobs.claim_revert(None, "w2") is None
    # Nor is it a run to claim: the run itself finished long ago.
    assert jobs.claim(None, "w2") is None


class Killed(BaseException):
    """The worker's process is killed: nothing after this point runs, no handler notes anything."""


def test_a_dead_workers_revert_is_taken_over_and_each_record_undone_once(
    kit: Any, background: None, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, memories, edges = applied_run(kit)
    records = EvolutionRecord.objects.filter(run=run).count()
    services.run_revert_request(workspace=kit.workspace, run=run, actor=kit.user)
    settings.EVOLUTION_TRANSACTION_MS = 0  # one record a transaction
    real = services.revert_records
    calls: list[int] = []

    def dies_after_two(*args: Any, **kwargs: Any) -> Any:
        if len(calls) == 2:
            raise Killed
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(services, "revert_records", dies_after_two)
    dead = jobs.claim_revert(None, "dead")
    assert dead is not None
    with pytest.raises(Killed):
        jobs.work_revert(dead)
    monkeypatch.setattr(services, "revert_records", real)
    assert undone(run) == 2
    run.refresh_from_db()
    assert run.revert_state == "reverting" and run.summary["revert"]["reverted"] == 2
    # While its heartbeat is fresh nobody takes it, and the workspace stays busy.
    assert jobs.claim_revert(None, "alive") is None
    assert jobs.reverting_run(kit.workspace) is not None
    EvolutionRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - jobs.lease() - timedelta(seconds=1))
    assert jobs.reverting_run(kit.workspace) is None
    taken = jobs.claim_revert(None, "alive")
    assert taken is not None and taken.worker == "alive"
    # The dead worker, were it only slow, stops before its next transaction and writes nothing more.
    with pytest.raises(services.RevertTakenOver):
        services.run_revert_claimed(dead)
    assert undone(run) == 2
    done = jobs.work_revert(taken)
    assert done.status == RunStatus.REVERTED and done.revert_state == "reverted"
    assert done.summary["revert"]["records"] == records - 2 and done.summary["revert"]["requested_by"] == kit.user.pk
    assert undone(run) == records
    # Each record undone once: one revert record each.
    assert EvolutionRecord.objects.filter(action="revert").count() == records
    assert kit.memory_rows(observations=False) == memories
    assert kit.edge_rows(observations=False) == edges


def test_an_error_in_the_worker_stops_the_revert_with_each_record_whole_and_reverting_again_finishes(
    api: APIClient, kit: Any, background: None, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, memories, _ = applied_run(kit)
    records = EvolutionRecord.objects.filter(run=run).count()
    assert api.post(f"{RUNS}{run.id}/revert/").status_code == 202
    settings.EVOLUTION_TRANSACTION_MS = 0
    real = services.revert_records
    calls: list[int] = []

    def fails_on_the_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("disk on fire")
        return real(*args, **kwargs)

    monkeypatch.setattr(services, "revert_records", fails_on_the_second)
    assert jobs.work_available("w1") == 1
    monkeypatch.setattr(services, "revert_records", real)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.revert_state == "stopped"
    assert run.summary["revert"]["error"] == "RuntimeError: disk on fire"
    assert undone(run) == 1
    # Not taken up again by itself: the workspace is free, and asking again finishes the rest.
    assert jobs.claim_revert(None, "w2") is None and jobs.reverting_run(kit.workspace) is None
    again = api.post(f"{RUNS}{run.id}/revert/")
    assert again.status_code == 202 and again.json()["revert"]["records"] == records - 1
    assert jobs.work_available("w1") == 1
    run.refresh_from_db()
    assert run.status == RunStatus.REVERTED and undone(run) == records
    assert kit.memory_rows(observations=False) == memories


def test_run_workers_works_a_queued_revert(api: APIClient, kit: Any, background: None) -> None:
    run, memories, _ = applied_run(kit)
    assert api.post(f"{RUNS}{run.id}/revert/").status_code == 202
    out = StringIO()
    call_command("run_workers", "--once", stdout=out)
    assert "worked 1 evolution run(s) and revert(s)" in out.getvalue()
    run.refresh_from_db()
    assert run.status == RunStatus.REVERTED
    assert kit.memory_rows(observations=False) == memories


def test_in_inline_mode_the_caller_works_the_queued_revert_before_it_answers(
    api: APIClient, kit: Any, settings: Any
) -> None:
    settings.EVOLUTION_REVERT_INLINE_RECORDS = 1
    run, memories, _ = applied_run(kit)
    response = api.post(f"{RUNS}{run.id}/revert/")
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "reverted" and response.json()["revert"]["state"] == "reverted"
    assert kit.memory_rows(observations=False) == memories


@pytest.mark.django_db(transaction=True)
def test_the_worker_thread_of_the_web_process_works_a_queued_revert(kit: Any, settings: Any) -> None:
    run, memories, _ = applied_run(kit)
    settings.EVOLUTION_REVERT_INLINE_RECORDS = 1
    settings.EVOLUTION_WORKER = "thread"
    answer = services.run_revert_request(workspace=kit.workspace, run=run, actor=kit.user)
    assert answer.queued
    finished = threading.Event()
    for _ in range(600):
        run.refresh_from_db()
        if run.revert_state not in ("queued", "reverting"):
            finished.set()
            break
        finished.wait(0.05)
    jobs.stop_thread_worker(timeout=10)
    assert finished.is_set() and run.status == RunStatus.REVERTED and run.revert_state == "reverted"
    assert kit.memory_rows(observations=False) == memories
