"""The scheduler: which (workspace, job) pairs are due, each worked once under its lock, a dead worker's job
taken over after the lease, every job's effect at the clock the scheduler was given."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import call_command

from evolution import jobs
from evolution.locks import DatabaseJobLocks, RedisJobLocks
from evolution.models import DreamReport, EvolutionRun, RunStatus, ScheduledJob
from evolution.scheduler import Job, Scheduler, default_jobs
from memories.models import Memory, Workspace
from tests.evolution.conftest import EvolutionKit

pytestmark = [pytest.mark.django_db, pytest.mark.api]

LEASE = timedelta(seconds=120)
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6390/0")


class Clock:
    """The clock a test gives the scheduler, moved by hand."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, **delta: float) -> datetime:
        self.at += timedelta(**delta)
        return self.at


@pytest.fixture
def clock(kit: EvolutionKit) -> Clock:
    return Clock(kit.NOW)


@pytest.fixture
def external(settings: Any) -> None:
    settings.EVOLUTION_WORKER = "external"


def scheduler(clock: Clock, *, name: str = "w1", only: Callable[[Job], bool] | None = None) -> Scheduler:
    chosen = [job for job in default_jobs() if only is None or only(job)]
    return Scheduler(worker=name, now=clock, locks=DatabaseJobLocks(), jobs=chosen, lease=LEASE)


def worked(s: Scheduler, at: datetime | None = None) -> set[tuple[int, str]]:
    return {(w.workspace_id, w.job) for w in s.tick(at)}


def schedule(workspace: Workspace, **hours: float) -> None:
    workspace.evolution_settings = {**(workspace.evolution_settings or {}), **hours}
    workspace.save(update_fields=["evolution_settings"])


def test_every_job_of_every_workspace_runs_when_due_and_its_row_says_so(
    kit: EvolutionKit, clock: Clock, other_workspace: Workspace, external: None
) -> None:
    schedule(kit.workspace, cycle_every_hours=24, dream_every_hours=12)
    s = scheduler(clock)
    ws, other = kit.workspace.pk, other_workspace.pk
    assert worked(s) == {(ws, "retrieval"), (ws, "decay"), (ws, "cycle"), (ws, "dream")} | {
        (other, "retrieval"),
        (other, "decay"),
    }
    row = ScheduledJob.objects.get(workspace=kit.workspace, job="decay")
    assert (row.last_run_at, row.last_status, row.runs, row.last_error) == (kit.NOW, "ok", 1, "")
    # Nothing is due a minute later; the retrieval statistics again after five minutes, the sweep after an hour.
    assert worked(s, clock.advance(minutes=1)) == set()
    assert worked(s, clock.advance(minutes=4)) == {(ws, "retrieval"), (other, "retrieval")}
    assert {job for _, job in worked(s, clock.advance(minutes=55))} == {"retrieval", "decay"}
    assert {job for w, job in worked(s, clock.advance(hours=11)) if w == ws} == {"retrieval", "decay", "dream"}


def test_the_scheduled_cycle_is_queued_once_a_period_and_never_beside_an_open_applied_run(
    kit: EvolutionKit, clock: Clock, external: None
) -> None:
    schedule(kit.workspace, cycle_every_hours=6)
    s = scheduler(clock, only=lambda job: job.name == "cycle")
    assert worked(s) == {(kit.workspace.pk, "cycle")}
    (run,) = EvolutionRun.objects.filter(scheduled=True)
    assert run.started_at == kit.NOW and run.status == RunStatus.QUEUED and not run.dry_run
    # The queued run is still open six hours later: the cycle waits for it.
    assert worked(s, clock.advance(hours=6)) == set()
    assert jobs.work_available("w1") == 1
    assert worked(s) == {(kit.workspace.pk, "cycle")}
    assert EvolutionRun.objects.filter(scheduled=True).count() == 2


def test_the_scheduled_dream_writes_a_report_at_the_scheduler_clock(kit: EvolutionKit, clock: Clock) -> None:
    schedule(kit.workspace, dream_every_hours=24)
    s = scheduler(clock, only=lambda job: job.name == "dream")
    assert worked(s) == {(kit.workspace.pk, "dream")}
    report = DreamReport.objects.get(workspace=kit.workspace)
    assert report.created_at == kit.NOW and report.run is not None and report.run.started_by is None
    assert worked(s, clock.advance(hours=23)) == set()
    assert worked(s, clock.advance(hours=1)) == {(kit.workspace.pk, "dream")}
    assert DreamReport.objects.filter(workspace=kit.workspace).count() == 2


def test_a_job_off_for_a_workspace_never_runs(kit: EvolutionKit, clock: Clock) -> None:
    schedule(kit.workspace, cycle_every_hours=0, dream_every_hours=0)
    s = scheduler(clock, only=lambda job: job.name in ("cycle", "dream"))
    assert worked(s) == set()
    assert worked(s, clock.advance(days=400)) == set()


def test_the_decay_job_fades_memories_at_the_scheduler_clock(kit: EvolutionKit, clock: Clock) -> None:
    m = kit.mem("untouched", age_days=0, activation_score=0.8)
    s = scheduler(clock, only=lambda job: job.name == "decay")
    worked(s, clock.advance(days=30))
    assert Memory.objects.get(id=m.id).activation_score == pytest.approx(0.4, abs=1e-9)


def test_a_failing_job_is_recorded_and_tried_again_a_period_later(kit: EvolutionKit, clock: Clock) -> None:
    calls: list[datetime] = []

    def broken(workspace: Workspace, now: datetime) -> dict[str, Any]:
        calls.append(now)
        raise RuntimeError("disk full")

    job = Job("broken", lambda ws: timedelta(hours=1), broken)
    s = Scheduler(worker="w1", now=clock, locks=DatabaseJobLocks(), jobs=[job], lease=LEASE)
    (done,) = s.tick()
    assert done.status == "failed"
    row = ScheduledJob.objects.get(workspace=kit.workspace, job="broken")
    assert row.last_status == "failed" and row.last_error == "RuntimeError: disk full" and row.lock_token == ""
    assert s.tick(clock.advance(minutes=59)) == []
    assert len(s.tick(clock.advance(minutes=1))) == 1 and len(calls) == 2


def test_a_job_another_worker_holds_is_left_to_it_and_taken_over_after_its_lease(
    kit: EvolutionKit, clock: Clock
) -> None:
    """A worker killed mid-job leaves its lock and no last run: the job stays due, and the next worker
    works it once the lease has run out, exactly once."""
    calls: list[str] = []

    def sweep(workspace: Workspace, now: datetime) -> dict[str, Any]:
        calls.append("w2")
        return {}

    job = Job("sweep", lambda ws: timedelta(hours=1), sweep)
    dead = DatabaseJobLocks().acquire(kit.workspace.pk, "sweep", lease=LEASE, now=clock())
    assert dead is not None
    survivor = Scheduler(worker="w2", now=clock, locks=DatabaseJobLocks(), jobs=[job], lease=LEASE)
    assert survivor.tick() == []
    assert survivor.tick(clock.advance(seconds=119)) == []
    (done,) = survivor.tick(clock.advance(seconds=1))
    assert done.status == "ok" and calls == ["w2"]
    assert survivor.tick() == [] and calls == ["w2"]


def test_a_worker_that_looked_before_another_finished_does_not_work_the_job_again(
    kit: EvolutionKit, clock: Clock
) -> None:
    calls: list[str] = []

    def sweep(workspace: Workspace, now: datetime) -> dict[str, Any]:
        calls.append("ran")
        return {}

    job = Job("sweep", lambda ws: timedelta(hours=1), sweep)
    first = Scheduler(worker="w1", now=clock, locks=DatabaseJobLocks(), jobs=[job], lease=LEASE)
    late = Scheduler(worker="w2", now=clock, locks=DatabaseJobLocks(), jobs=[job], lease=LEASE)
    due = late.due(clock())
    assert len(due) == 1
    first.tick()
    workspace, found = due[0]
    assert late.work(workspace, found, clock()) is None
    assert calls == ["ran"]


def test_maybe_tick_looks_at_most_every_check_interval(kit: EvolutionKit, clock: Clock) -> None:
    calls: list[datetime] = []

    def often(workspace: Workspace, now: datetime) -> dict[str, Any]:
        calls.append(now)
        return {}

    job = Job("often", lambda ws: timedelta(seconds=1), often)
    s = Scheduler(worker="w1", now=clock, locks=DatabaseJobLocks(), jobs=[job], lease=LEASE, check_every=3600)
    s.maybe_tick()
    clock.advance(hours=1)
    s.maybe_tick()
    assert calls == [kit.NOW]


# -- two schedulers on the real redis-server ------------------------------------------------------------


@pytest.fixture
def redis_locks(redis_server: object) -> Iterator[RedisJobLocks]:
    prefix = f"test-scheduler-{uuid.uuid4().hex[:12]}"
    locks = RedisJobLocks(REDIS_URL, prefix=prefix)
    yield locks
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
    client.close()
    locks.close()


def test_two_schedulers_locking_in_redis_work_each_due_job_once(
    kit: EvolutionKit, clock: Clock, other_workspace: Workspace, redis_locks: RedisJobLocks, external: None
) -> None:
    """Both look at the same moment and see the same due jobs; while the first works a job the second is
    refused its lock, and once the first is done the second finds it done. Every real job runs once."""
    schedule(kit.workspace, cycle_every_hours=24, dream_every_hours=24)
    a, b = kit.mem("a"), kit.mem("b")
    kit.retrieve([a, b])
    refused: list[str] = []
    second: Scheduler

    def contended(job: Job) -> Job:
        def work(workspace: Workspace, now: datetime) -> dict[str, Any]:
            # The other worker reaches the same job while this one holds it.
            if second.work(workspace, job, now) is None:
                refused.append(job.name)
            return job.work(workspace, now)

        return Job(job.name, job.period, work, job.due)

    first = Scheduler(worker="w1", now=clock, locks=redis_locks, jobs=[contended(j) for j in default_jobs()])
    second = Scheduler(worker="w2", now=clock, locks=redis_locks)
    seen_by_second = second.due(clock())
    done = first.tick()
    late = [second.work(workspace, job, clock()) for workspace, job in seen_by_second]
    # The kit's rows have no vectors: the embed job is due in the kit's workspace beside the other five.
    assert len(done) == len(seen_by_second) == 7 and late == [None] * 7
    assert "embed" in {w.job for w in done}
    assert sorted(refused) == sorted(w.job for w in done)
    assert set(ScheduledJob.objects.values_list("runs", flat=True)) == {1}
    assert EvolutionRun.objects.filter(scheduled=True).count() == 1
    assert DreamReport.objects.count() == 1
    edge = kit.co_edge(a, b)
    assert edge is not None and edge.co_retrieval_count == 1


def test_a_long_job_keeps_its_redis_lock_past_the_lease(
    kit: EvolutionKit, clock: Clock, redis_locks: RedisJobLocks
) -> None:
    lease = timedelta(milliseconds=300)
    taken: list[bool] = []
    other = Scheduler(worker="w2", now=clock, locks=redis_locks, lease=lease)

    def slow(workspace: Workspace, now: datetime) -> dict[str, Any]:
        time.sleep(0.8)  # well past the lease: the keeper prolongs it every 100 ms
        taken.append(redis_locks.acquire(workspace.pk, "slow", lease=lease, now=now) is not None)
        return {}

    job = Job("slow", lambda ws: timedelta(hours=1), slow)
    first = Scheduler(worker="w1", now=clock, locks=redis_locks, jobs=[job], lease=lease)
    assert len(first.tick()) == 1 and taken == [False]
    assert other.locks.acquire(kit.workspace.pk, "slow", lease=lease, now=clock()) is not None


# -- the worker loops that run it ---------------------------------------------------------------------


def test_run_workers_once_works_the_due_scheduled_jobs_then_the_runs(kit: EvolutionKit, settings: Any) -> None:
    settings.SCHEDULER_ENABLED = True
    settings.REDIS_URL = ""
    settings.EVOLUTION_WORKER = "external"
    out = StringIO()
    call_command("run_workers", "--once", stdout=out)
    assert "worked 2 scheduled job(s)" in out.getvalue()  # the workspace's retrieval statistics and sweep
    assert set(ScheduledJob.objects.values_list("job", flat=True)) == {"retrieval", "decay"}


@pytest.mark.django_db(transaction=True)
def test_the_shared_worker_loop_ticks_its_scheduler_and_works_queued_runs(kit: EvolutionKit, external: None) -> None:
    """One loop for the embedded worker thread and every run_workers thread (jobs.worker_loop)."""
    stop = threading.Event()
    ticks: list[int] = []

    class Ticking:
        def maybe_tick(self) -> object:
            ticks.append(1)
            return []

    run = jobs.run_enqueue(workspace=kit.workspace, actor=None, evolvers=["ExponentialDecay"], dry_run=True)
    done: list[EvolutionRun] = []

    def finished(worked: EvolutionRun, seconds: float) -> None:
        done.append(worked)
        stop.set()

    jobs.worker_loop(stop=stop, name="w1", poll=0.01, scheduler=Ticking(), on_done=finished)
    assert [r.pk for r in done] == [run.pk] and done[0].status == RunStatus.COMPLETED
    assert ticks == [1]
