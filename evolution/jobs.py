"""Evolution runs as background jobs: enqueue, claim, work, cancel, and take over a dead worker's run.

The run row is the job: ``queued`` -> ``running`` -> ``completed`` | ``failed`` | ``cancelled``. A request
only writes the queued row and answers; a worker works it:

- ``manage.py run_workers``: any number of processes on any number of machines beside the web servers;
- ``EVOLUTION_WORKER=thread`` (the embedded default): one worker thread inside the web process, woken when
  a run is queued, so that one command still runs everything;
- ``EVOLUTION_WORKER=inline``: the caller works the run before it answers (tests, scripts);
- ``EVOLUTION_WORKER=external``: the web process never works runs (run_workers does).

Claiming is one conditional UPDATE whose row count says who won, so exactly one worker takes a run on
SQLite and PostgreSQL alike. A worker refreshes the run's heartbeat between evolvers and while one works;
a run whose heartbeat is older than the lease (``EVOLUTION_RUN_LEASE_SECONDS``) belongs to a worker that
died and is taken over. The taken-over run resumes after the last evolver whose transaction committed
(the run summary commits with that evolver's writes, see evolution.runner), so nothing is applied twice
and nothing is lost; the worker it was taken from stops before its next evolver. Cancelling a queued run
ends it at once; a running one stops before its next write transaction (what committed stays, revertible).

The revert of a large applied run is a job too (evolution.services.run_revert_request): the request checks
it and marks it ``queued`` (``revert_state``, and ``summary["revert"]``), and a worker claims it as it
claims a run (`claim_revert`, one conditional UPDATE) and undoes the records as the person who asked
(`work_revert`). A revert whose worker (or request) stopped saying it is alive for a lease is taken over
the same way; the undo of each record is whole, so the taker goes on with the records still to undo.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import close_old_connections, connections, transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import Conflict, InvalidInput
from evolution import runner
from evolution.evolvers import resolve_names
from evolution.models import OPEN_STATUSES, EvolutionRun, RevertState, RunStatus
from history import audit
from memories import live
from memories.models import Workspace
from surfacing.settings import register_evolution_setting

log = logging.getLogger(__name__)

User = AbstractBaseUser | AnonymousUser
MODES: Final = ("thread", "inline", "external")
# A worker that has not refreshed its run's heartbeat for this long is taken to be dead (setting
# EVOLUTION_RUN_LEASE_SECONDS); a worker refreshes it every quarter of the lease while it works a run.
DEFAULT_LEASE_SECONDS: Final = 120


def lease() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "EVOLUTION_RUN_LEASE_SECONDS", DEFAULT_LEASE_SECONDS)))


# How often an idle worker looks for queued runs it was not woken for (another process queued them).
POLL_SECONDS: Final = 2.0


def worker_mode() -> str:
    mode = str(getattr(settings, "EVOLUTION_WORKER", "thread"))
    if mode not in MODES:
        raise InvalidInput(f"EVOLUTION_WORKER={mode!r}: expected one of {', '.join(MODES)}", field="EVOLUTION_WORKER")
    return mode


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


SCHEDULE_SETTING: Final = "cycle_every_hours"
DREAM_SCHEDULE_SETTING: Final = "dream_every_hours"
MAX_SCHEDULE_HOURS: Final = 24 * 365


def _schedule_hours(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_SCHEDULE_HOURS:
        raise InvalidInput(f"{name}: expected hours between 0 (off) and {MAX_SCHEDULE_HOURS}", field=name)
    return float(value)


register_evolution_setting(SCHEDULE_SETTING, 0.0, _schedule_hours)
register_evolution_setting(DREAM_SCHEDULE_SETTING, 0.0, _schedule_hours)


def schedule_hours(workspace: Workspace, key: str = SCHEDULE_SETTING) -> float:
    """Hours between the workspace's scheduled applied cycles (or dreams, with DREAM_SCHEDULE_SETTING); 0
    when it has no such schedule."""
    value = (workspace.evolution_settings or {}).get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0.0


def cycle_due(workspace: Workspace, now: datetime, period: timedelta) -> bool:
    """Whether the workspace's scheduled cycle is due at `now`: no scheduled run started within `period`
    and no applied run open (a busy workspace is due again at the next look)."""
    recent = EvolutionRun.objects.filter(workspace=workspace, scheduled=True, started_at__gt=now - period).exists()
    return (
        not recent
        and not EvolutionRun.objects.filter(workspace=workspace, dry_run=False, status__in=OPEN_STATUSES).exists()
    )


def schedule_cycle(workspace: Workspace, now: datetime) -> EvolutionRun | None:
    """Queue the workspace's scheduled applied cycle if it is due at `now`; returns the run queued.

    Checked and queued under the workspace's lock, so several workers looking at once queue it once.
    """
    hours = schedule_hours(workspace)
    if hours <= 0:
        return None
    with transaction.atomic():
        Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
        if not cycle_due(workspace, now, timedelta(hours=hours)) or reverting_run(workspace) is not None:
            # A cycle due while a run is being reverted is queued at a later look, once the revert is done.
            return None
        names = resolve_names(None)
        run = EvolutionRun.objects.create(
            workspace=workspace,
            evolvers=names,
            dry_run=False,
            scheduled=True,
            status=RunStatus.QUEUED,
            started_at=now,
            progress={"evolver": "", "index": 0, "done": 0, "total": len(names)},
        )
        _announce(run)
    log.info("scheduled cycle of workspace %s queued as run %s (every %g h)", workspace.slug, run.pk, hours)
    return run


def schedule_due(now: datetime | None = None) -> list[EvolutionRun]:
    """Queue the applied cycle of every workspace whose schedule is due; returns the runs queued.

    Due: ``cycle_every_hours`` > 0 and no scheduled run started within that many hours (`schedule_cycle`).
    The scheduler (evolution.scheduler) does this per workspace under the job's lock.
    """
    now = now or timezone.now()
    queued: list[EvolutionRun] = []
    for workspace in Workspace.objects.filter(**{f"evolution_settings__{SCHEDULE_SETTING}__gt": 0}):
        run = schedule_cycle(workspace, now)
        if run is not None:
            queued.append(run)
    return queued


REVERT_SUMMARY: Final = "revert"
"""Key of a run's summary while and after it is reverted: state (queued, reverting, reverted, stopped; the
run's ``revert_state`` column holds the same), records, reverted, transactions, longest_transaction_ms,
requested_by (the user id who asked), requested_at, error (when stopped), heartbeat (ISO time, refreshed by
every transaction; the run's ``heartbeat_at`` is refreshed with it, and by a worker's heartbeat thread)."""


def reverting_run(workspace: Workspace) -> EvolutionRun | None:
    """The run of ``workspace`` whose revert is under way: queued for a worker, or reverting with a heartbeat
    younger than the lease (an older one belongs to a process that died: a worker, or reverting again, takes
    it over). Wall-clock time, as the heartbeat is (a scheduler's injected clock does not move it)."""
    alive = Q(revert_state=RevertState.QUEUED) | Q(
        revert_state=RevertState.REVERTING, heartbeat_at__gte=timezone.now() - lease()
    )
    return EvolutionRun.objects.filter(alive, workspace=workspace).order_by("heartbeat_at").first()


def run_enqueue(
    *, workspace: Workspace, actor: User | None, evolvers: Sequence[str] | None, dry_run: bool
) -> EvolutionRun:
    """Queue a run of ``evolvers`` (default: the enhanced cycle), in cycle order; returns the queued run.

    Unknown names raise InvalidInput and nothing is written. A workspace has at most one applied run
    queued or running: another is a Conflict (409 ``run_in_progress``) naming it. The worker is woken
    once the row is committed (inline mode works the run here and returns it finished).
    """
    names = resolve_names(evolvers)
    with transaction.atomic():
        # Serialises two requests queuing applied runs of one workspace (SQLite holds its write lock).
        Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
        if not dry_run:
            busy = (
                EvolutionRun.objects.filter(workspace=workspace, dry_run=False, status__in=OPEN_STATUSES)
                .order_by("started_at")
                .first()
            )
            if busy is not None:
                raise Conflict(
                    f"run {busy.id} of workspace {workspace.slug!r} is {busy.status}; one applied run at a time "
                    "(cancel it or wait for it to finish)",
                    code="run_in_progress",
                )
            undoing = reverting_run(workspace)
            if undoing is not None:
                raise Conflict(
                    f"run {undoing.id} of workspace {workspace.slug!r} is being reverted; an applied run starts "
                    "once the revert has finished",
                    code="run_in_progress",
                )
        run = EvolutionRun.objects.create(
            workspace=workspace,
            evolvers=names,
            dry_run=dry_run,
            status=RunStatus.QUEUED,
            started_by=audit.actor_or_none(actor),
            started_at=timezone.now(),
            progress={"evolver": "", "index": 0, "done": 0, "total": len(names)},
        )
        _announce(run)
    mode = worker_mode()
    if mode == "inline":
        claimed = claim(run.pk, worker_name())
        return work(claimed) if claimed is not None else run
    if mode == "thread":
        transaction.on_commit(_thread_worker.wake)
    return run


def run_cancel(*, workspace: Workspace, run: EvolutionRun, actor: User | None) -> EvolutionRun:
    """Cancel a queued run at once, or ask a running one to stop before its next write.

    A finished run is a Conflict (409 ``run_finished``). Returns the run as it is now.
    """
    if run.workspace_id != workspace.pk:
        raise Conflict("run belongs to another workspace", code="not_found")
    now = timezone.now()
    with transaction.atomic():
        if EvolutionRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
            status=RunStatus.CANCELLED, finished_at=now, cancel_requested=True
        ):
            log.info("run %s cancelled before it started by %s", run.pk, audit.actor_or_none(actor))
        elif not EvolutionRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(cancel_requested=True):
            run.refresh_from_db()
            raise Conflict(
                f"run {run.id} is {run.status}; only a queued or running run can be cancelled", code="run_finished"
            )
    run.refresh_from_db()
    _announce(run)
    return run


def claim(run_id: uuid.UUID | None, worker: str, now: datetime | None = None) -> EvolutionRun | None:
    """Take one run for ``worker``: ``run_id`` if given, else the oldest queued run, else the oldest run
    whose worker's lease ran out. None when there is nothing to take (or another worker won it)."""
    now = now or timezone.now()
    claimable = Q(status=RunStatus.QUEUED) | Q(status=RunStatus.RUNNING, heartbeat_at__lt=now - lease())
    return _claim_first(claimable, "started_at", run_id, status=RunStatus.RUNNING, worker=worker, heartbeat_at=now)


def claim_revert(run_id: uuid.UUID | None, worker: str, now: datetime | None = None) -> EvolutionRun | None:
    """Take one run's revert for ``worker``, as `claim` takes a run: ``run_id``'s if given, else the revert
    queued first, else one whose worker (or request) has not said it is alive for a lease. One conditional
    UPDATE whose row count says who won, so exactly one worker takes it; None when there is nothing to take."""
    now = now or timezone.now()
    abandoned = Q(revert_state=RevertState.REVERTING, heartbeat_at__lt=now - lease())
    claimable = Q(revert_state=RevertState.QUEUED) | abandoned
    return _claim_first(
        claimable, "heartbeat_at", run_id, revert_state=RevertState.REVERTING, worker=worker, heartbeat_at=now
    )


def _claim_first(claimable: Q, order: str, run_id: uuid.UUID | None, **taken: Any) -> EvolutionRun | None:
    """The first run (by ``order``; ``run_id``'s if given) still ``claimable`` when one conditional UPDATE
    sets ``taken`` on it: the UPDATE's row count says whether this worker won it or another was first."""
    candidates = EvolutionRun.objects.filter(claimable)
    if run_id is not None:
        candidates = candidates.filter(pk=run_id)
    for pk in candidates.order_by(order).values_list("pk", flat=True)[:8]:
        if EvolutionRun.objects.filter(claimable, pk=pk).update(**taken):
            return EvolutionRun.objects.select_related("workspace").get(pk=pk)
    return None


def revert_queued(run: EvolutionRun) -> None:
    """A revert of ``run`` was queued (and committed): wake this process's worker thread, or in inline mode
    work the revert here before the caller answers; external workers find it at their next look."""
    mode = worker_mode()
    if mode == "inline":
        claimed = claim_revert(run.pk, worker_name())
        if claimed is not None:
            work_revert(claimed)
    elif mode == "thread":
        transaction.on_commit(_thread_worker.wake)


class _Heartbeat:
    """Refreshes a run's heartbeat every quarter lease on its own thread and connection while an evolver
    (or a revert: ``working`` says which) works, so a long one is not mistaken for a dead worker; only while
    this worker still holds it."""

    def __init__(self, run: EvolutionRun, working: Q | None = None) -> None:
        self.run_id = run.pk
        self.worker = run.worker
        self.working = Q(status=RunStatus.RUNNING) if working is None else working
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"run-heartbeat-{run.pk}", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        every = max(lease().total_seconds() / 4, 0.05)
        try:
            while not self._stop.wait(every):
                EvolutionRun.objects.filter(self.working, pk=self.run_id, worker=self.worker).update(
                    heartbeat_at=timezone.now()
                )
        except Exception:
            log.exception("heartbeat of run %s failed; the run may be taken over", self.run_id)
        finally:
            connections.close_all()


def work(run: EvolutionRun) -> EvolutionRun:
    """Work a claimed run to its end; an error outside the evolvers (they are contained) fails it."""
    try:
        with _Heartbeat(run):
            return runner.cycle_run(run=run, names=list(run.evolvers), now=run.started_at)
    except Exception as exc:
        log.exception("evolution run %s failed outside its evolvers", run.pk)
        EvolutionRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
            status=RunStatus.FAILED, finished_at=timezone.now()
        )
        run.refresh_from_db()
        run.summary = {**(run.summary or {}), "error": f"{type(exc).__name__}: {exc}"}
        run.save(update_fields=["summary"])
        _announce(run)
        return run


def work_revert(run: EvolutionRun) -> EvolutionRun:
    """Work a claimed revert to its end: every record still to undo undone (the run ``reverted``), or stopped
    with the reason in its summary's revert entry (a refusal, an error); a revert taken over meanwhile by
    another worker is left to it. Returns the run as it is then."""
    # Imported here: the revert service marks and checks reverts through this module.
    from evolution import services

    try:
        with _Heartbeat(run, Q(revert_state=RevertState.REVERTING)), runner.worker_lock_wait():
            services.run_revert_claimed(run)
    except services.RevertTakenOver as exc:
        log.warning("revert of run %s stopped: %s", run.pk, exc)
    except Conflict as exc:
        log.info("revert of run %s stopped: %s", run.pk, exc.detail)
    except Exception:
        log.exception("revert of run %s failed; it stopped", run.pk)
    run.refresh_from_db()
    return run


def lower_priority(increment: int | None = None) -> int:
    """Make the calling thread `increment` (default EVOLUTION_WORKER_NICE) nicer than it is, on Linux, where
    a thread has a nice value of its own; returns the increment applied (0 elsewhere, or when not allowed).
    Work that can wait (runs, scheduled jobs) then gives way to request threads and web processes on a
    busy CPU, and runs as fast as before on an idle one."""
    step = int(settings.EVOLUTION_WORKER_NICE) if increment is None else increment
    if step <= 0 or not hasattr(os, "setpriority") or not sys.platform.startswith("linux"):
        return 0
    thread = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(19, current + step))
    except OSError as exc:
        log.warning("could not lower the priority of worker thread %s: %s", thread, exc)
        return 0
    return min(19, current + step) - current


class Ticks(Protocol):
    """What a worker loop asks of its scheduler (evolution.scheduler.Scheduler)."""

    def maybe_tick(self) -> object: ...

    def tick_soon(self) -> None: ...


def worker_loop(
    *,
    stop: threading.Event,
    name: str,
    poll: float = POLL_SECONDS,
    idle: Callable[[float], object] | None = None,
    scheduler: Ticks | None = None,
    active: Callable[[], bool] | None = None,
    now: Callable[[], datetime] = timezone.now,
    on_done: Callable[[EvolutionRun, float], None] | None = None,
) -> None:
    """One worker's loop, until `stop` is set: let the scheduler tick (it works the due scheduled jobs at
    most every SCHEDULER_CHECK_SECONDS), claim and work one queued revert or else one queued run (a revert
    first: someone asked to undo a change and waits), or wait `poll` seconds (``idle``, default ``stop.wait``)
    when there is none. ``active`` False skips a turn (the thread worker of a process whose EVOLUTION_WORKER
    changed); ``on_done`` hears of every run or revert worked and its seconds. An error is logged and the loop
    goes on; each turn ends by closing this thread's database connections.

    The loop of the embedded worker thread and of every ``run_workers`` thread.
    """
    wait = idle or stop.wait
    lower_priority()
    while not stop.is_set():
        try:
            if active is not None and not active():
                wait(poll)
                continue
            close_old_connections()
            if scheduler is not None:
                scheduler.maybe_tick()
            job = _claim_next(name, now())
            if job is None:
                wait(poll)
                continue
            run, work_it = job
            started = time.monotonic()
            done = work_it(run)
            if on_done is not None:
                on_done(done, time.monotonic() - started)
        except Exception:
            log.exception("evolution worker %s failed outside a run's evolvers; it goes on", name)
            wait(poll)
        finally:
            # The thread's own connection: nobody else closes it.
            connections.close_all()


def _claim_next(worker: str, now: datetime) -> tuple[EvolutionRun, Callable[[EvolutionRun], EvolutionRun]] | None:
    """The next job for ``worker`` and how to work it: a queued (or abandoned) revert, else a queued run."""
    revert = claim_revert(None, worker, now)
    if revert is not None:
        return revert, work_revert
    run = claim(None, worker, now)
    return (run, work) if run is not None else None


def scheduler_enabled() -> bool:
    """Whether worker loops run the scheduled jobs (SCHEDULER_ENABLED, on by default)."""
    return bool(getattr(settings, "SCHEDULER_ENABLED", True))


def new_scheduler(name: str) -> Ticks | None:
    """The scheduler of a worker loop named `name` (None when SCHEDULER_ENABLED is off)."""
    if not scheduler_enabled():
        return None
    # Imported here: the scheduler queues cycles through this module.
    from evolution.scheduler import Scheduler

    return Scheduler(worker=name)


def work_available(worker: str, *, limit: int | None = None) -> int:
    """Claim and work reverts and runs until none is left (or ``limit`` were worked); returns how many were
    worked."""
    done = 0
    while limit is None or done < limit:
        job = _claim_next(worker, timezone.now())
        if job is None:
            break
        run, work_it = job
        work_it(run)
        done += 1
    return done


def _announce(run: EvolutionRun) -> None:
    live.workspace_event_on_commit(
        run.workspace_id,
        runner.PROGRESS_EVENT,
        {"run_id": str(run.id), "status": run.status, **(run.progress or {})},
    )


class _ThreadWorker:
    """The embedded default's worker: one daemon thread per process, started by the first queued run (or
    by the web process, so that schedules run), woken by each later one, looking for runs queued elsewhere
    every ``POLL_SECONDS`` and running the scheduled jobs (`worker_loop`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._scheduler: Ticks | None = None

    def start(self) -> None:
        """Start the thread if it is not running (a web process starts it so that schedules run)."""
        self.wake()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread after the run it is working (process exit, tests)."""
        with self._lock:
            thread = self._thread
            self._stop.set()
        self._wake.set()
        if thread is not None:
            thread.join(timeout)

    def wake(self) -> None:
        with self._lock:
            self._stop.clear()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="evolution-worker", daemon=True)
                self._thread.start()
        self._wake.set()

    def jobs_waiting(self) -> None:
        """New work for the scheduled jobs (memories waiting for vectors): tick at once, if the thread runs."""
        with self._lock:
            scheduler = self._scheduler if self._thread is not None and self._thread.is_alive() else None
        if scheduler is not None:
            scheduler.tick_soon()
            self._wake.set()

    def _idle(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def _run(self) -> None:
        name = worker_name()
        self._scheduler = new_scheduler(name)
        worker_loop(
            stop=self._stop,
            name=name,
            idle=self._idle,
            scheduler=self._scheduler,
            # Switched off since it started (settings changed under a running process).
            active=lambda: worker_mode() == "thread",
        )


_thread_worker = _ThreadWorker()


def embed_job_wanted() -> None:
    """A write left vectors to the embed job: the embedded worker (if this process runs one) ticks now
    rather than at its next SCHEDULER_CHECK_SECONDS."""
    _thread_worker.jobs_waiting()


def start_thread_worker() -> bool:
    """Start this process's worker thread when ``EVOLUTION_WORKER`` is ``thread``; True if it runs."""
    if worker_mode() != "thread":
        return False
    _thread_worker.start()
    return True


def stop_thread_worker(timeout: float | None = None) -> None:
    """Stop this process's worker thread, if it runs, once its current run is done."""
    _thread_worker.stop(timeout)
