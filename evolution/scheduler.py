"""The scheduler: the jobs that keep each workspace's memory changing while nobody is looking.

Every worker loop (the embedded worker thread, ``manage.py run_workers``; evolution.jobs.worker_loop) asks
its scheduler to ``tick`` every SCHEDULER_CHECK_SECONDS. A tick looks at every workspace and job, and works
the (workspace, job) pairs that are due, one after the other:

========== ================================================ ===============================================
job        period                                           work
========== ================================================ ===============================================
embed      every tick while memories wait for a vector      their vectors, for up to EMBED_JOB_SECONDS (30)
                                                            per run (memories.embedding_service.embed_pending)
retrieval  RETRIEVAL_STATS_SECONDS (300)                    retrieval profiles and CO_RETRIEVED counts from
                                                            the events since the last run (retrieval_stats)
decay      DECAY_SWEEP_SECONDS (3600)                       decayed activation and retention into the
                                                            stored columns (decay_sweep)
cycle      the workspace's ``cycle_every_hours`` (0: off)   queue the applied evolution cycle (jobs)
dream      the workspace's ``dream_every_hours`` (0: off)   the dream: tiers, reflections (dream)
========== ================================================ ===============================================

(The activation flush every SIGNAL_FLUSH_SECONDS belongs to the signal bus: the web process's flusher
thread, or run_workers on the Redis stream.)

Once across workers: a pair is worked only by the worker holding its lock (evolution.locks: Redis when
REDIS_URL is set, the database otherwise), taken for SCHEDULER_LOCK_SECONDS and prolonged every third of
that while the job works. Due is decided again after the lock is taken, from the job's ``ScheduledJob``
row, so a worker that looked just before another finished does not work the job a second time. The row
records the clock reading a finished run worked at (``last_run_at``); a job is due when it has none or its
period has passed since. A worker killed mid-job leaves no ``last_run_at``: the job stays due, and the next
worker takes the lock once its lease has run out and works it. Each job is safe to work again after
being cut short: the embed job writes only vectors still missing, the sweep commits in batches that the
next run finds done, the retrieval statistics commit with their watermarks in one transaction, the cycle is
one queued run (run-level takeover is evolution.jobs'), the dream is one transaction.

The clock is injected: ``Scheduler(now=...)`` reads it once per tick and passes that reading to every job
as its ``now`` (and to the database locks' leases), so a test can age a workspace by months by moving
the clock it gave the scheduler.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from django.conf import settings
from django.db import connections
from django.db.models import F
from django.utils import timezone

from core.outages import RetryLog
from evolution import decay_sweep, dream, jobs, retrieval_stats
from evolution.locks import JobLocks, job_locks
from evolution.models import ScheduledJob
from memories import embedding_service
from memories.models import Workspace

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
DEFAULT_CHECK_SECONDS: Final = 5.0
DEFAULT_LOCK_SECONDS: Final = 120.0
DEFAULT_RETRIEVAL_STATS_SECONDS: Final = 300.0
DEFAULT_DECAY_SWEEP_SECONDS: Final = 3600.0


def _seconds(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


@dataclass(frozen=True)
class Job:
    """A scheduled job: its name (the lock's and the ScheduledJob row's), its period for a workspace (None:
    off there), what it does at a clock reading (returns its stats), and, for a job whose due time is kept
    elsewhere, its own test of being due (default: its period has passed since ``last_run_at``)."""

    name: str
    period: Callable[[Workspace], timedelta | None]
    work: Callable[[Workspace, datetime], dict[str, Any]]
    due: Callable[[Workspace, datetime, timedelta], bool] | None = None


def _fixed(setting: str, default: float) -> Callable[[Workspace], timedelta | None]:
    def period(workspace: Workspace) -> timedelta | None:
        seconds = _seconds(setting, default)
        return timedelta(seconds=seconds) if seconds > 0 else None

    return period


def _hours(key: str) -> Callable[[Workspace], timedelta | None]:
    def period(workspace: Workspace) -> timedelta | None:
        hours = jobs.schedule_hours(workspace, key)
        return timedelta(hours=hours) if hours > 0 else None

    return period


def _every_tick(workspace: Workspace) -> timedelta | None:
    return timedelta(0)


def _embed(workspace: Workspace, now: datetime) -> dict[str, Any]:
    budget = _seconds("EMBED_JOB_SECONDS", 30.0)
    return embedding_service.embed_pending(workspace=workspace, budget_seconds=budget).as_dict()


def _embed_due(workspace: Workspace, now: datetime, period: timedelta) -> bool:
    return embedding_service.has_pending_vectors(workspace=workspace)


def _retrieval(workspace: Workspace, now: datetime) -> dict[str, Any]:
    return retrieval_stats.retrieval_stats_refresh(workspace=workspace, now=now)


def _decay(workspace: Workspace, now: datetime) -> dict[str, Any]:
    return decay_sweep.decay_sweep(workspace=workspace, now=now).as_dict()


def _cycle(workspace: Workspace, now: datetime) -> dict[str, Any]:
    run = jobs.schedule_cycle(workspace, now)
    return {"queued": str(run.id) if run is not None else None}


def _cycle_due(workspace: Workspace, now: datetime, period: timedelta) -> bool:
    return jobs.cycle_due(workspace, now, period)


def _dream(workspace: Workspace, now: datetime) -> dict[str, Any]:
    report = dream.dream_run(workspace=workspace, actor=None, now=now)
    counts: dict[str, Any] = dict(report.report.get("counts") or {})
    return {"report": report.pk, **counts}


def default_jobs() -> list[Job]:
    """The jobs every worker schedules, in the order a tick works them."""
    return [
        Job("embed", _every_tick, _embed, due=_embed_due),
        Job("retrieval", _fixed("RETRIEVAL_STATS_SECONDS", DEFAULT_RETRIEVAL_STATS_SECONDS), _retrieval),
        Job("decay", _fixed("DECAY_SWEEP_SECONDS", DEFAULT_DECAY_SWEEP_SECONDS), _decay),
        Job("cycle", _hours(jobs.SCHEDULE_SETTING), _cycle, due=_cycle_due),
        Job("dream", _hours(jobs.DREAM_SCHEDULE_SETTING), _dream),
    ]


class _LeaseKeeper:
    """Prolongs the lock its scheduler holds every third of the lease, on a thread (and connection) of its
    own, so a long sweep is not mistaken for a dead worker. The thread lives while jobs follow each other
    and ends about a second after the last: starting one per job cost more than most jobs (a few ms each).
    """

    def __init__(self, locks: JobLocks, lease: timedelta, now: Clock) -> None:
        self._locks, self._lease, self._now = locks, lease, now
        self._failures = RetryLog(log, "prolonging a job's lock")
        self._held: tuple[int, str, str] | None = None
        self._since = 0.0
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, workspace_id: int, job: str, token: str) -> None:
        with self._guard:
            self._held, self._since = (workspace_id, job, token), time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._keep, name="scheduler-lease", daemon=True)
                self._thread.start()

    def drop(self) -> None:
        with self._guard:
            self._held = None

    def _keep(self) -> None:
        every = max(self._lease.total_seconds() / 3, 0.05)
        try:
            while True:
                time.sleep(min(every, 1.0))
                with self._guard:
                    held, since = self._held, self._since
                    if held is None:
                        # Nothing to keep (between ticks): the next `hold` starts a thread again.
                        self._thread = None
                        return
                if time.monotonic() - since < every:
                    continue
                workspace_id, job, token = held
                try:
                    kept = self._locks.extend(workspace_id, job, token, lease=self._lease, now=self._now())
                except Exception as exc:
                    # One failed prolong (the database busy, Redis restarting) must not end the thread: a
                    # thread that ended here left every later job of this scheduler without a keeper.
                    self._failures.failed(exc, f"trying again ({job} of workspace {workspace_id})")
                    kept = False
                else:
                    self._failures.succeeded()
                if not kept:
                    log.warning("lost the lock of %s of workspace %s while working it", job, workspace_id)
                with self._guard:
                    if self._held == held:
                        self._since = time.monotonic()
        finally:
            with self._guard:
                if self._thread is threading.current_thread():
                    self._thread = None
            connections.close_all()


@dataclass(frozen=True)
class Worked:
    """One (workspace, job) a tick worked, and how it went."""

    workspace_id: int
    job: str
    status: str
    stats: dict[str, Any]


class Scheduler:
    """Works the due scheduled jobs of every workspace, each once across workers (see the module docstring).

    now: the clock (default ``timezone.now``), read once per tick. locks: default ``job_locks()`` (Redis
    when REDIS_URL is set). jobs: default ``default_jobs()``. lease: how long a lock holds without being
    prolonged (SCHEDULER_LOCK_SECONDS). check_every: seconds of ``time.monotonic`` between the ticks
    ``maybe_tick`` lets through (SCHEDULER_CHECK_SECONDS).
    """

    def __init__(
        self,
        *,
        worker: str,
        now: Clock | None = None,
        locks: JobLocks | None = None,
        jobs: Sequence[Job] | None = None,
        lease: timedelta | None = None,
        check_every: float | None = None,
    ) -> None:
        self.worker = worker
        self.now: Clock = now or timezone.now
        self.locks = locks or job_locks()
        self.jobs = list(jobs) if jobs is not None else default_jobs()
        self.lease = lease or timedelta(seconds=_seconds("SCHEDULER_LOCK_SECONDS", DEFAULT_LOCK_SECONDS))
        self.check_every = (
            check_every if check_every is not None else _seconds("SCHEDULER_CHECK_SECONDS", DEFAULT_CHECK_SECONDS)
        )
        self._last_tick = float("-inf")
        self._keeper = _LeaseKeeper(self.locks, self.lease, self.now)
        self._failures = RetryLog(log, f"the scheduler of {self.worker}")
        self._job_failures = RetryLog(log, "a scheduled job")

    def tick_soon(self) -> None:
        """Make the next ``maybe_tick`` tick whatever the time since the last one (new work is waiting)."""
        self._last_tick = float("-inf")

    def maybe_tick(self) -> list[Worked]:
        """``tick`` if check_every seconds have passed since the last one (a worker loop calls this often)."""
        started = time.monotonic()
        if started - self._last_tick < self.check_every:
            return []
        self._last_tick = started
        try:
            worked = self.tick()
        except Exception as exc:
            self._failures.failed(exc, f"it looks again in {self.check_every:g} s")
            return []
        self._failures.succeeded()
        return worked

    def tick(self, now: datetime | None = None) -> list[Worked]:
        """Work every due (workspace, job) this worker can lock, at `now` (default: one clock reading)."""
        now = now or self.now()
        worked: list[Worked] = []
        for workspace, job in self.due(now):
            done = self.work(workspace, job, now)
            if done is not None:
                worked.append(done)
        return worked

    def due(self, now: datetime) -> list[tuple[Workspace, Job]]:
        """The (workspace, job) pairs due at `now`, from one read of the workspaces and one of the job rows."""
        last = {
            (ws, name): at
            for ws, name, at in ScheduledJob.objects.values_list("workspace_id", "job", "last_run_at").iterator()
        }
        pairs: list[tuple[Workspace, Job]] = []
        for workspace in Workspace.objects.order_by("id"):
            for job in self.jobs:
                if self._due(job, workspace, now, last.get((workspace.pk, job.name))):
                    pairs.append((workspace, job))
        return pairs

    @staticmethod
    def _due(job: Job, workspace: Workspace, now: datetime, last_run_at: datetime | None) -> bool:
        period = job.period(workspace)
        if period is None:
            return False
        if job.due is not None:
            return job.due(workspace, now, period)
        return last_run_at is None or now - last_run_at >= period

    def work(self, workspace: Workspace, job: Job, now: datetime) -> Worked | None:
        """Lock, check again and work one (workspace, job); None when another worker holds it or did it."""
        token = self.locks.acquire(workspace.pk, job.name, lease=self.lease, now=now)
        if token is None:
            return None
        try:
            last = (
                ScheduledJob.objects.filter(workspace=workspace, job=job.name)
                .values_list("last_run_at", flat=True)
                .first()
            )
            if not self._due(job, workspace, now, last):
                return None  # another worker finished it between this one's look and its lock
            started = time.perf_counter()
            status, error, stats = "ok", "", {}
            self._keeper.hold(workspace.pk, job.name, token)
            try:
                stats = job.work(workspace, now)
            except Exception as exc:
                self._job_failures.failed(exc, f"{job.name} of workspace {workspace.slug} is due again")
                status, error = "failed", f"{type(exc).__name__}: {exc}"
            else:
                self._job_failures.succeeded()
            finally:
                self._keeper.drop()
            seconds = round(time.perf_counter() - started, 3)
            row, _ = ScheduledJob.objects.get_or_create(workspace=workspace, job=job.name)
            ScheduledJob.objects.filter(pk=row.pk).update(
                last_run_at=now,
                last_finished_at=self.now(),
                last_status=status,
                last_error=error,
                last_seconds=seconds,
                last_stats=stats,
                runs=F("runs") + 1,
            )
            log.info("%s: %s of %s %s in %.3f s %s", self.worker, job.name, workspace.slug, status, seconds, stats)
            return Worked(workspace.pk, job.name, status, stats)
        finally:
            self.locks.release(workspace.pk, job.name, token)


# What the Runs page calls each job, in the order it lists them.
JOB_LABELS: Final = {
    "embed": "Vectors of new memories",
    "retrieval": "Retrieval profiles and co-retrieval counts",
    "decay": "Decay sweep",
    "cycle": "Scheduled cycle (queued)",
    "dream": "Dream",
}


def job_rows(*, workspace: Workspace) -> dict[str, ScheduledJob]:
    """The workspace's job rows by job name (what the Runs page shows)."""
    return {row.job: row for row in ScheduledJob.objects.filter(workspace=workspace)}
